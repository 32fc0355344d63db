// The executor: ops on stored tensors. Apply runs one op of Run or Execute
// (PlanOp's plan, then the op table's emit for its row); each family's Out
// function computes an output with device kernels; Made records a result
// for autograd through its AutogradEngine (core/autograd/engine.h), whose
// backward formulas (core/autograd/grad_math.h) run the same kernels; the
// optimizer steps run here too. Every buffer it makes is admitted for the
// session of the current AdmissionScope (core/runtime/admission.h) before
// it is allocated.
//
// It owns nothing: the device slots, the handle table and the admitter are
// the Runtime's (core/runtime/runtime_impl.h), borrowed. Implemented by
// family:
//   executor.cc      Apply, the emits, Made
//   op_outputs.cc    elementwise, matmul, reductions, softmax, where,
//                    clamp, views, cat, casts
//   window_ops.cc    conv2d and pooling, with their backwards
//   loss_ops.cc      the losses, with their backward
//   norm_ops.cc      the normalisations, with their backward
//   autograd.cc      the autograd ops (requires_grad_, backward, grad,
//                    zero_grad, detach), through the AutogradEngine
//   backward_ops.cc  the other families' backward formulas
//   optimizer_ops.cc SGD, Adam and AdamW steps
// Included by those files and core/runtime/runtime_impl.h.
// Thread-safety: as Runtime; an Executor has no mutable state of its own.
#ifndef TENSORD_CORE_EXECUTOR_EXECUTOR_H_
#define TENSORD_CORE_EXECUTOR_EXECUTOR_H_

#include <array>
#include <atomic>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/base/absl_compat.h"
#include "core/runtime/admission.h"
#include "core/autograd/autograd.h"
#include "core/runtime/handle_table.h"
#include "core/planner/op_plan.h"
#include "core/planner/planner.h"
#include "core/base/status.h"
#include "core/planner/window_plan.h"

namespace tensord::core {

class AutogradEngine;  // core/autograd/engine.h

// A device with its budget. Held bytes are counted from admission until the
// buffer (or a failed allocation) gives them back.
struct DeviceSlot {
  std::unique_ptr<Device> device;
  uint64_t budget = 0;
  std::atomic<uint64_t> held{0};
  std::atomic<uint64_t> live_tensors{0};
  std::atomic<uint64_t> allocation_failures{0};
};

inline TensorRef RefOf(const StoredTensor& t) {
  return TensorRef{t.buffer.get(), t.dtype, t.shape};
}

// `t` read with another shape of the same element count: a tensor sharing
// its buffer (the composite ops' reshapes, which copy nothing).
inline absl::StatusOr<std::shared_ptr<const StoredTensor>> ViewOf(
    const StoredTensor& t, std::initializer_list<int64_t> dims) {
  auto view = std::make_shared<StoredTensor>(t);
  ASSIGN_OR_RETURN(view->shape, Shape::Make(std::span<const int64_t>(
                                    dims.begin(), dims.size())));
  return view;
}

class Executor {
 public:
  // The Runtime's slots, table and admitter, which outlive the executor.
  Executor(const std::vector<std::unique_ptr<DeviceSlot>>& slots,
           HandleTable& table, Admitter& admitter);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // The slot of `device` (one of the Runtime's).
  DeviceSlot& SlotOf(const Device* device) const;
  HandleTable& table() { return table_; }
  absl::StatusOr<Admission> Admit(DeviceSlot& slot, uint64_t bytes) {
    return admitter_.Admit(slot, bytes);
  }
  absl::StatusOr<std::shared_ptr<Buffer>> Allocate(Admission admission) {
    return admitter_.Allocate(std::move(admission));
  }

  // Admits and allocates an output tensor of `dtype`/`shape` on `slot`.
  struct Output {
    Shape shape;
    DType dtype = DType::kFloat32;
    uint64_t nbytes = 0;
    std::shared_ptr<Buffer> buffer;
    TensorRef ref() const { return TensorRef{buffer.get(), dtype, shape}; }
  };
  absl::StatusOr<Output> AllocateOutput(DeviceSlot& slot, DType dtype,
                                        Shape shape);
  // `t` as `dtype`: itself, or a cast into a temporary kept in `temp`.
  // Precondition: the plan checked the cast (PlanCast, or a Plan* function
  // that includes it); nothing here asks the device again.
  absl::StatusOr<TensorRef> AsDType(DeviceSlot& slot, const StoredTensor& t,
                                    DType dtype, Output& temp);

  // --- Ops (Run / Execute) ---
  using TensorPtr = std::shared_ptr<const StoredTensor>;
  // One value of an op list: a tensor, with its handle entry when it is a
  // tensor of the session (given by handle, or updated in place).
  struct Value {
    TensorPtr tensor;
    std::optional<HandleEntry> entry;
  };
  // Runs one op on resolved inputs. The result is a new, unregistered
  // tensor, or for an in-place op inputs[0] itself.
  absl::StatusOr<Value> Apply(const OpSpec& op, std::span<const Value> in);
  // Runs one op on resolved inputs with `plan`, PlanOp's plan of this op
  // for inputs of these dtypes, shapes and devices (a program's, made
  // when it was registered): Apply without the planning.
  absl::StatusOr<Value> ApplyPlanned(const OpSpec& op,
                                     std::span<const Value> in,
                                     const OpResult& plan);
  // What runs each op: the op table's `emit` of its row (core/base/op_table.h),
  // called by Apply once the op is planned. executor.cc's make a new tensor
  // (through Made) or update inputs[0]; autograd.cc's are the autograd ops.
  // `plan`: PlanOp's, the op planned once for the executor.
  using Emit = absl::StatusOr<Value> (Executor::*)(const OpSpec& op,
                                               std::span<const Value> in,
                                               const OpResult& plan);
  static Emit EmitOf(size_t row);  // nullptr: not an op Apply runs
  absl::StatusOr<Value> EmitBinary(const OpSpec& op, std::span<const Value> in,
                                   const OpResult& plan);
  absl::StatusOr<Value> EmitUnary(const OpSpec& op, std::span<const Value> in,
                                  const OpResult& plan);
  absl::StatusOr<Value> EmitMatMul(const OpSpec& op, std::span<const Value> in,
                                   const OpResult& plan);
  absl::StatusOr<Value> EmitLinear(const OpSpec& op, std::span<const Value> in,
                                   const OpResult& plan);
  absl::StatusOr<Value> EmitReduce(const OpSpec& op, std::span<const Value> in,
                                   const OpResult& plan);
  absl::StatusOr<Value> EmitSoftmax(const OpSpec& op, std::span<const Value> in,
                                    const OpResult& plan);
  absl::StatusOr<Value> EmitClamp(const OpSpec& op, std::span<const Value> in,
                                  const OpResult& plan);
  absl::StatusOr<Value> EmitWhere(const OpSpec& op, std::span<const Value> in,
                                  const OpResult& plan);
  absl::StatusOr<Value> EmitPermute(const OpSpec& op, std::span<const Value> in,
                                    const OpResult& plan);
  absl::StatusOr<Value> EmitTranspose(const OpSpec& op,
                                      std::span<const Value> in,
                                      const OpResult& plan);
  absl::StatusOr<Value> EmitReshape(const OpSpec& op, std::span<const Value> in,
                                    const OpResult& plan);
  absl::StatusOr<Value> EmitSlice(const OpSpec& op, std::span<const Value> in,
                                  const OpResult& plan);
  absl::StatusOr<Value> EmitCat(const OpSpec& op, std::span<const Value> in,
                                const OpResult& plan);
  absl::StatusOr<Value> EmitCast(const OpSpec& op, std::span<const Value> in,
                                 const OpResult& plan);
  absl::StatusOr<Value> EmitInPlace(const OpSpec& op, std::span<const Value> in,
                                    const OpResult& plan);
  absl::StatusOr<Value> EmitConv2d(const OpSpec& op, std::span<const Value> in,
                                   const OpResult& plan);
  absl::StatusOr<Value> EmitPool2d(const OpSpec& op, std::span<const Value> in,
                                   const OpResult& plan);
  absl::StatusOr<Value> EmitLoss(const OpSpec& op, std::span<const Value> in,
                                 const OpResult& plan);
  absl::StatusOr<Value> EmitAdaptiveAvgPool2d(const OpSpec& op,
                                              std::span<const Value> in,
                                              const OpResult& plan);
  absl::StatusOr<Value> EmitDropout(const OpSpec& op, std::span<const Value> in,
                                    const OpResult& plan);
  // The normalisations (norm_ops.cc).
  absl::StatusOr<Value> EmitNorm(const OpSpec& op, std::span<const Value> in,
                                 const OpResult& plan);
  absl::StatusOr<Value> EmitOptimizerStep(const OpSpec& op,
                                          std::span<const Value> in,
                                          const OpResult& plan);
  absl::StatusOr<Value> EmitRequiresGrad(const OpSpec& op,
                                         std::span<const Value> in,
                                         const OpResult& plan);
  absl::StatusOr<Value> EmitBackward(const OpSpec& op,
                                     std::span<const Value> in,
                                     const OpResult& plan);
  absl::StatusOr<Value> EmitGrad(const OpSpec& op, std::span<const Value> in,
                                 const OpResult& plan);
  absl::StatusOr<Value> EmitZeroGrad(const OpSpec& op,
                                     std::span<const Value> in,
                                     const OpResult& plan);
  absl::StatusOr<Value> EmitDetach(const OpSpec& op, std::span<const Value> in,
                                   const OpResult& plan);
  // `out` stored on in[0]'s device and recorded for autograd (with
  // `extra`, what its backward needs besides its operands, and `plan`, the
  // op's plan, which the node keeps when its row saves_plan).
  absl::StatusOr<Value> Made(const OpSpec& op, std::span<const Value> in,
                             const OpResult& plan, absl::StatusOr<Output> out,
                             TensorPtr extra = nullptr);

  TensorPtr Stored(DeviceSlot& slot, Output out) const;
  // The number `s` as a 0-d tensor of `dtype` (sent as NumberDType(s),
  // cast on the device). Precondition as AsDType's.
  absl::StatusOr<Output> ScalarTensor(DeviceSlot& slot, const Scalar& s,
                                      DType dtype);
  // a (op) b, or a (op) scalar (scalar (op) a when scalar_first). With
  // `into`, the result is written into that tensor (in-place ops): its
  // shape must be the broadcast shape and the result dtype castable to its
  // dtype; the returned Output is then empty.
  // With the op's plan (PlanBinary's for these operands), not planned
  // again.
  absl::StatusOr<Output> BinaryOut(const BinaryPlan& plan, BinaryOp op,
                                   const StoredTensor& a, const StoredTensor* b,
                                   const Scalar* scalar, bool scalar_first,
                                   const StoredTensor* into);
  absl::StatusOr<Output> BinaryOut(BinaryOp op, const StoredTensor& a,
                                   const StoredTensor* b, const Scalar* scalar,
                                   bool scalar_first, const StoredTensor* into);
  // `args`: the op's numeric arguments (OpSpec::args; none for the ops
  // without any).
  absl::StatusOr<Output> UnaryOut(UnaryOp op, const StoredTensor& x,
                                  std::array<double, 2> args = {});
  // Each family's Out with its plan (PlanOp's, carried in OpResult) runs
  // the op without planning it again; the overloads without one plan first
  // (the composite ops' steps).
  absl::StatusOr<Output> UnaryOut(const UnaryPlan& plan, UnaryOp op,
                                  const StoredTensor& x,
                                  std::array<double, 2> args);
  absl::StatusOr<Output> MatMulOut(MatMulPlan plan, const StoredTensor& a,
                                   const StoredTensor& b);
  absl::StatusOr<Output> MatMulOut(const StoredTensor& a,
                                   const StoredTensor& b);
  // `plan`: the product's, x @ w^T.
  absl::StatusOr<Output> LinearOut(MatMulPlan plan, const StoredTensor& x,
                                   const StoredTensor& w,
                                   const StoredTensor* bias);
  // Over every dim of `dims` (all elements when empty).
  absl::StatusOr<Output> ReduceOut(ReduceOp op, const StoredTensor& x,
                                   std::span<const int64_t> dims, bool keepdim);
  absl::StatusOr<Output> ReduceOut(ReducePlan plan, ReduceOp op,
                                   const StoredTensor& x);
  // Composite ops: planned once, run as device kernels of the families
  // above (no kernel of their own).
  absl::StatusOr<Output> SoftmaxOut(const StoredTensor& x, int64_t dim,
                                    bool log);
  absl::StatusOr<Output> SoftmaxOut(const SoftmaxPlan& plan,
                                    const StoredTensor& x, bool log);
  // minimum(maximum(x, min), max), each bound optional (not both): a number
  // or a tensor.
  // where(cond, x, y): x and y each a number or a tensor (as in `x_arg`,
  // `y_arg`); one kernel through Device::Launch.
  absl::StatusOr<Output> WhereOut(WherePlan plan, const StoredTensor& cond,
                                  const OpSpec::Bound& x_arg,
                                  const StoredTensor* x,
                                  const OpSpec::Bound& y_arg,
                                  const StoredTensor* y);
  absl::StatusOr<Output> ClampOut(const ClampPlan& plan, const StoredTensor& x,
                                  const OpSpec::Bound& min,
                                  const StoredTensor* min_tensor,
                                  const OpSpec::Bound& max,
                                  const StoredTensor* max_tensor);
  absl::StatusOr<Output> ReshapeOut(ReshapePlan plan, const StoredTensor& x);
  absl::StatusOr<Output> CatOut(CatPlan plan, std::span<const Value> xs);
  absl::StatusOr<Output> WhereOut(const StoredTensor& cond,
                                  const OpSpec::Bound& x_arg,
                                  const StoredTensor* x,
                                  const OpSpec::Bound& y_arg,
                                  const StoredTensor* y);
  absl::StatusOr<Output> ClampOut(const StoredTensor& x,
                                  const OpSpec::Bound& min,
                                  const StoredTensor* min_tensor,
                                  const OpSpec::Bound& max,
                                  const StoredTensor* max_tensor);
  // conv2d: im2col, one matrix product per group, the bias added; the
  // pooling ops: im2col, one reduction per window (window_ops.cc).
  absl::StatusOr<Output> Conv2dOut(const StoredTensor& x,
                                   const StoredTensor& weight,
                                   const StoredTensor* bias,
                                   const WindowArgs& args);
  absl::StatusOr<Output> Conv2dOut(const Conv2dPlan& plan,
                                   const StoredTensor& x,
                                   const StoredTensor& weight,
                                   const StoredTensor* bias);
  // One library kernel (`args`: a Conv2dArgs or Pool2dArgs the device's
  // selection table said kLibrary for) on `operands` (its inputs but the
  // workspace): the workspace it asks for admitted and allocated like any
  // buffer, then the call.
  absl::Status LibraryCall(DeviceSlot& slot, const KernelArgs& args,
                           DType dtype, std::vector<TensorRef> operands,
                           TensorRef out);
  // out [n, oc, oh, ow] += bias [oc] per channel (nothing without one).
  absl::Status AddChannelBias(Device& device, const Output& out,
                              const StoredTensor* bias, const WindowDims& win,
                              int64_t oc);
  absl::StatusOr<Output> Pool2dOut(const Pool2dPlan& plan, PoolKind kind,
                                   const StoredTensor& x,
                                   const WindowArgs& args);
  absl::StatusOr<Output> AdaptiveAvgPool2dOut(AdaptivePoolPlan plan,
                                              const StoredTensor& x);
  absl::StatusOr<Output> Pool2dOut(PoolKind kind, const StoredTensor& x,
                                   const WindowArgs& args);
  // Two products with averaging matrices (window_ops.cc).
  absl::StatusOr<Output> AdaptiveAvgPool2dOut(
      const StoredTensor& x, const std::vector<int64_t>& output_size);
  // Each window's count of elements inside the input, [oh * ow] in `dtype`
  // (avg_pool2d's divisor without padding).
  absl::StatusOr<Output> WindowCounts(DeviceSlot& slot, const WindowDims& win,
                                      DType dtype);
  // adaptive_avg_pool2d's averaging matrix of `out` windows over `in`
  // elements, [out, in] (or [in, out] when transposed).
  absl::StatusOr<TensorPtr> AveragingMatrix(DeviceSlot& slot, int64_t out,
                                            int64_t in, bool transposed,
                                            DType dtype);
  // A seeded float32 random fill, a mask, the kept elements scaled. With
  // `mask`, the scale each element was multiplied by (0 or 1 / (1 - p), in
  // x's dtype) is kept there for the backward. Precondition: planned
  // (PlanOp's PlanDropout: p in [0, 1], a floating x).
  absl::StatusOr<Output> DropoutOut(const StoredTensor& x, double p, bool train,
                                    std::optional<uint64_t> seed,
                                    TensorPtr* mask = nullptr);
  // nll_loss, cross_entropy, mse_loss (loss_ops.cc).
  absl::StatusOr<Output> LossOut(const LossPlan& plan, const OpSpec& op,
                                 const StoredTensor& input,
                                 const StoredTensor& target);
  absl::StatusOr<Output> PermuteOut(PermutePlan plan, const StoredTensor& x);
  absl::StatusOr<Output> PermuteOut(const StoredTensor& x,
                                    std::span<const int64_t> dims);
  absl::StatusOr<Output> ReshapeOut(const StoredTensor& x,
                                    std::span<const int64_t> dims);
  // narrow/select: the planned block of x.
  absl::StatusOr<Output> SliceOut(const StoredTensor& x, SlicePlan plan);
  absl::StatusOr<Output> CatOut(std::span<const Value> xs, int64_t dim);
  // x as `dtype` (a copy when it is x's): checked against the device's
  // capabilities (PlanCast), for the casts the executor and backward make
  // themselves; CastPlannedOut for an op PlanOp has planned.
  absl::StatusOr<Output> CastOut(const StoredTensor& x, DType dtype);
  absl::StatusOr<Output> CastPlannedOut(const StoredTensor& x, DType dtype);
  absl::Status InPlace(const OpSpec& op, const StoredTensor& self,
                       const StoredTensor* other);

  // The autograd engine (core/autograd/engine.h), which records this
  // executor's ops and runs their backward with its kernels.
  AutogradEngine& autograd() { return *autograd_; }
  // The backward of the window and loss ops (window_ops.cc, loss_ops.cc).
  absl::StatusOr<std::vector<TensorPtr>> Conv2dGrads(const GradNode& node,
                                                     const TensorPtr& grad);
  absl::StatusOr<std::vector<TensorPtr>> Pool2dGrads(const GradNode& node,
                                                     const TensorPtr& grad);
  absl::StatusOr<std::vector<TensorPtr>> LossGrads(const GradNode& node,
                                                   const TensorPtr& grad);
  // optimizer.step() (core/base/ops.h's OptimizerArgs), in place on the
  // parameters and their state (optimizer_ops.cc).
  absl::Status OptimizerStep(const OpSpec& op, std::span<const Value> in);
  // Arithmetic on whole tensors for the backward formulas
  // (core/autograd/grad_math.h).
  class GradMath;

 private:
  const std::vector<std::unique_ptr<DeviceSlot>>& slots_;
  HandleTable& table_;
  Admitter& admitter_;
  std::unique_ptr<AutogradEngine> autograd_;
};

}  // namespace tensord::core

#endif  // TENSORD_CORE_EXECUTOR_EXECUTOR_H_
