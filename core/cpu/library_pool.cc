// max_pool2d's and avg_pool2d's PreparedCall (onednn_call.h), in the plain
// layout throughout (pooling reads its source as given). The backward of
// max pooling runs the forward again into the workspace for its indices
// (oneDNN's workspace: each window's first maximum), then the backward;
// the backward of average pooling needs only the gradient.
#include "absl/strings/str_cat.h"
#include "core/base/absl_compat.h"
#include "core/cpu/onednn_call.h"

namespace tensord::core::cpu::onednn {

absl::StatusOr<PreparedCall> PreparePool(const Pool2dArgs& a, DType dtype) {
  if (dtype != DType::kFloat32) {
    return absl::InternalError(absl::StrCat(
        "pool2d: oneDNN runs float32 here, not ", ToAbsl(DTypeName(dtype))));
  }
  using dnnl::memory;
  const WindowDims& w = a.dims;
  const memory::data_type f32 = memory::data_type::f32;
  const memory::desc src({w.n, w.c, w.h, w.w}, f32, memory::format_tag::nchw);
  const memory::desc dst({w.n, w.c, w.oh, w.ow}, f32, memory::format_tag::nchw);
  // PyTorch's ceil mode lets the last window overhang the right padding:
  // oneDNN takes that overhang as more right padding.
  const memory::dims strides{w.sh, w.sw}, kernel{w.kh, w.kw}, pad_l{w.ph, w.pw},
      pad_r{(w.oh - 1) * w.sh + w.kh - w.h - w.ph,
            (w.ow - 1) * w.sw + w.kw - w.w - w.pw};
  const dnnl::algorithm algorithm =
      a.algorithm == PoolAlgorithm::kMax ? dnnl::algorithm::pooling_max
      : a.algorithm == PoolAlgorithm::kAvgIncludePad
          ? dnnl::algorithm::pooling_avg_include_padding
          : dnnl::algorithm::pooling_avg_exclude_padding;
  const dnnl::primitive_attr attr = CallAttributes();
  using Ref = PreparedCall::Ref;
  PreparedCall call;
  try {
    const bool backward = a.pass == PoolPass::kBackward;
    const dnnl::pooling_forward::primitive_desc forward(
        dnnl::pooling_forward::desc(
            backward ? dnnl::prop_kind::forward_training
                     : dnnl::prop_kind::forward_inference,
            algorithm, src, dst, strides, kernel, pad_l, pad_r),
        attr, Engine());
    if (!backward) {  // x (twice) -> y
      call.AddOperand(src, src);
      call.AddOperand(src, src);
      call.AddOperand(dst, dst);
      call.AddStep(
          dnnl::pooling_forward(forward),
          {{DNNL_ARG_SRC, Ref{false, 0}}, {DNNL_ARG_DST, Ref{false, 2}}},
          forward.scratchpad_desc());
    } else {  // gy, x -> gx
      call.AddOperand(dst, dst);
      call.AddOperand(src, src);
      call.AddOperand(src, src);
      const dnnl::pooling_backward::primitive_desc pd(
          dnnl::pooling_backward::desc(algorithm, src, dst, strides, kernel,
                                       pad_l, pad_r),
          attr, Engine(), forward);
      PreparedCall::Args args = {{DNNL_ARG_DIFF_DST, Ref{false, 0}},
                                 {DNNL_ARG_DIFF_SRC, Ref{false, 2}}};
      if (a.algorithm == PoolAlgorithm::kMax) {
        const Ref y = call.AddRegion(dst);
        const Ref indices = call.AddRegion(forward.workspace_desc());
        call.AddStep(dnnl::pooling_forward(forward),
                     {{DNNL_ARG_SRC, Ref{false, 1}},
                      {DNNL_ARG_DST, y},
                      {DNNL_ARG_WORKSPACE, indices}},
                     forward.scratchpad_desc());
        args.push_back({DNNL_ARG_WORKSPACE, indices});
      }
      call.AddStep(dnnl::pooling_backward(pd), std::move(args),
                   pd.scratchpad_desc());
    }
    call.Finish(2);
  } catch (const dnnl::error& e) {
    return absl::InternalError(
        absl::StrCat("pool2d: oneDNN refused the window: ", e.what()));
  }
  return call;
}

}  // namespace tensord::core::cpu::onednn
