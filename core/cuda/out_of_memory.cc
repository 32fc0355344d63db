#include "core/cuda/out_of_memory.h"

#include "absl/strings/str_cat.h"
#include "core/base/absl_compat.h"
#include "core/base/op_checks.h"

namespace tensord::core::cuda {

std::string OutOfMemoryMessage(std::string_view device, size_t bytes,
                               const CudaMemoryFigures& memory) {
  return absl::StrCat(
      ToAbsl(device), ": CUDA out of memory. Tried to allocate ",
      FormatBytes(bytes), " (", bytes, " bytes); in use by tensord ",
      FormatBytes(memory.used), " (reserved ", FormatBytes(memory.reserved),
      "); free ", FormatBytes(memory.free), " of ", FormatBytes(memory.total),
      " total GPU memory");
}

}  // namespace tensord::core::cuda
