// aten -> Kiln: losses. cross_entropy, nll_loss and mse_loss map onto the
// Kiln ops of the same name; the others are written out elementwise with a
// final mean or sum, following PyTorch's formulas (including its clamping of
// log() at -100 in binary_cross_entropy and the stable form of the logits
// variant). `reduction` arrives as PyTorch's enum: 0 none, 1 mean, 2 sum.
#include "core/import/decompositions/loss.h"
#include "core/import/torchscript/lowering.h"
#include "core/result.h"

namespace kiln::ts {
namespace {

using Out = std::vector<SV>;

std::string reductionName(int64_t r) {
  switch (r) {
    case 0:
      return "none";
    case 1:
      return "mean";
    case 2:
      return "sum";
    default:
      fail("unknown reduction " + std::to_string(r));
  }
}

/// Apply `reduction` (none / mean / sum over everything) to elementwise losses.
Value* reduceLoss(Lowering& cx, Value* v, int64_t reduction) {
  return decomp::reduceLoss(cx, v, reductionName(reduction));
}

// cross_entropy_loss(self, target, weight, reduction, ignore_index, label_smoothing)
// nll_loss / nll_loss_nd / nll_loss2d(self, target, weight, reduction, ignore_index)
Out lowerClassLoss(Lowering& cx, Args& a) {
  Value* target = a.tensor(1);
  if (!isIntegral(target->dtype())) fail("only class-index targets are supported, got " + target->type().str());
  if (a.given(2)) {  // class weights: decomposed (Kiln's loss ops are unweighted)
    const std::string r = reductionName(a.integer(3));
    if (a.kiln_op == "cross_entropy")
      return single(cx, decomp::weightedCrossEntropy(cx, a.tensor(0), target, a.tensor(2), r, a.integer(4),
                                                     a.given(5) ? a.real(5) : 0.0));
    return single(cx, decomp::weightedNll(cx, a.tensor(0), target, a.tensor(2), r, a.integer(4)));
  }
  AttrMap attrs = {{"reduction", reductionName(a.integer(3))}, {"ignore_index", a.integer(4)}};
  if (a.kiln_op == "cross_entropy") attrs["label_smoothing"] = a.given(5) ? a.real(5) : 0.0;
  return single(cx, cx.emit(a.kiln_op, {a.tensor(0), target}, attrs));
}

// mse_loss(self, target, reduction)
Out lowerMse(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  Value* y = cx.cast(a.tensor(1), x->dtype());
  return single(cx, cx.emit("mse_loss", {x, y}, {{"reduction", reductionName(a.integer(2))}}));
}

// l1_loss(self, target, reduction); smooth_l1_loss(..., beta); huber_loss(..., delta)
Out lowerRobustLoss(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  Value* loss = decomp::robustLoss(cx, x, cx.cast(a.tensor(1), x->dtype()), std::string(a.kiln_op),
                                   a.given(3) ? a.real(3) : 1.0);
  return single(cx, reduceLoss(cx, loss, a.integer(2)));
}

// binary_cross_entropy(self, target, weight, reduction)
Out lowerBce(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  const DType t = x->dtype();
  Value* loss = decomp::bce(cx, x, cx.cast(a.tensor(1), t), a.given(2) ? cx.cast(a.tensor(2), t) : nullptr);
  return single(cx, reduceLoss(cx, loss, a.integer(3)));
}

// binary_cross_entropy_with_logits(self, target, weight, pos_weight, reduction)
Out lowerBceLogits(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  const DType t = x->dtype();
  Value* loss = decomp::bceWithLogits(cx, x, cx.cast(a.tensor(1), t), a.given(2) ? cx.cast(a.tensor(2), t) : nullptr,
                                      a.given(3) ? cx.cast(a.tensor(3), t) : nullptr);
  return single(cx, reduceLoss(cx, loss, a.integer(4)));
}

// kl_div(self, target, reduction=mean, log_target=False)
Out lowerKlDiv(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  Value* loss = decomp::klDiv(cx, x, cx.cast(a.tensor(1), x->dtype()), a.given(3) && a.flag(3));
  return single(cx, reduceLoss(cx, loss, a.given(2) ? a.integer(2) : 1));
}

const AtenRule kRules[] = {
    {"aten::kl_div", lowerKlDiv},
    {"aten::cross_entropy_loss", lowerClassLoss, "cross_entropy"},
    {"aten::nll_loss", lowerClassLoss, "nll_loss"},
    {"aten::nll_loss_nd", lowerClassLoss, "nll_loss"},
    {"aten::nll_loss2d", lowerClassLoss, "nll_loss"},
    {"aten::mse_loss", lowerMse},
    {"aten::l1_loss", lowerRobustLoss, "l1"},
    {"aten::smooth_l1_loss", lowerRobustLoss, "smooth_l1"},
    {"aten::huber_loss", lowerRobustLoss, "huber"},
    {"aten::binary_cross_entropy", lowerBce},
    {"aten::binary_cross_entropy_with_logits", lowerBceLogits},
};

}  // namespace

std::span<const AtenRule> lossRules() {
  return kRules;
}

}  // namespace kiln::ts
