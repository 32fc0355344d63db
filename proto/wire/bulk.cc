#include "proto/wire/bulk.h"

#include <grpc/slice.h>

#include <algorithm>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/proto_buffer_reader.h>

namespace tensord::wire {
namespace {

using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;
using google::protobuf::internal::WireFormatLite;

constexpr size_t kTailRoom = 32;  // FetchChunk's tail (crc32) needs 6

bool IsBulk(uint32_t tag, uint32_t bulk_field) {
  return WireFormatLite::GetTagFieldNumber(tag) == static_cast<int>(bulk_field) &&
         WireFormatLite::GetTagWireType(tag) ==
             WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
}

bool Malformed(std::string* error, const char* what) {
  *error = what;
  return false;
}

}  // namespace

bool ScanBulkMessage(grpc::ByteBuffer* buffer, uint32_t bulk_field,
                     google::protobuf::MessageLite* rest, BulkField* bulk,
                     std::string* error) {
  *bulk = BulkField{};
  if (!buffer->Valid()) {  // no bytes: the empty message
    rest->Clear();
    return true;
  }
  grpc::ProtoBufferReader reader(buffer);
  if (!reader.status().ok()) return Malformed(error, "unreadable message");
  std::string other;  // every field but the bulk one, as it came
  {
    CodedInputStream input(&reader);
    google::protobuf::io::StringOutputStream sink(&other);
    CodedOutputStream out(&sink);
    while (const uint32_t tag = input.ReadTag()) {
      if (IsBulk(tag, bulk_field)) {
        uint32_t n = 0;
        if (!input.ReadVarint32(&n) || !input.Skip(static_cast<int>(n))) {
          return Malformed(error, "truncated bulk field");
        }
        ++bulk->count;
        bulk->bytes = n;
        continue;
      }
      // Copies the field, tag included, to `other`.
      if (!WireFormatLite::SkipField(&input, tag, &out)) {
        return Malformed(error, "malformed field");
      }
    }
    if (!input.ConsumedEntireMessage()) {
      return Malformed(error, "malformed tag");
    }
  }
  if (!rest->ParseFromString(other)) {
    return Malformed(error, "fields of the wrong type");
  }
  return true;
}

bool ForEachBulkPiece(
    grpc::ByteBuffer* buffer, uint32_t bulk_field,
    const std::function<bool(const uint8_t* data, size_t n)>& sink,
    std::string* error) {
  if (!buffer->Valid()) return true;  // the empty message
  grpc::ProtoBufferReader reader(buffer);
  if (!reader.status().ok()) return Malformed(error, "unreadable message");
  CodedInputStream input(&reader);
  while (const uint32_t tag = input.ReadTag()) {
    if (!IsBulk(tag, bulk_field)) {
      if (!WireFormatLite::SkipField(&input, tag)) {
        return Malformed(error, "malformed field");
      }
      continue;
    }
    uint32_t left = 0;
    if (!input.ReadVarint32(&left)) return Malformed(error, "truncated bulk field");
    while (left > 0) {
      const void* data = nullptr;
      int size = 0;
      if (!input.GetDirectBufferPointer(&data, &size) || size <= 0) {
        return Malformed(error, "truncated bulk field");
      }
      const uint32_t n = std::min(left, static_cast<uint32_t>(size));
      if (!sink(static_cast<const uint8_t*>(data), n)) return false;
      input.Skip(static_cast<int>(n));
      left -= n;
    }
  }
  if (!input.ConsumedEntireMessage()) return Malformed(error, "malformed tag");
  return true;
}

BulkMessageBuilder::BulkMessageBuilder(const google::protobuf::MessageLite& head,
                                       uint32_t bulk_field, size_t n) {
  const size_t head_bytes = head.ByteSizeLong();
  const uint32_t tag = WireFormatLite::MakeTag(
      static_cast<int>(bulk_field), WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
  const size_t prefix = head_bytes + CodedOutputStream::VarintSize32(tag) +
                        CodedOutputStream::VarintSize64(n);
  grpc_slice slice = grpc_slice_malloc(prefix + n + kTailRoom);
  base_ = GRPC_SLICE_START_PTR(slice);
  slice_ = grpc::Slice(slice, grpc::Slice::STEAL_REF);
  uint8_t* p = base_;
  p = head.SerializeWithCachedSizesToArray(p);
  p = CodedOutputStream::WriteVarint32ToArray(tag, p);
  p = CodedOutputStream::WriteVarint64ToArray(n, p);
  data_ = p;
  end_ = prefix + n;
}

grpc::ByteBuffer BulkMessageBuilder::Finish(
    const google::protobuf::MessageLite& tail) {
  const size_t tail_bytes = tail.ByteSizeLong();
  if (tail_bytes <= kTailRoom) {
    tail.SerializeWithCachedSizesToArray(base_ + end_);
    grpc::Slice used = slice_.sub(0, end_ + tail_bytes);
    return grpc::ByteBuffer(&used, 1);
  }
  std::vector<grpc::Slice> slices{slice_.sub(0, end_),
                                  grpc::Slice(tail.SerializeAsString())};
  return grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace tensord::wire
