// Shared by the service fuzzer and its seed-corpus generator: the RPCs that
// are fuzz targets, and how an input is laid out.
//
// An input is one mode byte followed by the payload:
//   mode & 1 == 1  raw: the payload bytes go on the wire as they are (for
//                  Upload: split into messages, see below), so protobuf
//                  parsing of hostile bytes is exercised;
//   mode & 1 == 0  structured: the payload is parsed as the request message;
//                  if it parses, every `session` field that is empty or
//                  shorter than 4 bytes becomes the live session, every
//                  handle-valued field below kHandleSlots becomes one of the
//                  live pre-created tensors, and every `grant` field shorter
//                  than 4 bytes becomes live grant number (its first byte, 0
//                  when empty) modulo kGrantSlots; then it is serialized and
//                  sent.
// For the client-streaming Upload and Stream the payload is a sequence of
// messages,
// each a 2-byte little-endian length followed by that many bytes (at most
// kMaxStreamMessages; a short tail is one last message).
//
// Moves between nodes. The fuzzed server is node kSelfNode; kPeerNode is a
// second, listening server that kSelfNode may import from (its only
// --peers entry); kOtherNode holds a node token but has no server. The live
// grants (kGrantSlots, see GrantSlot below) are the fuzzed server's own,
// for kPeerNode, when PullChunk is fuzzed, and the peer's, for kSelfNode,
// when Import is. For NodeService.PullChunk, (mode >> 1) % kCallers picks the
// caller's credentials (Caller).
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
    "GetLimits",   "Stream",      "GrantTransfer", "Import",
    "RegisterProgram", "RunProgram", "ListPrograms", "ReleaseProgram",
    "CreateGroup", "Collective", "ListGroups", "DestroyGroup",
    "PullChunk",  // NodeService
};

inline constexpr uint64_t kHandleSlots = 64;
inline constexpr size_t kMaxStreamMessages = 16;

inline constexpr const char kSelfNode[] = "fuzz-a";
inline constexpr const char kPeerNode[] = "fuzz-b";
inline constexpr const char kOtherNode[] = "fuzz-c";

// The live grants, by slot: what each is a grant of, and to whom ("the
// grantee": kPeerNode for PullChunk, kSelfNode for Import).
enum GrantSlot : uint8_t {
  kGrantFloat32 = 0,   // float32 [2, 3] on cpu:0, to the grantee
  kGrantInt64Cpu1,     // int64 [4, 1] on cpu:1, to the grantee
  kGrantFloat16,       // float16 [2], to the grantee
  kGrantLarge,         // float32 [1 << 20] (4 MiB: several chunks)
  kGrantEmpty,         // float32 [0] (no bytes), to the grantee
  kGrantOtherNode,     // float32 [2, 3], to kOtherNode
  kGrantSessionEnded,  // bool [3], to the grantee; its session since closed
  kGrantSlots,
};

// Who calls PullChunk: the grantee's node token, another node's, none, a
// bearer token that is no node's, an authorization value that is no bearer
// token.
enum class Caller : uint8_t {
  kGrantee = 0,
  kOtherNode,
  kNoToken,
  kUnknownToken,
  kNotBearer,
};
inline constexpr uint8_t kCallers = 5;

inline char ModeByte(bool raw, Caller caller = Caller::kGrantee) {
  return static_cast<char>((raw ? 1 : 0) | (static_cast<uint8_t>(caller) << 1));
}

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
