#include "core/runtime/stored_tensor.h"

#include "core/autograd/autograd_meta.h"

namespace tensord::core {

std::shared_ptr<StoredTensor> NewStoredTensor() {
  auto t = std::make_shared<StoredTensor>();
  t->autograd = std::make_shared<AutogradMeta>();
  return t;
}

}  // namespace tensord::core
