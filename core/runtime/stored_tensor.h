// A device-resident tensor as the runtime stores it: where it lives, its
// dtype, shape and size, the buffer holding its bytes, and what autograd
// knows of it (AutogradMeta, kept opaque here: the handle table and the
// devices store tensors without depending on autograd, whose code,
// core/autograd/, is the only one that reads it).
//
// Made by NewStoredTensor() (which gives it its own AutogradMeta); a copy
// of the struct shares the AutogradMeta, being the same tensor read another
// way (a view of its bytes under another shape).
// Thread-safety: immutable once registered (but for its autograd state,
// which guards itself); shared by the table and by readers that must keep
// the memory alive after a release.
#ifndef TENSORD_CORE_RUNTIME_STORED_TENSOR_H_
#define TENSORD_CORE_RUNTIME_STORED_TENSOR_H_

#include <cstdint>
#include <memory>

#include "core/base/device.h"
#include "core/base/dtype.h"
#include "core/base/shape.h"

namespace tensord::core {

struct AutogradMeta;  // core/autograd/autograd_meta.h

struct StoredTensor {
  Device* device = nullptr;  // borrowed: owned by the Runtime
  DType dtype = DType::kFloat32;
  Shape shape;
  uint64_t nbytes = 0;
  std::shared_ptr<Buffer> buffer;  // destroying it returns the budget bytes
  // requires_grad, grad_fn, grad: never null once made by NewStoredTensor.
  std::shared_ptr<AutogradMeta> autograd;
};

// An empty StoredTensor with a fresh AutogradMeta (no grad, not tracked).
std::shared_ptr<StoredTensor> NewStoredTensor();

}  // namespace tensord::core

#endif  // TENSORD_CORE_RUNTIME_STORED_TENSOR_H_
