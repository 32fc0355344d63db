// Internal: the plain types the CUDA kernel launchers take.
//
// Launchers are compiled by nvcc, which never sees Abseil or gRPC, so the
// device code gets its own small vocabulary here; cuda_device.cc maps the
// core types onto it. The op families are core/base/op_kinds.h's own enums
// (Abseil-free, so nvcc sees the very enums the planner uses).
// Thread-safety: plain data.
#ifndef TENSORD_CORE_CUDA_KERNEL_TYPES_H_
#define TENSORD_CORE_CUDA_KERNEL_TYPES_H_

#include <cstdint>

#include "core/base/op_kinds.h"

namespace tensord::core::cuda {

// Element types; bool is one byte (0 or 1 written, any nonzero read true).
enum class ElemType : int { kF32, kF64, kI32, kI64, kBool, kF16, kBF16 };

enum class FillKind : int { kZeros, kOnes, kFull, kArange, kRand, kRandn };

inline constexpr int kMaxKernelRank = 8;

// An output shape and, per operand, element strides that read it under
// broadcasting (0 for a broadcast dim). Passed to kernels by value.
struct BroadcastIndex {
  int rank = 0;
  int64_t dims[kMaxKernelRank] = {};
  int64_t a_strides[kMaxKernelRank] = {};
  int64_t b_strides[kMaxKernelRank] = {};
};

// An output shape and the element strides of each of a kernel's `n`
// operands under broadcasting (operand k's stride along dim d is
// strides[k][d]; 0 for a broadcast dim). Passed to kernels by value.
template <int n>
struct NaryIndex {
  int rank = 0;
  int64_t dims[kMaxKernelRank] = {};
  int64_t strides[n][kMaxKernelRank] = {};
};
using WhereIndex = NaryIndex<3>;  // cond, x, y

struct FillParams {
  FillKind kind = FillKind::kZeros;
  double value = 0;
  double start = 0, step = 1;
  double low = 0, high = 1;
  double mean = 0, stddev = 1;
  uint64_t seed = 0;
};

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_KERNEL_TYPES_H_
