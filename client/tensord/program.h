// tensord::Program: a recorded Batch registered on the server once as a
// program (RegisterProgram: every op planned once) and run with new inputs
// in one call (RunProgram). Part of the client library (tensord/client.h
// includes every part).
//
//   auto b = client.batch();
//   optimizer.zero_grad(b);
//   auto loss = b.cross_entropy(...net's ops on x...,  y);
//   b.backward(loss);
//   optimizer.step(b);
//   b.keep(loss);
//   Program step = b.compile({x, y});     // x, y: the inputs; planned once
//   for (auto [xi, yi] : batches) {
//     BatchResults r = step.run({xi, yi});   // one RPC
//     running_loss += r.item<float>(loss);   // no fetch: the value came back
//   }
//
// Inputs: every operand of the batch naming one of compile()'s tensors
// becomes that input of the program, a placeholder of its dtype, shape and
// device; every other tensor the batch reads (parameters, optimizer state)
// is bound: the Program holds it, and each run reads and updates it, as the
// batch would have. run() with inputs of another signature (dtype, shape,
// device) registers the same ops for that signature the first time (the
// last, smaller batch of an epoch) and reuses it; a signature the ops
// refuse throws the server's "op #<i> (...)" Error. A program the server
// dropped (its session's least recently run, past
// Limits.max_session_programs) is registered again. An optimizer step the
// batch recorded counts as one step of its optimizer at each run, with its
// current learning rate, weight decay and (SGD's) momentum (all are the
// run's arguments, not the program's): the optimizer must outlive the
// Program. A seeded dropout (nn::Dropout's) draws a new mask at each run:
// the first run's are the recorded seeds, each later run takes the next
// seeds of the thread's nn::manual_seed sequence, as the eager step would,
// so a compiled training run equals the eager one.
//
// Thread-safety: a Program may be run from one thread at a time.
#ifndef TENSORD_CLIENT_TENSORD_PROGRAM_H_
#define TENSORD_CLIENT_TENSORD_PROGRAM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "tensord/batch.h"
#include "tensord/tensor.h"

namespace tensord::client {

namespace internal {
struct ProgramState;
}  // namespace internal

class Program {
 public:
  // One RunProgram with `inputs` in compile()'s order (INVALID_ARGUMENT
  // for another count). The kept Values of the batch index the results.
  // Throws Error.
  BatchResults run(const std::vector<Tensor>& inputs);
  // The ops one run runs.
  size_t ops() const;
  // The programs registered so far (one per input signature).
  size_t programs() const;

 private:
  friend class Batch;
  explicit Program(std::shared_ptr<internal::ProgramState> state)
      : state_(std::move(state)) {}
  std::shared_ptr<internal::ProgramState> state_;
};

}  // namespace tensord::client

#endif  // TENSORD_CLIENT_TENSORD_PROGRAM_H_
