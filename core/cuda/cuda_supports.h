// What the CUDA device computes: its Capabilities table (core/base/device.h).
// The op rules (bool subtraction, integer division computing in float32,
// mean of integers, ...) are the planner's, the same on every device; the
// kernels trust them and check nothing again.
//
// The table: fill, cast, binary, unary, reduce and where for every dtype
// (the half types computing in float32 through core/base/scalar_ops.h, as on the
// CPU); random fills for floating dtypes; matmul for all but bool. Plain C++
// with no CUDA type, unit-tested in every build
// (tests/core/cuda_host_logic_test.cc). Thread-safety: a pure function.
#ifndef TENSORD_CORE_CUDA_CUDA_SUPPORTS_H_
#define TENSORD_CORE_CUDA_CUDA_SUPPORTS_H_

#include "core/base/device.h"

namespace tensord::core::cuda {

// The table every CUDA device reports (Device::capabilities()).
Capabilities CudaCapabilities();

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_CUDA_SUPPORTS_H_
