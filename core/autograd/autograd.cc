// Autograd in the Runtime: recording ops (RecordGrad, called by Apply), the
// autograd ops (requires_grad_, backward, grad, zero_grad, detach) and the
// backward pass. The input gradients of each recorded op are
// core/autograd/backward_ops.cc's; see core/autograd/autograd.h for the model.
#include "core/autograd/autograd.h"

#include <deque>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_join.h"
#include "core/autograd/engine.h"
#include "core/autograd/grad_math.h"
#include "core/base/op_table.h"
#include "core/runtime/session_memory.h"

namespace tensord::core {
namespace {

using Kind = OpSpec::Kind;
using TensorPtr = std::shared_ptr<const StoredTensor>;

// A tensor's metadata (and its memory, when `data`), without its autograd
// state: what a node keeps.
SavedTensor Save(const StoredTensor& t, bool data) {
  auto copy = NewStoredTensor();
  copy->device = t.device;
  copy->dtype = t.dtype;
  copy->shape = t.shape;
  copy->nbytes = t.nbytes;
  if (data) copy->buffer = t.buffer;
  return SavedTensor{std::move(copy),
                     t.buffer != nullptr ? t.buffer->version() : 0};
}

// PyTorch's legacy type name of a tensor, "torch.FloatTensor",
// "torch.cuda.HalfTensor", for messages.
std::string TorchTypeName(const StoredTensor& t) {
  std::string_view name = "Tensor";
  switch (t.dtype) {
    case DType::kFloat32:
      name = "FloatTensor";
      break;
    case DType::kFloat64:
      name = "DoubleTensor";
      break;
    case DType::kFloat16:
      name = "HalfTensor";
      break;
    case DType::kBFloat16:
      name = "BFloat16Tensor";
      break;
    case DType::kInt32:
      name = "IntTensor";
      break;
    case DType::kInt64:
      name = "LongTensor";
      break;
    case DType::kBool:
      name = "BoolTensor";
      break;
  }
  return absl::StrCat(
      t.device->kind() == DeviceKind::kCuda ? "torch.cuda." : "torch.",
      ToAbsl(name));
}

// FAILED_PRECONDITION (PyTorch's message) unless every saved tensor of
// `node` is at the version it was saved at.
absl::Status CheckVersions(const GradNode& node) {
  auto check = [&](const SavedTensor& s,
                   std::string_view what) -> absl::Status {
    if (s.data == nullptr || s.data->buffer == nullptr) {
      return absl::OkStatus();
    }
    const uint64_t now = s.data->buffer->version();
    if (now == s.version) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "one of the variables needed for gradient computation has been "
        "modified by an inplace operation: [",
        TorchTypeName(*s.data), " [", absl::StrJoin(s.data->shape.dims(), ", "),
        "]], which is ", ToAbsl(what), " of ", node.Name(), ", is at version ",
        now, "; expected version ", s.version, " instead."));
  };
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    RETURN_IF_ERROR(check(node.inputs[i], absl::StrCat("input ", i)));
  }
  RETURN_IF_ERROR(check(node.output, "output 0"));
  return check(node.extra, "the mask");
}

constexpr std::string_view kFreedGraph =
    "Trying to backward through the graph a second time (or directly access "
    "saved tensors after they have already been freed). Saved intermediate "
    "values of the graph are freed when you call .backward() or "
    "autograd.grad(). Specify retain_graph=True if you need to backward "
    "through the graph a second time or if you need to access saved tensors "
    "after calling backward.";

}  // namespace

std::string GradFnName(const OpSpec& op) {
  const OpRow& row = RowOf(op);
  // The row's name for this use of the op, else its default.
  auto variant = [&](std::string_view name, bool applies) {
    return applies && !name.empty();
  };
  std::string_view name = row.grad_fn;
  if (variant(row.grad_fn_scalar_first,
              op.scalar.has_value() && op.scalar_first)) {
    name = row.grad_fn_scalar_first;
  } else if (variant(row.grad_fn_tensor_tensor, !op.scalar.has_value())) {
    name = row.grad_fn_tensor_tensor;
  } else if (variant(row.grad_fn_all_dims,
                     !op.dim.has_value() && op.reduce_dims.empty())) {
    name = row.grad_fn_all_dims;
  } else if (variant(row.grad_fn_bias, op.inputs.size() > 2)) {
    name = row.grad_fn_bias;
  }
  if (name.empty()) return absl::StrCat(ToAbsl(row.name), "Backward0");
  return std::string(name);
}

std::string GradNode::Name() const { return GradFnName(op); }

void SetGrad(AutogradMeta& meta, std::shared_ptr<const StoredTensor> grad) {
  meta.grad_charge.reset();  // before the old grad's memory goes
  meta.grad = std::move(grad);
  if (meta.grad == nullptr) return;
  if (std::shared_ptr<SessionMemory> memory = meta.owner.lock()) {
    const StoredTensor* held[] = {meta.grad.get()};
    meta.grad_charge =
        memory->Hold(held, absl::StrCat("grad of tensor ", meta.owner_handle));
  }
}

void ChargeToSession(const StoredTensor& t,
                     const std::shared_ptr<SessionMemory>& memory,
                     uint64_t handle) {
  std::shared_ptr<GradNode> root;
  {
    AutogradMeta& meta = *t.autograd;
    absl::MutexLock lock(&meta.mu);
    root = meta.grad_fn;
    // Set even while untracked: requires_grad_ may come later.
    if (meta.owner.expired() || meta.owner_handle != handle) {
      meta.owner = memory;
      meta.owner_handle = handle;
      if (meta.grad != nullptr) SetGrad(meta, std::move(meta.grad));
    }
  }
  ChargeGraph(std::move(root), memory);
}

void ChargeGraph(std::shared_ptr<GradNode> root,
                 const std::shared_ptr<SessionMemory>& memory) {
  // The graph's nodes not yet counted; a counted node's inputs were
  // counted with it, and a released node's saved nothing that remains.
  std::vector<std::shared_ptr<GradNode>> stack;
  if (root != nullptr) stack.push_back(std::move(root));
  while (!stack.empty()) {
    std::shared_ptr<GradNode> node = std::move(stack.back());
    stack.pop_back();
    absl::MutexLock lock(&node->mu);
    if (node->charged || node->released) continue;
    node->charged = true;
    std::vector<const StoredTensor*> saved;
    for (const SavedTensor& s : node->inputs) saved.push_back(s.data.get());
    saved.push_back(node->output.data.get());
    saved.push_back(node->extra.data.get());
    node->charge = memory->Hold(saved, absl::StrCat("saved by ", node->Name()));
    for (const GradEdge& e : node->next) {
      if (e.node != nullptr) stack.push_back(e.node);
    }
  }
}

void AutogradEngine::RecordGrad(const OpSpec& op, std::span<const Value> in,
                                const TensorPtr& result, TensorPtr extra,
                                const FamilyPlan& plan) {
  if (op.no_grad || !IsFloating(result->dtype)) return;
  if (std::none_of(in.begin(), in.end(), [](const Value& v) {
        return v.tensor->autograd->ever_tracked.load(std::memory_order_relaxed);
      })) {
    return;  // no input autograd ever saw: nothing to record
  }
  const OpRow& row = RowOf(op);
  std::vector<GradEdge> next(in.size());
  bool any = false;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!row.Differentiable(i)) continue;
    const AutogradMeta& meta = *in[i].tensor->autograd;
    absl::MutexLock lock(&meta.mu);
    if (meta.grad_fn != nullptr) {
      next[i].node = meta.grad_fn;
    } else if (meta.requires_grad) {
      next[i].leaf = in[i].tensor;
      next[i].is_leaf = true;
    } else {
      continue;
    }
    any = true;
  }
  if (!any) return;
  auto node = std::make_shared<GradNode>();
  node->op = op;
  node->op.inputs.clear();
  node->op.inputs.resize(in.size());  // the count, for names and arity
  node->next = std::move(next);
  node->inputs.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    node->inputs.push_back(Save(*in[i].tensor, row.SavesInput(i)));
  }
  node->output = Save(*result, row.saves_output);
  if (extra != nullptr) node->extra = Save(*extra, true);
  if (row.saves_plan) node->plan = plan;
  // What the node saves is the session's from now on, listed as held by
  // autograd, whether or not its result is kept (an Execute's
  // intermediates): admission counts it as such (core/runtime/admission.h).
  if (const std::string* session = AdmissionScope::Current()) {
    if (auto memory = table_.MemoryOf(*session); memory.ok()) {
      ChargeGraph(node, *memory);
    }
  }
  AutogradMeta& meta = *result->autograd;
  absl::MutexLock lock(&meta.mu);
  meta.grad_fn = std::move(node);
  meta.ever_tracked.store(true, std::memory_order_relaxed);
}

absl::Status AutogradEngine::CheckInPlaceGrad(const OpSpec& op,
                                              std::span<const Value> in) {
  if (op.no_grad) return absl::OkStatus();
  const AutogradMeta& self = *in[0].tensor->autograd;
  bool leaf = false, in_graph = false;
  {
    absl::MutexLock lock(&self.mu);
    leaf = self.requires_grad && self.grad_fn == nullptr;
    in_graph = self.grad_fn != nullptr;
  }
  if (leaf) {
    return absl::FailedPreconditionError(
        "a leaf Variable that requires grad is being used in an in-place "
        "operation.");
  }
  for (size_t i = 1; i < in.size() && !in_graph; ++i) {
    in_graph = in[i].tensor->autograd->Tracked();
  }
  if (in_graph) {
    return absl::FailedPreconditionError(absl::StrCat(
        OpName(op),
        " on a tensor that requires grad is not recorded for autograd by "
        "tensord yet: write it out of place (y = x + z), or send it with "
        "no_grad"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Executor::Value> Executor::EmitRequiresGrad(
    const OpSpec& op, std::span<const Value> in, const OpResult& plan) {
  AutogradMeta& meta = *in[0].tensor->autograd;
  absl::MutexLock lock(&meta.mu);
  if (meta.grad_fn != nullptr) {
    if (op.requires_grad) return in[0];  // it does already
    return absl::FailedPreconditionError(
        "you can only change requires_grad flags of leaf variables. If "
        "you want to use a computed variable in a subgraph that doesn't "
        "require differentiation use var_no_grad = var.detach().");
  }
  meta.requires_grad = op.requires_grad;
  if (op.requires_grad)
    meta.ever_tracked.store(true, std::memory_order_relaxed);
  return in[0];
}

absl::StatusOr<Executor::Value> Executor::EmitBackward(
    const OpSpec& op, std::span<const Value> in, const OpResult& plan) {
  RETURN_IF_ERROR(autograd_->Backward(
      in[0].tensor, in.size() > 1 ? in[1].tensor.get() : nullptr,
      op.retain_graph));
  return in[0];
}

absl::StatusOr<Executor::Value> Executor::EmitZeroGrad(
    const OpSpec&, std::span<const Value> in, const OpResult& plan) {
  for (const Value& v : in) {
    AutogradMeta& m = *v.tensor->autograd;
    absl::MutexLock lock(&m.mu);
    SetGrad(m, nullptr);
  }
  return in[0];
}

absl::StatusOr<Executor::Value> Executor::EmitGrad(const OpSpec&,
                                                   std::span<const Value> in,
                                                   const OpResult& plan) {
  const AutogradMeta& meta = *in[0].tensor->autograd;
  TensorPtr grad;
  {
    absl::MutexLock lock(&meta.mu);
    grad = meta.grad;
  }
  if (grad == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the tensor's grad is None: ",
        meta.GradFn() != nullptr
            ? "it is not a leaf (grads accumulate in leaves only)"
        : meta.Tracked() ? "no backward has reached it since it was set"
                         : "it does not require grad"));
  }
  // The grad's memory under a new handle. (A backward gives the leaf a new
  // grad tensor; this handle keeps the values it had.)
  return Value{Save(*grad, true).data, std::nullopt};
}

absl::StatusOr<Executor::Value> Executor::EmitDetach(const OpSpec&,
                                                     std::span<const Value> in,
                                                     const OpResult& plan) {
  return Value{Save(*in[0].tensor, true).data, std::nullopt};
}

absl::Status AutogradEngine::Backward(const TensorPtr& root,
                                      const StoredTensor* grad,
                                      bool retain_graph) {
  std::shared_ptr<GradNode> fn;
  bool leaf = false;
  {
    const AutogradMeta& meta = *root->autograd;
    absl::MutexLock lock(&meta.mu);
    fn = meta.grad_fn;
    leaf = meta.requires_grad;
  }
  if (fn == nullptr && !leaf) {
    return absl::FailedPreconditionError(
        "element 0 of tensors does not require grad and does not have a "
        "grad_fn");
  }
  RETURN_IF_ERROR(
      CheckBackwardRoot(root->shape, grad != nullptr ? &grad->shape : nullptr));
  Executor::GradMath math(ex_, root->device);
  TensorPtr seed;
  if (grad != nullptr) {
    ASSIGN_OR_RETURN(seed, math.Cast(Save(*grad, true).data, root->dtype));
  } else {
    ASSIGN_OR_RETURN(Executor::Output ones,
                     ex_.AllocateOutput(math.slot(), root->dtype, root->shape));
    FillSpec fill;
    fill.kind = FillSpec::Kind::kOnes;
    RETURN_IF_ERROR(root->device->Launch({fill, {}, ones.ref()}));
    seed = ex_.Stored(math.slot(), std::move(ones));
  }

  // The leaves' gradients of this pass, summed per leaf. Nothing is
  // written into a leaf until every gradient is computed, so a failed
  // backward leaves every grad as it was.
  std::vector<std::pair<TensorPtr, TensorPtr>> leaf_grads;
  absl::flat_hash_map<const StoredTensor*, size_t> leaf_index;
  auto add_leaf = [&](const TensorPtr& target, TensorPtr g) -> absl::Status {
    Executor::GradMath m(ex_, target->device);
    ASSIGN_OR_RETURN(g, m.Cast(g, target->dtype));
    if (!(g->shape == target->shape)) {
      return absl::InternalError(
          absl::StrCat("autograd: a gradient of shape ", g->shape.ToString(),
                       " for a tensor of shape ", target->shape.ToString()));
    }
    auto [it, added] = leaf_index.try_emplace(target.get(), leaf_grads.size());
    if (added) {
      leaf_grads.emplace_back(target, std::move(g));
    } else {
      TensorPtr& sum = leaf_grads[it->second].second;
      ASSIGN_OR_RETURN(sum, m.Bin(BinaryOp::kAdd, sum, g));
    }
    return absl::OkStatus();
  };
  // Each leaf's new grad: its old one plus this pass's, or a copy of this
  // pass's (which may share memory with another gradient), all made before
  // any is set. A grad is a new tensor each time: a handle taken on an
  // earlier grad keeps its values.
  auto commit = [&]() -> absl::Status {
    std::vector<TensorPtr> updated;
    updated.reserve(leaf_grads.size());
    for (auto& [target, g] : leaf_grads) {
      Executor::GradMath m(ex_, target->device);
      TensorPtr old;
      {
        absl::MutexLock lock(&target->autograd->mu);
        old = target->autograd->grad;
      }
      if (old == nullptr) {
        ASSIGN_OR_RETURN(Executor::Output copy, ex_.CastOut(*g, g->dtype));
        updated.push_back(ex_.Stored(m.slot(), std::move(copy)));
      } else {
        ASSIGN_OR_RETURN(TensorPtr sum, m.Bin(BinaryOp::kAdd, old, g));
        updated.push_back(std::move(sum));
      }
    }
    for (size_t i = 0; i < leaf_grads.size(); ++i) {
      AutogradMeta& meta = *leaf_grads[i].first->autograd;
      absl::MutexLock lock(&meta.mu);
      SetGrad(meta, std::move(updated[i]));
    }
    return absl::OkStatus();
  };
  if (fn == nullptr) {
    RETURN_IF_ERROR(add_leaf(root, seed));
    return commit();
  }

  // The nodes reachable from the root, with how many edges reach each.
  absl::flat_hash_map<GradNode*, int> deps;
  std::vector<std::shared_ptr<GradNode>> nodes{fn};
  absl::flat_hash_set<GradNode*> seen{fn.get()};
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const GradEdge& e : nodes[i]->next) {
      if (e.node == nullptr) continue;
      ++deps[e.node.get()];
      if (seen.insert(e.node.get()).second) nodes.push_back(e.node);
    }
  }
  // Each node runs once every node that feeds it has added its gradient.
  absl::flat_hash_map<GradNode*, TensorPtr> pending{{fn.get(), seed}};
  std::deque<std::shared_ptr<GradNode>> ready{fn};
  while (!ready.empty()) {
    std::shared_ptr<GradNode> node = std::move(ready.front());
    ready.pop_front();
    TensorPtr g;
    if (auto it = pending.find(node.get()); it != pending.end()) {
      g = std::move(it->second);
      pending.erase(it);
    }
    std::vector<TensorPtr> grads(node->next.size());
    if (g != nullptr) {
      {
        absl::MutexLock lock(&node->mu);
        if (node->released)
          return absl::FailedPreconditionError(ToAbsl(kFreedGraph));
      }
      RETURN_IF_ERROR(CheckVersions(*node));
      ASSIGN_OR_RETURN(grads, InputGrads(*node, g));
      g.reset();
    }
    for (size_t i = 0; i < node->next.size(); ++i) {
      const GradEdge& e = node->next[i];
      TensorPtr gi = i < grads.size() ? std::move(grads[i]) : nullptr;
      if (gi != nullptr && e.active()) {
        Executor::GradMath m(ex_, gi->device);
        ASSIGN_OR_RETURN(gi, m.Cast(gi, node->inputs[i].data->dtype));
      }
      if (e.node != nullptr) {
        if (gi != nullptr) {
          TensorPtr& sum = pending[e.node.get()];
          if (sum == nullptr) {
            sum = std::move(gi);
          } else {
            Executor::GradMath m(ex_, gi->device);
            ASSIGN_OR_RETURN(sum, m.Bin(BinaryOp::kAdd, sum, gi));
          }
        }
        if (--deps[e.node.get()] == 0) ready.push_back(e.node);
      } else if (e.is_leaf && gi != nullptr) {
        if (TensorPtr target = e.leaf.lock()) {
          RETURN_IF_ERROR(add_leaf(target, std::move(gi)));
        }
      }
    }
  }
  RETURN_IF_ERROR(commit());
  if (!retain_graph) {
    for (const std::shared_ptr<GradNode>& node : nodes) {
      absl::MutexLock lock(&node->mu);
      bool had_data = false;
      for (SavedTensor* s : {&node->output, &node->extra}) {
        if (s->data != nullptr && s->data->buffer != nullptr) had_data = true;
      }
      for (const SavedTensor& s : node->inputs) {
        if (s.data->buffer != nullptr) had_data = true;
      }
      if (!had_data) continue;  // nothing to free: it may run again
      node->released = true;
      node->charge.reset();  // before the memory it counts goes
      for (SavedTensor& s : node->inputs) s = Save(*s.data, false);
      if (node->output.data != nullptr) {
        node->output = Save(*node->output.data, false);
      }
      node->extra = SavedTensor{};
    }
  }
  return absl::OkStatus();
}

}  // namespace tensord::core
