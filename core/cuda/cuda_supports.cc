#include "core/cuda/cuda_supports.h"

namespace tensord::core::cuda {

Capabilities CudaCapabilities() {
  Capabilities caps;
  for (OpKind op : {OpKind::kFill, OpKind::kCast, OpKind::kBinary,
                    OpKind::kUnary, OpKind::kReduce, OpKind::kWhere}) {
    caps.AllowAll(op);
  }
  for (DType dtype : kEveryDType) {
    if (IsFloating(dtype)) caps.Allow(OpKind::kRandomFill, dtype);
    if (dtype != DType::kBool) caps.Allow(OpKind::kMatMul, dtype);
  }
  return caps;
}

}  // namespace tensord::core::cuda
