#include "core/cpu/onednn_call.h"

#include <algorithm>
#include <atomic>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "core/base/absl_compat.h"
#include "core/cpu/library_kernels.h"

// libgomp's, oneDNN's OpenMP runtime (linked by name: no -fopenmp).
extern "C" void omp_set_num_threads(int threads);

namespace tensord::core::cpu::onednn {
namespace {

using dnnl::memory;

constexpr size_t kAlign = 64;

size_t Aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// A reorder copies memory: below this many bytes it runs on the calling
// thread alone, as waking the team costs more than the copy (a 16x6x5x5
// weight took 70 us on two threads, ONEDNN_VERBOSE on the 2-core VM).
constexpr size_t kParallelReorderBytes = size_t{1} << 20;

// Sets the calling thread's OpenMP team size for the next call when it
// differs from the last one set.
void UseThreads(int threads, int& current) {
  if (threads > 0 && threads != current) {
    omp_set_num_threads(threads);
    current = threads;
  }
}

}  // namespace

dnnl::engine& Engine() {
  static auto* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

dnnl::primitive_attr CallAttributes() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

int PreparedCall::AddOperand(const memory::desc& plain,
                             const memory::desc& wanted) {
  operands_.push_back(Operand{plain, wanted, std::nullopt, 0});
  return static_cast<int>(operands_.size()) - 1;
}

void PreparedCall::AddStep(dnnl::primitive primitive, Args args,
                           const memory::desc& scratch) {
  steps_.push_back(Step{std::move(primitive), std::move(args)});
  scratch_ = std::max(scratch_, scratch.get_size());
}

void PreparedCall::Finish(int inputs) {
  inputs_ = inputs;
  const dnnl::primitive_attr attr = CallAttributes();
  size_t offset = 0;
  for (size_t i = 0; i < operands_.size(); ++i) {
    Operand& op = operands_[i];
    if (op.wanted == op.plain) continue;
    const bool input = static_cast<int>(i) < inputs;
    const dnnl::reorder::primitive_desc pd(
        Engine(), input ? op.plain : op.wanted, Engine(),
        input ? op.wanted : op.plain, attr);
    op.reorder.emplace(pd);
    scratch_ = std::max(scratch_, pd.scratchpad_desc().get_size());
    op.offset = offset;
    offset += Aligned(op.wanted.get_size());
  }
  scratch_offset_ = offset;
  bytes_ = offset + Aligned(scratch_);
}

absl::Status PreparedCall::Run(std::span<void* const> given, void* workspace,
                               int threads, std::string_view what) const {
  if (given.size() != operands_.size()) {
    return absl::InternalError(
        absl::StrCat(ToAbsl(what), " on oneDNN: ", given.size(),
                     " tensors given for ", operands_.size()));
  }
  int current = 0;
  auto reorder_threads = [&](const memory::desc& desc) {
    return desc.get_size() < kParallelReorderBytes ? 1 : threads;
  };
  auto* bytes = static_cast<uint8_t*>(workspace);
  try {
    dnnl::stream stream(Engine());
    const memory scratch(
        memory::desc({static_cast<int64_t>(bytes_ - scratch_offset_)},
                     memory::data_type::u8, memory::format_tag::a),
        Engine(), bytes + scratch_offset_);
    // Each operand as its primitives see it, reordered in where wanted.
    std::vector<memory> plain(operands_.size()), seen(operands_.size());
    for (size_t i = 0; i < operands_.size(); ++i) {
      const Operand& op = operands_[i];
      plain[i] = memory(op.plain, Engine(), given[i]);
      if (!op.reorder.has_value()) {
        seen[i] = plain[i];
        continue;
      }
      seen[i] = memory(op.wanted, Engine(), bytes + op.offset);
      if (static_cast<int>(i) < inputs_) {
        UseThreads(reorder_threads(op.wanted), current);
        op.reorder->execute(stream, {{DNNL_ARG_FROM, plain[i]},
                                     {DNNL_ARG_TO, seen[i]},
                                     {DNNL_ARG_SCRATCHPAD, scratch}});
        NoteLibraryReorder();
      }
    }
    for (const Step& step : steps_) {
      std::unordered_map<int, memory> args;
      for (const auto& [arg, operand] : step.args) {
        args.emplace(arg, seen[operand]);
      }
      args.emplace(DNNL_ARG_SCRATCHPAD, scratch);
      UseThreads(threads, current);
      step.primitive.execute(stream, args);
    }
    for (size_t i = inputs_; i < operands_.size(); ++i) {
      const Operand& op = operands_[i];
      if (!op.reorder.has_value()) continue;
      UseThreads(reorder_threads(op.wanted), current);
      op.reorder->execute(stream, {{DNNL_ARG_FROM, seen[i]},
                                   {DNNL_ARG_TO, plain[i]},
                                   {DNNL_ARG_SCRATCHPAD, scratch}});
      NoteLibraryReorder();
    }
    stream.wait();
  } catch (const dnnl::error& e) {
    return absl::InternalError(
        absl::StrCat(ToAbsl(what), " on oneDNN: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace tensord::core::cpu::onednn
