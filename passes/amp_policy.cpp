// The autocast policy table. Entries follow torch.autocast's op reference
// ("Autocast Op Reference" in the torch.amp docs): the CUDA lists of ops that
// autocast to float16 and to float32, which CPU bf16 autocast shares in
// spirit (its low-precision list is conv/bmm/mm/matmul/baddbmm/addmm/
// addbmm/linear; its f32 list holds the losses). Kiln keeps the stricter
// CUDA f32 list on every device so that CPU and GPU round at the same op
// boundaries. Ops not listed run in their inputs' dtype.
#include "passes/amp_policy.h"

#include <algorithm>

namespace kiln {

const std::vector<AmpPolicyEntry>& ampPolicy() {
  using enum AmpCategory;
  static const std::vector<AmpPolicyEntry> table = {
      // ---- low precision: the GEMMs, where bf16/f16 pays (tensor cores, half the bytes);
      // ---- accumulation stays f32 in every kernel.
      {"matmul", Lower, "torch: matmul, mm, bmm, baddbmm, addmm in the low-precision list"},
      {"linear", Lower, "torch: linear in the low-precision list"},
      {"conv2d", Lower, "torch: conv1d/2d/3d in the low-precision list"},
      {"conv2d_input_backward", Lower,
       "torch: conv_transpose1d/2d/3d in the low-precision list (the importers lower a transposed convolution to "
       "conv2d's input gradient)"},
      {"attention", Lower,
       "torch: the matmuls inside scaled_dot_product_attention are in the low-precision list; the fused kernel "
       "keeps scores, softmax and sums in f32 and leaves an additive mask (input 3) in its dtype",
       3},

      // ---- f32: softmax-like ops, whose exp and sum need f32's range and precision.
      {"softmax", Fp32, "torch CUDA: softmax in the float32 list"},
      {"log_softmax", Fp32, "torch CUDA: log_softmax in the float32 list"},
      // ---- f32: normalizations (mean/variance of many elements; tiny variances underflow in f16).
      // ---- batch_norm is in neither list (as in torch's CPU and CUDA autocast): it runs on its
      // ---- input's dtype with f32 parameters and running statistics, its statistics summed in
      // ---- f32 or wider, so a conv -> batch_norm -> relu chain stays low precision.
      {"layer_norm", Fp32, "torch CUDA: layer_norm in the float32 list"},
      {"group_norm", Fp32, "torch CUDA: group_norm in the float32 list"},
      // ---- f32: reductions, whose sums over many elements lose bits (and overflow f16).
      {"sum", Fp32, "torch CUDA: sum in the float32 list"},
      {"mean", Fp32, "reduction like sum (torch's mean of f16 accumulates in f32 too)"},
      {"prod", Fp32, "torch CUDA: prod in the float32 list"},
      {"var", Fp32, "variance: a difference of sums, cancellation-prone"},
      {"cumsum", Fp32, "torch CUDA: cumsum in the float32 list"},
      {"cumprod", Fp32, "torch CUDA: cumprod in the float32 list"},
      // ---- f32: losses (torch: cross_entropy, nll_loss, mse_loss in both the CUDA and CPU f32 lists).
      {"cross_entropy", Fp32, "torch: cross_entropy in the float32 list"},
      {"nll_loss", Fp32, "torch: nll_loss in the float32 list (CPU and CUDA)"},
      {"mse_loss", Fp32, "torch: mse_loss in the float32 list (CPU and CUDA)"},
      // ---- f32: transcendental functions whose output range exceeds f16's or that amplify error.
      {"exp", Fp32, "torch CUDA: exp in the float32 list (overflows f16 above 11)"},
      {"log", Fp32, "torch CUDA: log in the float32 list"},
      {"log1p", Fp32, "torch CUDA: log1p in the float32 list"},
      {"expm1", Fp32, "torch CUDA: expm1 in the float32 list"},
      {"pow", Fp32, "torch CUDA: pow in the float32 list"},
      {"reciprocal", Fp32, "torch CUDA: reciprocal in the float32 list"},
      {"rsqrt", Fp32, "torch CUDA: rsqrt in the float32 list"},
      {"softplus", Fp32, "torch CUDA: softplus in the float32 list"},

      // ---- promote: binary ops over a low-precision and an f32 tensor run in f32, as
      // ---- torch's type promotion does; Kiln's ops promote by themselves (core/dtype.h).
      {"add", Promote, "a + b: residual adds of a bf16 branch and an f32 stream stay f32"},
      {"sub", Promote, "a - b"},
      {"mul", Promote, "a * b"},
      {"div", Promote, "a / b"},
      {"maximum", Promote, "max(a, b)"},
      {"minimum", Promote, "min(a, b)"},
      {"atan2", Promote, "torch CUDA: atan2 in the promote list"},
      {"xlogy", Promote, "a * log(b): in neither of torch's autocast lists, it runs in the promoted input type"},
      {"where", Promote, "cond ? a : b"},
      {"cat", Promote, "torch CPU: cat in the promote list"},
  };
  return table;
}

const AmpPolicyEntry* ampPolicyEntry(std::string_view op) {
  const auto& t = ampPolicy();
  auto it = std::ranges::find(t, op, &AmpPolicyEntry::op);
  return it == t.end() ? nullptr : &*it;
}

std::optional<AmpCategory> ampCategory(std::string_view op) {
  const AmpPolicyEntry* e = ampPolicyEntry(op);
  if (!e) return std::nullopt;
  return e->category;
}

}  // namespace kiln
