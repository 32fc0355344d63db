#include "proto/wire/parse_error.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <climits>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace tensord::wire {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptor;
using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

// protobuf's ParseContext reads a tag in at most 5 bytes and a length in at
// most 5, the fifth below 8 (a length under 2 GiB); a varint value takes at
// most 10.
constexpr int kMaxTagBytes = 5;
constexpr int kMaxSizeBytes = 5;
constexpr int kMaxVarintBytes = 10;

// "1 byte", "12 bytes".
std::string Bytes(size_t n) {
  return absl::StrCat(n, n == 1 ? " byte" : " bytes");
}

// Walks one serialized message the way protobuf's parser does, stopping at
// the first problem, which it records with the path of fields around it.
class Walker {
 public:
  explicit Walker(std::string_view bytes)
      : bytes_(bytes),
        input_(reinterpret_cast<const uint8_t*>(bytes.data()),
               static_cast<int>(bytes.size())) {
    input_.PushLimit(static_cast<int>(bytes.size()));
  }

  // Walks the fields up to the current limit (`type` null: an unknown
  // group's). `group_tag` != 0: they are a group's, which must end with its
  // end-group tag. False, with the error recorded, on the first problem.
  bool Fields(const Descriptor* type, int depth, uint32_t group_tag) {
    while (input_.BytesUntilLimit() > 0) {
      const int at = input_.CurrentPosition();
      uint32_t tag = 0;
      if (!ReadTag(&tag)) return false;
      const uint32_t number = tag >> 3;
      const int wire = static_cast<int>(tag & 7);
      if (tag == 0) {
        return Fail(
            absl::StrCat("tag 0 at byte ", at, " (no field has number 0)"));
      }
      if (wire == WireFormatLite::WIRETYPE_END_GROUP) {
        if (group_tag != 0 && tag == group_tag + 1) return true;
        return Fail(
            group_tag == 0
                ? absl::StrCat("end-group tag of field ", number, " at byte ",
                               at, " without a start-group tag")
                : absl::StrCat("end-group tag of field ", number, " at byte ",
                               at, " inside the group of field ",
                               group_tag >> 3));
      }
      if (number == 0) {
        return Fail(absl::StrCat("field number 0 at byte ", at));
      }
      const FieldDescriptor* field =
          type == nullptr ? nullptr
                          : type->FindFieldByNumber(static_cast<int>(number));
      path_.push_back(
          field == nullptr
              ? absl::StrCat("field ", number, " (unknown)")
              : absl::StrCat("field ", number, " (", field->name(), ")"));
      if (!Field(field, tag, depth, at)) return false;
      path_.pop_back();
    }
    if (group_tag != 0) {
      return Fail(absl::StrCat("group not closed: the message ends at byte ",
                               input_.CurrentPosition(),
                               " before its end-group tag"));
    }
    return true;
  }

  const std::string& error() const { return error_; }

 private:
  // One field whose tag is read; the path names it.
  bool Field(const FieldDescriptor* field, uint32_t tag, int depth, int at) {
    const int wire = static_cast<int>(tag & 7);
    // protobuf parses a known field only with its declared wire type (or,
    // repeated and packable, packed); any other is an unknown field.
    bool declared = false;
    bool packed = false;
    if (field != nullptr) {
      declared =
          wire == WireFormatLite::WireTypeForFieldType(
                      static_cast<WireFormatLite::FieldType>(field->type()));
      packed = !declared && field->is_packable() &&
               wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
    }
    switch (wire) {
      case WireFormatLite::WIRETYPE_VARINT:
        return SkipVarint();
      case WireFormatLite::WIRETYPE_FIXED64:
        return SkipFixed(8);
      case WireFormatLite::WIRETYPE_FIXED32:
        return SkipFixed(4);
      case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
        uint32_t size = 0;
        if (!ReadSize(&size)) return false;
        const int left = input_.BytesUntilLimit();
        if (size > static_cast<uint32_t>(left)) {
          return Fail(absl::StrCat("length ", size,
                                   " runs past the end of the message (",
                                   Bytes(left), " left)"));
        }
        if (packed) return Packed(field, static_cast<int>(size));
        if (declared && field->type() == FieldDescriptor::TYPE_MESSAGE) {
          const CodedInputStream::Limit outer =
              input_.PushLimit(static_cast<int>(size));
          if (!Nest(depth) ||
              !Fields(field->message_type(), depth + 1, /*group_tag=*/0)) {
            return false;
          }
          input_.PopLimit(outer);
          return true;
        }
        if (declared && field->type() == FieldDescriptor::TYPE_STRING &&
            field->file()->syntax() == FileDescriptor::SYNTAX_PROTO3) {
          size_t bad = 0;
          const std::string_view s = bytes_.substr(
              static_cast<size_t>(input_.CurrentPosition()), size);
          if (!IsValidUtf8(s, &bad)) {
            return Fail(absl::StrFormat(
                "not valid UTF-8 (a string field): byte 0x%02x at offset %d "
                "of %d",
                static_cast<uint8_t>(s[bad]), bad, s.size()));
          }
        }
        input_.Skip(static_cast<int>(size));
        return true;
      }
      case WireFormatLite::WIRETYPE_START_GROUP:
        return Nest(depth) && Fields(declared ? field->message_type() : nullptr,
                                     depth + 1, tag);
      default:  // 6 and 7; end-group tags are handled by the caller
        return Fail(absl::StrCat("invalid wire type ", wire, " at byte ", at));
    }
  }

  // A packed repeated field's elements, `size` bytes.
  bool Packed(const FieldDescriptor* field, int size) {
    const auto element = WireFormatLite::WireTypeForFieldType(
        static_cast<WireFormatLite::FieldType>(field->type()));
    if (element != WireFormatLite::WIRETYPE_VARINT) {
      const int width = element == WireFormatLite::WIRETYPE_FIXED64 ? 8 : 4;
      if (size % width != 0) {
        return Fail(absl::StrCat("packed field of ", size,
                                 " bytes is not a whole number of ", width,
                                 "-byte elements"));
      }
      input_.Skip(size);
      return true;
    }
    const CodedInputStream::Limit outer = input_.PushLimit(size);
    while (input_.BytesUntilLimit() > 0) {
      if (!SkipVarint()) return false;
    }
    input_.PopLimit(outer);
    return true;
  }

  // Entering a message or group one level below `depth`: protobuf refuses
  // to nest deeper than its recursion limit.
  bool Nest(int depth) {
    const int limit = CodedInputStream::GetDefaultRecursionLimit();
    if (depth + 1 > limit) {
      return Fail(absl::StrCat("messages and groups nested more than ", limit,
                               " deep (at byte ", input_.CurrentPosition(),
                               ")"));
    }
    return true;
  }

  // A tag: a varint of at most 5 bytes, kept modulo 2^32 (as protobuf).
  bool ReadTag(uint32_t* tag) {
    const int at = input_.CurrentPosition();
    uint32_t value = 0;
    for (int i = 0; i < kMaxTagBytes; ++i) {
      uint8_t byte = 0;
      if (!input_.ReadRaw(&byte, 1)) {
        return Fail(absl::StrCat("truncated tag at byte ", at));
      }
      value += static_cast<uint32_t>(byte & 0x7f) << (7 * i);
      if (byte < 0x80) {
        *tag = value;
        return true;
      }
    }
    return Fail(absl::StrCat("tag at byte ", at, " is longer than ",
                             kMaxTagBytes, " bytes"));
  }

  // A length: at most 5 bytes, below 2 GiB.
  bool ReadSize(uint32_t* size) {
    const int at = input_.CurrentPosition();
    uint32_t value = 0;
    for (int i = 0; i < kMaxSizeBytes; ++i) {
      uint8_t byte = 0;
      if (!input_.ReadRaw(&byte, 1)) {
        return Fail(absl::StrCat("truncated length at byte ", at));
      }
      // The last byte may add at most 3 bits: >= 2 GiB, or longer.
      if (i == kMaxSizeBytes - 1 && byte >= 8) break;
      value += static_cast<uint32_t>(byte & 0x7f) << (7 * i);
      if (byte < 0x80) {
        if (value > static_cast<uint32_t>(INT_MAX)) break;
        *size = value;
        return true;
      }
    }
    return Fail(absl::StrCat("length at byte ", at,
                             " is not a size below 2 GiB in at most 5 bytes"));
  }

  bool SkipVarint() {
    const int at = input_.CurrentPosition();
    const int left = input_.BytesUntilLimit();
    uint64_t value = 0;
    if (input_.ReadVarint64(&value)) return true;
    return Fail(left < kMaxVarintBytes
                    ? absl::StrCat("truncated varint at byte ", at)
                    : absl::StrCat("varint at byte ", at, " is longer than ",
                                   kMaxVarintBytes, " bytes"));
  }

  bool SkipFixed(int width) {
    const int at = input_.CurrentPosition();
    const int left = input_.BytesUntilLimit();
    if (left >= width) {
      input_.Skip(width);
      return true;
    }
    return Fail(absl::StrCat("truncated fixed", width * 8, " at byte ", at,
                             " (", width, " bytes needed, ", left, " left)"));
  }

  bool Fail(const std::string& problem) {
    if (path_.empty()) {
      error_ = problem;
    } else if (path_.size() <= 2 * kPathEnds + 1) {
      error_ = absl::StrCat(absl::StrJoin(path_, " > "), ": ", problem);
    } else {  // deep nesting: its two ends
      error_ = absl::StrCat(
          absl::StrJoin(path_.begin(), path_.begin() + kPathEnds, " > "),
          " > (", path_.size() - 2 * kPathEnds, " more) > ",
          absl::StrJoin(path_.end() - kPathEnds, path_.end(), " > "), ": ",
          problem);
    }
    return false;
  }

  static constexpr size_t kPathEnds = 3;  // fields shown at each end

  const std::string_view bytes_;
  CodedInputStream input_;
  std::vector<std::string> path_;  // the fields the walk is inside
  std::string error_;
};

}  // namespace

std::optional<std::string> FindParseError(const Descriptor& type,
                                          std::string_view bytes) {
  if (bytes.size() > static_cast<size_t>(INT_MAX)) {
    return absl::StrCat("a message of ", bytes.size(),
                        " bytes is over protobuf's 2 GiB limit");
  }
  Walker walker(bytes);
  if (walker.Fields(&type, /*depth=*/0, /*group_tag=*/0)) return std::nullopt;
  return walker.error();
}

std::string DescribeParseError(const Descriptor& type, std::string_view bytes) {
  std::optional<std::string> found = FindParseError(type, bytes);
  if (found.has_value()) {
    return absl::StrCat(type.full_name(), " is malformed: ", *found);
  }
  return absl::StrCat(type.full_name(),
                      " is malformed (protobuf could not parse ",
                      Bytes(bytes.size()), ")");
}

bool IsValidUtf8(std::string_view s, size_t* bad_at) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b = p[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    // The sequence's length and the range of its second byte, which rules
    // out overlong forms (E0, F0), surrogates (ED) and > U+10FFFF (F4).
    size_t len = 0;
    uint8_t lo = 0x80;
    uint8_t hi = 0xbf;
    if (b >= 0xc2 && b <= 0xdf) {
      len = 2;
    } else if (b == 0xe0) {
      len = 3;
      lo = 0xa0;
    } else if ((b >= 0xe1 && b <= 0xec) || b == 0xee || b == 0xef) {
      len = 3;
    } else if (b == 0xed) {
      len = 3;
      hi = 0x9f;
    } else if (b == 0xf0) {
      len = 4;
      lo = 0x90;
    } else if (b >= 0xf1 && b <= 0xf3) {
      len = 4;
    } else if (b == 0xf4) {
      len = 4;
      hi = 0x8f;
    }
    bool ok = len != 0 && n - i >= len && p[i + 1] >= lo && p[i + 1] <= hi;
    for (size_t k = 2; ok && k < len; ++k) ok = (p[i + k] & 0xc0) == 0x80;
    if (!ok) {
      if (bad_at != nullptr) *bad_at = i;
      return false;
    }
    i += len;
  }
  return true;
}

}  // namespace tensord::wire
