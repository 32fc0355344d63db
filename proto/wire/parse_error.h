// Why bytes are not a valid protobuf message, in words.
//
// protobuf's parser answers a malformed message with `false` and nothing
// more. FindParseError walks the same bytes the way protobuf's parser does
// (3.21: tags, varints, lengths, groups, packed fields, nesting depth, UTF-8
// in proto3 `string` fields), driven by the message's Descriptor and
// recursing into message fields, and names the first thing that makes the
// parse fail, with the field path and the byte offset. The service answers
// a request that does not parse with INVALID_ARGUMENT and this text.
//
// Only what makes protobuf fail is reported: a known field sent with another
// wire type is an unknown field to protobuf, not an error, and `bytes`
// fields are not UTF-8 checked.
// Thread-safety: pure functions.
#ifndef TENSORD_PROTO_WIRE_PARSE_ERROR_H_
#define TENSORD_PROTO_WIRE_PARSE_ERROR_H_

#include <google/protobuf/descriptor.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace tensord::wire {

// The first problem in `bytes` as a serialized `type` message, as
// "<path>: <problem>", the path naming the fields it lies in from the
// outside in ("field 2 (op) > field 1 (binary) > field 2 (lhs)"; empty, and
// the ": " with it, at the top level). Examples:
//   - field 2 (device): length 100 runs past the end of the message (12
//     bytes left)
//   - field 1 (session): invalid wire type 7 at byte 5
//   - field 3 (dtype): truncated varint at byte 9
//   - field 2 (device): not valid UTF-8 (a string field): byte 0xff at
//     offset 3 of 5
// std::nullopt when the walk finds nothing wrong (protobuf parses the bytes).
std::optional<std::string> FindParseError(
    const google::protobuf::Descriptor& type, std::string_view bytes);

// The message for bytes protobuf refused to parse as a `type`:
// "<type's full name> is malformed: <FindParseError>", or, should the walk
// find nothing, "<type's full name> is malformed (protobuf could not parse
// <n> bytes)".
std::string DescribeParseError(const google::protobuf::Descriptor& type,
                               std::string_view bytes);

// True when `s` is well-formed UTF-8 (Unicode's table 3-7): no overlong
// forms, no surrogates (U+D800..U+DFFF), nothing above U+10FFFF. When false
// and `bad_at` is not null, `*bad_at` is the offset of the first byte of the
// first ill-formed sequence.
bool IsValidUtf8(std::string_view s, size_t* bad_at = nullptr);

}  // namespace tensord::wire

#endif  // TENSORD_PROTO_WIRE_PARSE_ERROR_H_
