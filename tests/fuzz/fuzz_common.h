// Shared by the service fuzzer and its seed-corpus generator: the RPCs that
// are fuzz targets, and how an input is laid out.
//
// An input is one mode byte followed by the payload:
//   mode & 1 == 1  raw: the payload bytes go on the wire as they are (for
//                  Upload: split into messages, see below), so protobuf
//                  parsing of hostile bytes is exercised;
//   mode & 1 == 0  structured: the payload is parsed as the request message;
//                  if it parses, every `session` field that is empty or
//                  shorter than 4 bytes becomes the live session, and every
//                  handle-valued field below kHandleSlots becomes one of the
//                  live pre-created tensors; then it is serialized and sent.
// For the client-streaming Upload and Stream the payload is a sequence of
// messages,
// each a 2-byte little-endian length followed by that many bytes (at most
// kMaxStreamMessages; a short tail is one last message).
#ifndef TENSORD_TESTS_FUZZ_FUZZ_COMMON_H_
#define TENSORD_TESTS_FUZZ_FUZZ_COMMON_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tensord::fuzz {

inline constexpr const char* kRpcs[] = {
    "ListDevices", "OpenSession", "CloseSession", "Create",
    "Upload",      "To",          "Binary",       "MatMul",
    "Run",         "Execute",     "Fetch",        "Release",
    "GetTensor",   "ListTensors", "ListSessions", "ListAllTensors",
    "GetStats",    "KeepAlive",   "Read",         "RegisterSharedMemory",
    "UnregisterSharedMemory", "UploadFromSharedMemory", "FetchToSharedMemory",
    "GetLimits",   "Stream",
};

inline constexpr uint64_t kHandleSlots = 64;
inline constexpr size_t kMaxStreamMessages = 16;

// The RPCs whose input is a sequence of messages (Upload; Stream, whose
// replies are a stream too).
inline bool IsClientStreaming(std::string_view rpc) {
  return rpc == "Upload" || rpc == "Stream";
}

// Splits an Upload payload into messages (see the layout above).
inline std::vector<std::string> SplitStream(std::string_view payload) {
  std::vector<std::string> out;
  while (!payload.empty() && out.size() < kMaxStreamMessages) {
    if (payload.size() < 2) {
      out.emplace_back(payload);
      break;
    }
    const size_t n =
        static_cast<uint8_t>(payload[0]) |
        (static_cast<size_t>(static_cast<uint8_t>(payload[1])) << 8);
    payload.remove_prefix(2);
    const size_t take = n < payload.size() ? n : payload.size();
    out.emplace_back(payload.substr(0, take));
    payload.remove_prefix(take);
  }
  return out;
}

inline std::string JoinStream(const std::vector<std::string>& messages) {
  std::string out;
  for (const std::string& m : messages) {
    out.push_back(static_cast<char>(m.size() & 0xff));
    out.push_back(static_cast<char>((m.size() >> 8) & 0xff));
    out += m;
  }
  return out;
}

}  // namespace tensord::fuzz

#endif  // TENSORD_TESTS_FUZZ_FUZZ_COMMON_H_
