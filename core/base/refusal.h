// Why a request was refused — a bad or missing credential, a session quota,
// a device's budget — carried on its absl::Status as a payload, so that the
// server can count refusals by reason and log them with the peer
// (server/refusal_log.h) without reading messages. Whoever rewraps a
// refused status (the executor's "op #k" prefix) keeps its payloads
// (Rewrapped, core/base/status.h).
//
// Thread-safety: pure functions.
#ifndef TENSORD_CORE_BASE_REFUSAL_H_
#define TENSORD_CORE_BASE_REFUSAL_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/cord.h"

namespace tensord::core {

enum class Refusal { kNone, kBadToken, kNoToken, kSessionQuota, kDeviceBudget };
inline constexpr Refusal kRefusals[] = {Refusal::kBadToken, Refusal::kNoToken,
                                        Refusal::kSessionQuota,
                                        Refusal::kDeviceBudget};

// The metric label: "bad_token", "no_token", "session_quota",
// "device_budget" ("" for kNone).
inline std::string_view RefusalName(Refusal r) {
  switch (r) {
    case Refusal::kBadToken:
      return "bad_token";
    case Refusal::kNoToken:
      return "no_token";
    case Refusal::kSessionQuota:
      return "session_quota";
    case Refusal::kDeviceBudget:
      return "device_budget";
    case Refusal::kNone:
      break;
  }
  return "";
}

inline constexpr char kRefusalPayloadUrl[] = "type.tensord.dev/refusal";

// `status` marked as a refusal for `why`.
inline absl::Status MarkRefusal(absl::Status status, Refusal why) {
  status.SetPayload(kRefusalPayloadUrl,
                    absl::Cord(std::string(RefusalName(why))));
  return status;
}

// The reason `status` was marked with, kNone when it was not.
inline Refusal RefusalOf(const absl::Status& status) {
  const auto payload = status.GetPayload(kRefusalPayloadUrl);
  if (!payload.has_value()) return Refusal::kNone;
  const std::string name(*payload);
  for (Refusal r : kRefusals) {
    if (RefusalName(r) == name) return r;
  }
  return Refusal::kNone;
}

}  // namespace tensord::core

#endif  // TENSORD_CORE_BASE_REFUSAL_H_
