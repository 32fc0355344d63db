// Bulk messages on the wire without protobuf copies of their payload.
//
// Upload's UploadRequest and Fetch's FetchChunk each carry one large `bytes`
// field. Parsed the ordinary way, protobuf copies that field out of gRPC's
// received slices into a std::string, and serializing copies it again into
// a fresh slice; the caller then copies it a third time into (or out of)
// the tensor. These helpers read and write the same wire format straight
// from and into slices:
//   - ScanBulkMessage parses every field except the bulk one (through
//     protobuf itself) and reports the bulk field's size;
//   - ForEachBulkPiece hands the bulk field to a sink as the pieces lie in
//     the received slices (no copy);
//   - BulkMessageBuilder lays a message out in one slice with room for the
//     bulk field, which the caller fills in place.
// The bytes are exactly what protobuf would write or accept, so peers that
// use the generated classes (the Python client, older clients) interoperate.
// Thread-safety: functions are pure; a builder belongs to one thread.
#ifndef TENSORD_PROTO_WIRE_BULK_H_
#define TENSORD_PROTO_WIRE_BULK_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include <google/protobuf/message_lite.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

namespace tensord::wire {

struct BulkField {
  int count = 0;        // occurrences in the message (a valid one has <= 1)
  uint64_t bytes = 0;   // size of the last occurrence
};

// Parses the message in `buffer` into `rest`, except field `bulk_field`
// (length-delimited), whose occurrences are counted in `bulk` and skipped.
// False with `error` set when the bytes are not a valid message of
// `rest`'s type.
bool ScanBulkMessage(grpc::ByteBuffer* buffer, uint32_t bulk_field,
                     google::protobuf::MessageLite* rest, BulkField* bulk,
                     std::string* error);

// Calls `sink(data, n)` for consecutive pieces of every occurrence of field
// `bulk_field`, in order, pointing into the buffer's slices (valid during
// the call only). Stops and returns false when `sink` does; false with
// `error` set on malformed input.
bool ForEachBulkPiece(
    grpc::ByteBuffer* buffer, uint32_t bulk_field,
    const std::function<bool(const uint8_t* data, size_t n)>& sink,
    std::string* error);

// Builds `head`'s fields, then field `bulk_field` of `n` bytes that the
// caller writes at data(), then `tail`'s fields, as one slice:
//   BulkMessageBuilder b(head, kDataField, n);
//   fill(b.data(), n);
//   grpc::ByteBuffer message = b.Finish(tail);
class BulkMessageBuilder {
 public:
  BulkMessageBuilder(const google::protobuf::MessageLite& head,
                     uint32_t bulk_field, size_t n);
  uint8_t* data() { return data_; }
  // Appends `tail` (small: a few fixed fields) and returns the message.
  grpc::ByteBuffer Finish(const google::protobuf::MessageLite& tail);

 private:
  grpc::Slice slice_;  // owns the bytes below
  uint8_t* base_;   // slice_'s first byte (ours to write: a fresh slice)
  uint8_t* data_;   // the bulk field's bytes inside slice_
  size_t end_;      // bytes of slice_ used up to the end of the bulk field
};

}  // namespace tensord::wire

#endif  // TENSORD_PROTO_WIRE_BULK_H_
