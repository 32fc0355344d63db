// Internal: PyTorch's tensor repr (torch/_tensor_str.py, default print
// options: precision 4, threshold 1000, edgeitems 3, linewidth 80), as a pure
// function of a tensor's metadata and bytes so it is testable without a
// server.
//
// Not part of the public API (Tensor::str() and operator<< use it).
// Thread-safety: stateless.
#ifndef TENSORD_CLIENT_TENSOR_REPR_H_
#define TENSORD_CLIENT_TENSOR_REPR_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tensord/client.h"

namespace tensord::client::internal {

// What `repr(t)` prints in PyTorch for a tensor of `shape` and `dtype` whose
// row-major little-endian bytes are `bytes`, living on `device`, e.g.
// "tensor([ 5, 16,  3], device='cuda:0')". The device suffix is left out for
// the default device ("cpu", "cpu:0" or ""); the dtype suffix for the
// default dtypes (float32, int64, bool), except that empty tensors name any
// dtype but float32, as PyTorch does. `autograd`, when not empty, is the
// last suffix ("grad_fn=<MulBackward0>", "requires_grad=True"). Throws
// Error(INVALID_ARGUMENT) when `bytes` does not hold exactly numel(shape)
// elements of `dtype`.
std::string FormatTensor(const std::vector<int64_t>& shape, DType dtype,
                         std::string_view bytes, std::string_view device,
                         std::string_view autograd = "");

}  // namespace tensord::client::internal

#endif  // TENSORD_CLIENT_TENSOR_REPR_H_
