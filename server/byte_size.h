// Human-friendly byte sizes for flags: "1073741824", "512MiB", "8GiB",
// "1.5GB" (decimal units: KB, MB, GB, TB; binary: KiB, MiB, GiB, TiB).
// Thread-safety: stateless.
#ifndef TENSORD_SERVER_BYTE_SIZE_H_
#define TENSORD_SERVER_BYTE_SIZE_H_

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace tensord::server {

// INVALID_ARGUMENT naming the text for anything else, negative values, or
// values over 2^63 bytes.
absl::StatusOr<uint64_t> ParseByteSize(std::string_view text);

}  // namespace tensord::server

#endif  // TENSORD_SERVER_BYTE_SIZE_H_
