// Autograd from the client: it lives in the server (tensord.proto's
// RequiresGradArgs .. DetachArgs), so these only name what to do. The
// per-tensor calls are Tensor's (requires_grad_, backward, grad, detach);
// this header has what spans tensors.
//
//   w.requires_grad_();
//   auto loss = tensord::cross_entropy(x.matmul(w), labels);
//   loss.backward();                    // w.grad() now holds d loss / d w
//   {
//     tensord::NoGradGuard no_grad;     // torch.no_grad()
//     w.axpy_(-0.1, *w.grad());         // not recorded; allowed on a leaf
//   }
//   tensord::zero_grad({w});
//
// Thread-safety: NoGradGuard is per thread, as torch.no_grad(); the rest
// as Tensor.
#ifndef TENSORD_CLIENT_TENSORD_AUTOGRAD_H_
#define TENSORD_CLIENT_TENSORD_AUTOGRAD_H_

#include <span>

#include "tensord/tensor.h"

namespace tensord::client {

// While one is alive on a thread, every op that thread sends (Tensor's, and
// those a Batch records) goes with no_grad: the server does not record it
// for autograd, and an in-place op may update a leaf that requires grad.
// Nests.
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;
  // Whether a guard is alive on this thread.
  static bool active();
};

// Sets each tensor's grad to None (optimizer.zero_grad()). One request for
// all of them; the tensors may live on any devices of one session.
void zero_grad(std::span<const Tensor> tensors);
inline void zero_grad(std::initializer_list<Tensor> tensors) {
  zero_grad(std::span<const Tensor>(tensors.begin(), tensors.size()));
}

}  // namespace tensord::client

namespace tensord {
using client::NoGradGuard;
using client::zero_grad;
}  // namespace tensord

#endif  // TENSORD_CLIENT_TENSORD_AUTOGRAD_H_
