// One call of oneDNN as the CPU device's library kernels make it
// (library_kernels.h): built only when this build has oneDNN
// (TENSORD_WITH_ONEDNN) and included only by library_*.cc.
//
// A PreparedCall is made once per shape (its maker runs oneDNN's
// primitive-descriptor search: milliseconds) and then run many times:
//   - its operands are the kernel call's tensors in their plain layouts,
//     inputs first and the output last; where a primitive prefers another
//     layout, the call reorders an input into the workspace before its
//     first step and the output out of it after its last (counted);
//   - its steps are primitives run one after another, each argument bound
//     to an operand;
//   - the primitives' scratch (oneDNN's user scratchpad mode) lies at the
//     end of the same workspace, shared by the steps.
// So the library allocates nothing per call: the workspace, bytes() long,
// is admitted and allocated by the executor like any buffer.
//
// Thread-safety: a finished PreparedCall is immutable; Run may be called
// from many threads at once, each call with its own workspace.
#ifndef TENSORD_CORE_CPU_ONEDNN_CALL_H_
#define TENSORD_CORE_CPU_ONEDNN_CALL_H_

#include <cstddef>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/device.h"

namespace tensord::core::cpu::onednn {

dnnl::engine& Engine();

// What every primitive and reorder is made with (user scratchpad).
dnnl::primitive_attr CallAttributes();

class PreparedCall {
 public:
  // A step's arguments: DNNL_ARG_* -> the operand's index.
  using Args = std::vector<std::pair<int, int>>;

  // Building, in this order. The operand's index (the given pointer's).
  int AddOperand(const dnnl::memory::desc& plain,
                 const dnnl::memory::desc& wanted);
  // `scratch` is the primitive's scratchpad_desc().
  void AddStep(dnnl::primitive primitive, Args args,
               const dnnl::memory::desc& scratch);
  // Operands before `inputs` are read, the rest written. Makes the
  // reorders and lays the workspace out. Throws dnnl::error.
  void Finish(int inputs);

  size_t bytes() const { return bytes_; }
  // Runs the steps on `given` (one pointer per operand) with `workspace`
  // (bytes() long) on `threads` OpenMP threads. INTERNAL "<what> on
  // oneDNN: ..." when the library fails.
  absl::Status Run(std::span<void* const> given, void* workspace, int threads,
                   std::string_view what) const;

 private:
  struct Operand {
    dnnl::memory::desc plain, wanted;
    std::optional<dnnl::reorder> reorder;
    size_t offset = 0;  // of the reordered copy in the workspace
  };
  struct Step {
    dnnl::primitive primitive;
    Args args;
  };
  std::vector<Operand> operands_;
  std::vector<Step> steps_;
  int inputs_ = 0;
  size_t scratch_ = 1;  // the largest scratchpad any step or reorder wants
  size_t scratch_offset_ = 0;
  size_t bytes_ = 0;
};

// The makers, one per library kernel (library_conv.cc):
// INTERNAL naming the window when oneDNN refuses it.
absl::StatusOr<PreparedCall> PrepareConv(const Conv2dArgs& args, DType dtype);

}  // namespace tensord::core::cpu::onednn

#endif  // TENSORD_CORE_CPU_ONEDNN_CALL_H_
