// Internal: the Runtime's implementation class and what its parts share.
//
// Runtime (core/runtime.h) is a facade; its Impl is defined here and
// implemented in one file per concern:
//   runtime.cc    devices, budgets, sessions and leases, handles
//   transfers.cc  tensors in and out: creates, uploads, moves, readers,
//                 shared memory, and the session holds of open streams
//   op_outputs.cc each op's output: planned, then computed by kernels
//   executor.cc   ops: Apply (arity, same device, dispatch), Run, Execute
//   autograd.cc   recording ops for autograd, the backward pass, the
//                 autograd ops (requires_grad_, grad, zero_grad, detach)
//   backward_ops.cc  each recorded op's input gradients (with
//                 window_ops.cc and loss_ops.cc for their own ops)
//   optimizer_ops.cc  SGD, Adam and AdamW steps
// Included only by those files.
// Thread-safety: as Runtime.
#ifndef TENSORD_CORE_RUNTIME_IMPL_H_
#define TENSORD_CORE_RUNTIME_IMPL_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/absl_compat.h"
#include "core/admission.h"
#include "core/autograd.h"
#include "core/cpu/cpu_device.h"
#include "core/handle_table.h"
#include "core/op_checks.h"
#include "core/op_plan.h"
#include "core/planner.h"
#include "core/runtime.h"
#include "core/shared_memory.h"
#include "core/status.h"
#include "core/window_plan.h"

namespace tensord::core {

// A device with its budget. Held bytes are counted from admission until the
// buffer (or a failed allocation) gives them back.
struct DeviceSlot {
  std::unique_ptr<Device> device;
  uint64_t budget = 0;
  std::atomic<uint64_t> held{0};
  std::atomic<uint64_t> live_tensors{0};
  std::atomic<uint64_t> allocation_failures{0};
};

inline int64_t MillisSince(HandleEntry::Clock::time_point t,
                           HandleEntry::Clock::time_point now) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - t).count();
}

inline TensorMeta MetaOf(const HandleEntry& entry) {
  const auto now = HandleEntry::Clock::now();
  const StoredTensor& t = *entry.tensor;
  TensorMeta meta;
  meta.handle = entry.handle;
  meta.device = t.device->name();
  meta.dtype = t.dtype;
  meta.shape = t.shape;
  meta.nbytes = t.nbytes;
  meta.tag = entry.tag;
  meta.age_ms = MillisSince(entry.created, now);
  meta.idle_ms = MillisSince(entry.last_used, now);
  std::shared_ptr<GradNode> grad_fn;
  {
    absl::MutexLock lock(&t.autograd->mu);
    meta.requires_grad = t.autograd->requires_grad;
    grad_fn = t.autograd->grad_fn;
  }
  if (grad_fn != nullptr) {
    meta.requires_grad = true;
    meta.grad_fn = grad_fn->Name();
  }
  return meta;
}

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

// INVALID_ARGUMENT unless `text` (the request's `field`) fits `max` bytes.
inline absl::Status CheckLength(std::string_view field, std::string_view text,
                                size_t max) {
  if (text.size() <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      ToAbsl(field), " is ", text.size(), " bytes long ('", Echo(text, 32),
      "'); the server's limit is ", max, " bytes"));
}

inline absl::Status CheckTag(std::string_view tag) {
  return CheckLength("tag", tag, kMaxTagBytes);
}

// The handle table's options from the Runtime's.
HandleTableOptions TableOptions(const RuntimeOptions& o);

class Runtime::Impl {
 public:
  explicit Impl(const RuntimeOptions& options)
      : table_(TableOptions(options)),
        admitter_(table_, options.max_tensor_bytes) {}
  // The reaper stops first; then sessions go: their buffers give bytes back
  // to the slots.
  ~Impl() {
    {
      absl::MutexLock lock(&reaper_mu_);
      stopping_ = true;
    }
    if (reaper_.joinable()) reaper_.join();
    table_.CloseAll();
  }

  absl::Status Init(RuntimeOptions options);

  // Closes the expired sessions, frees their tensors, reports each one.
  size_t ReapExpired();
  // The reaper thread's body: wakes every reap_interval (or at once on
  // shutdown) and reaps.
  void ReaperLoop();
  std::chrono::milliseconds ClampTtl(std::chrono::milliseconds requested) const;

  std::vector<DeviceStatus> ListDevices() const;
  RuntimeLimits limits() const { return limits_; }
  const std::string& node_name() const { return node_name_; }
  absl::StatusOr<DeviceSlot*> FindSlot(std::string_view name) const;
  DeviceSlot& SlotOf(const Device* device) const;

  HandleTable& table() { return table_; }

  // Admission (core/admission.h): every allocation is admitted for the
  // session of the current AdmissionScope, then made with the token. The
  // returned buffer gives the bytes back when its last owner drops it.
  absl::StatusOr<Admission> Admit(DeviceSlot& slot, uint64_t bytes) {
    return admitter_.Admit(slot, bytes);
  }
  absl::StatusOr<std::shared_ptr<Buffer>> Allocate(Admission admission) {
    return admitter_.Allocate(std::move(admission));
  }

  // Registers a finished tensor in the session.
  absl::StatusOr<TensorMeta> Register(std::string_view session,
                                      DeviceSlot& slot, DType dtype,
                                      Shape shape, uint64_t nbytes,
                                      std::shared_ptr<Buffer> buffer,
                                      std::string_view tag);
  // Registers `tensor` itself (an op's result, with its autograd state).
  absl::StatusOr<TensorMeta> Register(
      std::string_view session, std::shared_ptr<const StoredTensor> tensor,
      std::string_view tag);
  // Drops removed entries, keeping the live-tensor counts right.
  SessionCloseStats Forget(std::vector<HandleEntry> entries);

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
  // What runs each op: the op table's `emit` of its row (core/op_table.h),
  // called by Apply once the op is planned. executor.cc's make a new tensor
  // (through Made) or update inputs[0]; autograd.cc's are the autograd ops.
  // `plan`: PlanOp's, the op planned once for the executor.
  using Emit = absl::StatusOr<Value> (Impl::*)(const OpSpec& op,
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
  // `extra`, what its backward needs besides its operands).
  absl::StatusOr<Value> Made(const OpSpec& op, std::span<const Value> in,
                             absl::StatusOr<Output> out,
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
  // x's dtype) is kept there for the backward.
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
  absl::StatusOr<Output> CastOut(const StoredTensor& x, DType dtype);
  absl::Status InPlace(const OpSpec& op, const StoredTensor& self,
                       const StoredTensor* other);

  // --- Autograd (core/autograd.h) ---
  // Records `op`, run on `in` with the result `result`, as the result's
  // grad_fn when an input requires grad (and the op is not no_grad, is
  // differentiable and its result floating). `extra`: what the op's
  // backward needs beyond its inputs and output (dropout's mask, a norm's
  // invstd).
  void RecordGrad(const OpSpec& op, std::span<const Value> in,
                  const TensorPtr& result, TensorPtr extra);
  // FAILED_PRECONDITION (PyTorch's messages) for an in-place op autograd
  // cannot allow: on a leaf that requires grad outside no_grad, or on a
  // tensor that is part of a graph (not recorded yet).
  absl::Status CheckInPlaceGrad(const OpSpec& op, std::span<const Value> in);
  // root.backward(grad): grad null means ones (a scalar root). The leaves'
  // grads accumulate; without retain_graph the saved tensors are freed.
  absl::Status Backward(const TensorPtr& root, const StoredTensor* grad,
                        bool retain_graph);
  // Each forward input's gradient of `node` given its output's gradient
  // (null where the input's edge is inactive or the op has none), in the
  // computation dtype; the engine casts to the input's dtype.
  absl::StatusOr<std::vector<TensorPtr>> InputGrads(const GradNode& node,
                                                    const TensorPtr& grad);
  // The backward of the window and loss ops (window_ops.cc, loss_ops.cc).
  absl::StatusOr<std::vector<TensorPtr>> Conv2dGrads(const GradNode& node,
                                                     const TensorPtr& grad);
  absl::StatusOr<std::vector<TensorPtr>> Pool2dGrads(const GradNode& node,
                                                     const TensorPtr& grad);
  absl::StatusOr<std::vector<TensorPtr>> LossGrads(const GradNode& node,
                                                   const TensorPtr& grad);
  // optimizer.step() (core/ops.h's OptimizerArgs), in place on the
  // parameters and their state (optimizer_ops.cc).
  absl::Status OptimizerStep(const OpSpec& op, std::span<const Value> in);
  // Arithmetic on whole tensors for the backward formulas
  // (core/grad_math.h).
  class GradMath;

  class UploadImpl;
  class ReaderImpl;

  // Shared-memory mappings alive, and transfers through them.
  std::atomic<int64_t> shm_regions{0};
  std::atomic<uint64_t> shm_uploads{0};
  std::atomic<uint64_t> shm_fetches{0};

 private:
  std::vector<std::unique_ptr<DeviceSlot>> slots_;
  HandleTable table_;  // after slots_: destroyed before them
  Admitter admitter_;  // borrows table_
  uint64_t max_tensor_bytes_ = 0;
  std::string node_name_;
  RuntimeLimits limits_;
  std::chrono::milliseconds session_ttl_{0};
  std::chrono::milliseconds min_session_ttl_{0};
  std::chrono::milliseconds max_session_ttl_{0};
  std::chrono::milliseconds reap_interval_{100};
  std::function<void(const ExpiredSessionInfo&)> on_session_expired_;
  absl::Mutex reaper_mu_;
  bool stopping_ ABSL_GUARDED_BY(reaper_mu_) = false;
  std::thread reaper_;  // last: started once everything else is set
};

}  // namespace tensord::core

#endif  // TENSORD_CORE_RUNTIME_IMPL_H_
