#include "core/cpu/library_conv.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <list>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/status.h"

#ifdef TENSORD_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>

// libgomp's, oneDNN's OpenMP runtime (linked by name: no -fopenmp).
extern "C" void omp_set_num_threads(int threads);
#endif

namespace tensord::core::cpu {
namespace {

std::atomic<uint64_t> made{0}, reused{0}, evicted{0}, reorders{0};

}  // namespace

LibraryConvCounters GetLibraryConvCounters() {
  return {made.load(), reused.load(), evicted.load(), reorders.load()};
}

#ifndef TENSORD_WITH_ONEDNN

const std::string& ConvLibrary() {
  static const std::string none;
  return none;
}
bool ConvLibraryRuns(DType) { return false; }
absl::StatusOr<uint64_t> LibraryConvWorkspace(const Conv2dArgs&, DType) {
  return absl::InternalError("conv2d: this build has no oneDNN");
}
absl::Status LibraryConv(const Conv2dArgs&, DType, const void*, const void*,
                         void*, void*, int) {
  return absl::InternalError("conv2d: this build has no oneDNN");
}

#else  // TENSORD_WITH_ONEDNN

namespace {

using dnnl::memory;
using Tag = memory::format_tag;

// The cache's bound: a network has a few dozen convolution shapes.
constexpr size_t kMaxPrimitives = 256;
constexpr size_t kAlign = 64;

size_t Aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

dnnl::engine& Engine() {
  static auto* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

struct Key {
  ConvPass pass;
  DType dtype;
  std::array<int64_t, 16> dims;
  bool operator==(const Key& other) const = default;
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = static_cast<size_t>(k.pass) * 31 + static_cast<size_t>(k.dtype);
    for (int64_t d : k.dims) h = h * 1000003 ^ static_cast<size_t>(d);
    return h;
  }
};

Key KeyOf(const Conv2dArgs& a, DType dtype) {
  const WindowDims& w = a.dims;
  return Key{a.pass,
             dtype,
             {w.n, w.c, w.h, w.w, w.kh, w.kw, w.sh, w.sw, w.ph, w.pw, w.dh,
              w.dw, w.oh, w.ow, a.groups, a.out_channels}};
}

// One of the call's three tensors (inputs[0], inputs[1], out): the
// primitive's argument, its plain layout, the layout the primitive wants
// and, when they differ, the reorder between them and where the reordered
// copy lies in the workspace.
struct Operand {
  Operand() = default;
  Operand(int a, memory::desc p, memory::desc w)
      : arg(a), plain(std::move(p)), wanted(std::move(w)) {}
  int arg = 0;
  memory::desc plain, wanted;
  std::optional<dnnl::reorder> reorder;
  size_t offset = 0;
};

// A cached convolution: the primitive, its three operands and the
// workspace layout (reordered copies, then the scratch every primitive of
// the call shares, as they run one after another).
struct Prepared {
  dnnl::primitive conv;
  std::array<Operand, 3> operands;
  size_t scratch_offset = 0;
  size_t bytes = 0;
};

dnnl::primitive_attr UserScratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

absl::StatusOr<std::shared_ptr<const Prepared>> Prepare(const Conv2dArgs& a,
                                                       DType dtype) {
  if (dtype != DType::kFloat32) {
    return absl::InternalError(
        absl::StrCat("conv2d: oneDNN runs float32 here, not dtype ",
                     static_cast<int>(dtype)));
  }
  const WindowDims& w = a.dims;
  const int64_t g = a.groups, oc = a.out_channels;
  const memory::data_type f32 = memory::data_type::f32;
  const memory::dims src{w.n, w.c, w.h, w.w}, dst{w.n, oc, w.oh, w.ow};
  const memory::dims wei = g > 1 ? memory::dims{g, oc / g, w.c / g, w.kh, w.kw}
                                 : memory::dims{oc, w.c, w.kh, w.kw};
  const Tag wei_tag = g > 1 ? Tag::goihw : Tag::oihw;
  const memory::desc src_plain(src, f32, Tag::nchw),
      dst_plain(dst, f32, Tag::nchw), wei_plain(wei, f32, wei_tag);
  const memory::desc src_any(src, f32, Tag::any), dst_any(dst, f32, Tag::any),
      wei_any(wei, f32, Tag::any);
  const memory::dims strides{w.sh, w.sw}, dilates{w.dh - 1, w.dw - 1},
      pad_l{w.ph, w.pw}, pad_r{w.ph, w.pw};
  const dnnl::primitive_attr attr = UserScratchpad();
  auto prepared = std::make_shared<Prepared>();
  std::array<Operand, 3>& ops = prepared->operands;
  size_t scratch = 0;
  try {
    const dnnl::convolution_forward::primitive_desc forward(
        dnnl::convolution_forward::desc(
            dnnl::prop_kind::forward_training,
            dnnl::algorithm::convolution_direct, src_any, wei_any, dst_any,
            strides, dilates, pad_l, pad_r),
        attr, Engine());
    switch (a.pass) {
      case ConvPass::kForward:
        ops = {Operand{DNNL_ARG_SRC, src_plain, forward.src_desc()},
               Operand{DNNL_ARG_WEIGHTS, wei_plain, forward.weights_desc()},
               Operand{DNNL_ARG_DST, dst_plain, forward.dst_desc()}};
        prepared->conv = dnnl::convolution_forward(forward);
        scratch = forward.scratchpad_desc().get_size();
        break;
      case ConvPass::kBackwardData: {
        const dnnl::convolution_backward_data::primitive_desc pd(
            dnnl::convolution_backward_data::desc(
                dnnl::algorithm::convolution_direct, src_any, wei_any,
                dst_any, strides, dilates, pad_l, pad_r),
            attr, Engine(), forward);
        ops = {Operand{DNNL_ARG_DIFF_DST, dst_plain, pd.diff_dst_desc()},
               Operand{DNNL_ARG_WEIGHTS, wei_plain, pd.weights_desc()},
               Operand{DNNL_ARG_DIFF_SRC, src_plain, pd.diff_src_desc()}};
        prepared->conv = dnnl::convolution_backward_data(pd);
        scratch = pd.scratchpad_desc().get_size();
        break;
      }
      case ConvPass::kBackwardWeights: {
        const dnnl::convolution_backward_weights::primitive_desc pd(
            dnnl::convolution_backward_weights::desc(
                dnnl::algorithm::convolution_direct, src_any, wei_any,
                dst_any, strides, dilates, pad_l, pad_r),
            attr, Engine(), forward);
        ops = {Operand{DNNL_ARG_SRC, src_plain, pd.src_desc()},
               Operand{DNNL_ARG_DIFF_DST, dst_plain, pd.diff_dst_desc()},
               Operand{DNNL_ARG_DIFF_WEIGHTS, wei_plain,
                       pd.diff_weights_desc()}};
        prepared->conv = dnnl::convolution_backward_weights(pd);
        scratch = pd.scratchpad_desc().get_size();
        break;
      }
    }
    size_t offset = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      Operand& op = ops[i];
      if (op.wanted == op.plain) continue;
      const bool input = i < 2;
      const dnnl::reorder::primitive_desc pd(
          Engine(), input ? op.plain : op.wanted, Engine(),
          input ? op.wanted : op.plain, attr);
      op.reorder.emplace(pd);
      scratch = std::max(scratch, pd.scratchpad_desc().get_size());
      op.offset = offset;
      offset += Aligned(op.wanted.get_size());
    }
    prepared->scratch_offset = offset;
    prepared->bytes = offset + Aligned(std::max<size_t>(scratch, 1));
  } catch (const dnnl::error& e) {
    return absl::InternalError(
        absl::StrCat("conv2d: oneDNN refused the window: ", e.what()));
  }
  return prepared;
}

// The bounded cache of prepared convolutions, least recently used first
// out.
class Cache {
 public:
  absl::StatusOr<std::shared_ptr<const Prepared>> Get(const Conv2dArgs& a,
                                                      DType dtype) {
    const Key key = KeyOf(a, dtype);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = index_.find(key);
      if (it != index_.end()) {
        order_.splice(order_.begin(), order_, it->second);
        reused.fetch_add(1);
        return it->second->second;
      }
    }
    // Made outside the lock: preparing takes milliseconds.
    absl::StatusOr<std::shared_ptr<const Prepared>> prepared =
        Prepare(a, dtype);
    if (!prepared.ok()) return prepared.status();
    made.fetch_add(1);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) return it->second->second;  // another thread's
    order_.emplace_front(key, *prepared);
    index_.emplace(key, order_.begin());
    if (order_.size() > kMaxPrimitives) {
      index_.erase(order_.back().first);
      order_.pop_back();
      evicted.fetch_add(1);
    }
    return *prepared;
  }

 private:
  using Entry = std::pair<Key, std::shared_ptr<const Prepared>>;
  std::mutex mu_;
  std::list<Entry> order_;
  std::unordered_map<Key, std::list<Entry>::iterator, KeyHash> index_;
};

Cache& TheCache() {
  static auto* cache = new Cache;
  return *cache;
}

std::string Probe() {
  Conv2dArgs a;
  a.dims = WindowDims{1, 1, 3, 3, 2, 2, 1, 1, 0, 0, 1, 1, 2, 2};
  if (!Prepare(a, DType::kFloat32).ok()) return "";
  const dnnl_version_t* v = dnnl_version();
  return absl::StrCat("oneDNN ", v->major, ".", v->minor, ".", v->patch);
}

}  // namespace

const std::string& ConvLibrary() {
  static const std::string* library = new std::string(Probe());
  return *library;
}

bool ConvLibraryRuns(DType dtype) {
  return dtype == DType::kFloat32 && !ConvLibrary().empty();
}

absl::StatusOr<uint64_t> LibraryConvWorkspace(const Conv2dArgs& args,
                                              DType dtype) {
  ASSIGN_OR_RETURN(std::shared_ptr<const Prepared> prepared,
                   TheCache().Get(args, dtype));
  return static_cast<uint64_t>(prepared->bytes);
}

absl::Status LibraryConv(const Conv2dArgs& args, DType dtype, const void* in0,
                         const void* in1, void* out, void* workspace,
                         int threads) {
  ASSIGN_OR_RETURN(std::shared_ptr<const Prepared> prepared,
                   TheCache().Get(args, dtype));
  if (threads > 0) omp_set_num_threads(threads);
  auto* bytes = static_cast<uint8_t*>(workspace);
  void* const given[3] = {const_cast<void*>(in0), const_cast<void*>(in1), out};
  try {
    dnnl::stream stream(Engine());
    const dnnl::memory scratch(
        memory::desc({static_cast<int64_t>(prepared->bytes -
                                           prepared->scratch_offset)},
                     memory::data_type::u8, Tag::a),
        Engine(), bytes + prepared->scratch_offset);
    std::unordered_map<int, dnnl::memory> conv_args;
    std::array<dnnl::memory, 3> plain;
    for (size_t i = 0; i < 3; ++i) {
      const Operand& op = prepared->operands[i];
      plain[i] = dnnl::memory(op.plain, Engine(), given[i]);
      if (!op.reorder.has_value()) {
        conv_args.emplace(op.arg, plain[i]);
        continue;
      }
      dnnl::memory wanted(op.wanted, Engine(), bytes + op.offset);
      if (i < 2) {
        op.reorder->execute(stream, {{DNNL_ARG_FROM, plain[i]},
                                     {DNNL_ARG_TO, wanted},
                                     {DNNL_ARG_SCRATCHPAD, scratch}});
        reorders.fetch_add(1);
      }
      conv_args.emplace(op.arg, wanted);
    }
    conv_args.emplace(DNNL_ARG_SCRATCHPAD, scratch);
    prepared->conv.execute(stream, conv_args);
    const Operand& result = prepared->operands[2];
    if (result.reorder.has_value()) {
      result.reorder->execute(stream, {{DNNL_ARG_FROM, conv_args.at(result.arg)},
                                       {DNNL_ARG_TO, plain[2]},
                                       {DNNL_ARG_SCRATCHPAD, scratch}});
      reorders.fetch_add(1);
    }
    stream.wait();
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("conv2d on oneDNN: ", e.what()));
  }
  return absl::OkStatus();
}

#endif  // TENSORD_WITH_ONEDNN

}  // namespace tensord::core::cpu
