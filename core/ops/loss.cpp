// Losses: cross_entropy over class-index targets (logits [N, C] or
// [N, C, d1, ...]), nll_loss over log-probabilities, and mse_loss. reduction
// is "mean", "sum" or "none"; with "mean", cross_entropy/nll_loss divide by
// the number of targets that are not ignore_index, as PyTorch does.
#include "core/ops/op_helpers.h"

namespace kiln {
namespace {

Shape reductionShape(const Node& n, const Shape& per_element) {
  const std::string& r = n.s("reduction");
  if (r == "none") return per_element;
  if (r == "mean" || r == "sum") return {};
  opFail(n, "reduction must be \"mean\", \"sum\" or \"none\", got \"" + r + "\"");
}

/// cross_entropy's `dtype`: the type it computes in and returns; unset, the
/// logits'. f32 over bf16/f16 logits widens them as it reads them, exactly
/// as a cast to f32 in front of it (autocast's) would.
DType lossDType(const Node& n) {
  const DType x = n.input(0)->dtype();
  if (!n.hasAttr("dtype")) return x;
  const DType want = n.dt("dtype");
  const bool widens = want == DType::F32 && isLowPrecisionFloat(x);
  if (want != x && !widens) opFail(n, "dtype " + std::string(dtypeName(want)) + " over " + std::string(dtypeName(x)) +
                                          " logits: only f32 over bf16/f16 logits (or the logits' own dtype)");
  return want;
}

std::vector<TensorType> inferClassLoss(const Node& n) {
  const TensorType& x = n.input(0)->type();
  const TensorType& target = n.input(1)->type();
  if (!isFloating(x.dtype)) opFail(n, "input must be floating point, got " + x.str());
  if (!isIntegral(target.dtype)) opFail(n, "target must hold class indices (integers), got " + target.str());
  if (x.rank() == 0) opFail(n, "input must have a class dimension (rank >= 1), got " + x.str());
  Shape expect;
  if (x.rank() == 1) {
    expect = {};
  } else {
    expect = x.shape;
    expect.erase(expect.begin() + 1);
  }
  if (target.shape != expect) opFail(n, "target " + target.str() + " does not match input " + x.str());
  return {{x.dtype, reductionShape(n, expect)}};
}

std::vector<TensorType> inferCrossEntropy(const Node& n) {
  std::vector<TensorType> types = inferClassLoss(n);
  types[0].dtype = lossDType(n);
  return types;
}

std::vector<TensorType> inferMse(const Node& n) {
  const TensorType& a = n.input(0)->type();
  const TensorType& b = n.input(1)->type();
  if (!isFloating(a.dtype) || a.dtype != b.dtype) opFail(n, "inputs must be the same floating type");
  return {{a.dtype, reductionShape(n, broadcastShapes(n, a.shape, b.shape))}};
}

}  // namespace

void registerLossOps(OpTable& t) {
  const std::string mean = "mean";
  t.add({"cross_entropy", "(logits, class targets) -> loss (dtype: f32 over bf16/f16 logits reads them widened)", 2, 2,
         0,
         {optAttr("reduction", mean), optAttr("ignore_index", int64_t{-100}), optAttr("label_smoothing", 0.0),
          unsetAttr("dtype", AttrKind::DType)},
         inferCrossEntropy, nullptr});
  t.add({"nll_loss", "(log-probabilities, class targets) -> loss", 2, 2, 0,
         {optAttr("reduction", mean), optAttr("ignore_index", int64_t{-100})}, inferClassLoss, nullptr});
  t.add({"mse_loss", "mean squared error", 2, 2, 0, {optAttr("reduction", mean)}, inferMse, nullptr});
}

}  // namespace kiln
