// conv2d's PreparedCall (onednn_call.h): one convolution primitive per
// pass, each with the forward's descriptor as its hint, the tensors in
// whatever layout oneDNN prefers for the shape (`any`).
#include "absl/strings/str_cat.h"
#include "core/base/absl_compat.h"
#include "core/cpu/onednn_call.h"

namespace tensord::core::cpu::onednn {

absl::StatusOr<PreparedCall> PrepareConv(const Conv2dArgs& a, DType dtype) {
  if (dtype != DType::kFloat32) {
    return absl::InternalError(absl::StrCat(
        "conv2d: oneDNN runs float32 here, not ", ToAbsl(DTypeName(dtype))));
  }
  using dnnl::memory;
  using Tag = memory::format_tag;
  const WindowDims& w = a.dims;
  const int64_t g = a.groups, oc = a.out_channels;
  const memory::data_type f32 = memory::data_type::f32;
  const memory::dims src{w.n, w.c, w.h, w.w}, dst{w.n, oc, w.oh, w.ow};
  const memory::dims wei = g > 1 ? memory::dims{g, oc / g, w.c / g, w.kh, w.kw}
                                 : memory::dims{oc, w.c, w.kh, w.kw};
  const memory::desc src_plain(src, f32, Tag::nchw),
      dst_plain(dst, f32, Tag::nchw),
      wei_plain(wei, f32, g > 1 ? Tag::goihw : Tag::oihw);
  const memory::desc src_any(src, f32, Tag::any), dst_any(dst, f32, Tag::any),
      wei_any(wei, f32, Tag::any), bias_plain({oc}, f32, Tag::a);
  const memory::dims strides{w.sh, w.sw}, dilates{w.dh - 1, w.dw - 1},
      pad{w.ph, w.pw};
  const dnnl::primitive_attr attr = CallAttributes();
  PreparedCall call;
  try {
    // The backward passes' hint: the forward without a bias.
    const dnnl::convolution_forward::primitive_desc forward(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                        dnnl::algorithm::convolution_direct,
                                        src_any, wei_any, dst_any, strides,
                                        dilates, pad, pad),
        attr, Engine());
    // Operands 0 and 1 (and a forward's bias) are read, the last written
    // (Conv2dArgs' passes).
    switch (a.pass) {
      case ConvPass::kForward: {
        const dnnl::convolution_forward::primitive_desc pd =
            a.bias
                ? dnnl::convolution_forward::primitive_desc(
                      dnnl::convolution_forward::desc(
                          dnnl::prop_kind::forward_training,
                          dnnl::algorithm::convolution_direct, src_any, wei_any,
                          bias_plain, dst_any, strides, dilates, pad, pad),
                      attr, Engine())
                : forward;
        call.AddOperand(src_plain, pd.src_desc());
        call.AddOperand(wei_plain, pd.weights_desc());
        PreparedCall::Args args = {{DNNL_ARG_SRC, 0}, {DNNL_ARG_WEIGHTS, 1}};
        if (a.bias) {
          call.AddOperand(bias_plain, pd.bias_desc());
          args.push_back({DNNL_ARG_BIAS, 2});
        }
        const int out = call.AddOperand(dst_plain, pd.dst_desc());
        args.push_back({DNNL_ARG_DST, out});
        call.AddStep(dnnl::convolution_forward(pd), std::move(args),
                     pd.scratchpad_desc());
        call.Finish(out);
        return call;
      }
      case ConvPass::kBackwardData: {
        const dnnl::convolution_backward_data::primitive_desc pd(
            dnnl::convolution_backward_data::desc(
                dnnl::algorithm::convolution_direct, src_any, wei_any, dst_any,
                strides, dilates, pad, pad),
            attr, Engine(), forward);
        call.AddOperand(dst_plain, pd.diff_dst_desc());
        call.AddOperand(wei_plain, pd.weights_desc());
        call.AddOperand(src_plain, pd.diff_src_desc());
        call.AddStep(dnnl::convolution_backward_data(pd),
                     {{DNNL_ARG_DIFF_DST, 0},
                      {DNNL_ARG_WEIGHTS, 1},
                      {DNNL_ARG_DIFF_SRC, 2}},
                     pd.scratchpad_desc());
        break;
      }
      case ConvPass::kBackwardWeights: {
        const dnnl::convolution_backward_weights::primitive_desc pd(
            dnnl::convolution_backward_weights::desc(
                dnnl::algorithm::convolution_direct, src_any, wei_any, dst_any,
                strides, dilates, pad, pad),
            attr, Engine(), forward);
        call.AddOperand(src_plain, pd.src_desc());
        call.AddOperand(dst_plain, pd.diff_dst_desc());
        call.AddOperand(wei_plain, pd.diff_weights_desc());
        call.AddStep(dnnl::convolution_backward_weights(pd),
                     {{DNNL_ARG_SRC, 0},
                      {DNNL_ARG_DIFF_DST, 1},
                      {DNNL_ARG_DIFF_WEIGHTS, 2}},
                     pd.scratchpad_desc());
        break;
      }
    }
    call.Finish(2);
  } catch (const dnnl::error& e) {
    return absl::InternalError(
        absl::StrCat("conv2d: oneDNN refused the window: ", e.what()));
  }
  return call;
}

}  // namespace tensord::core::cpu::onednn
