// Shared decompositions (see common.h): losses with class weights, label
// smoothing and ignore_index, the robust losses (L1, smooth L1, Huber), KL
// divergence and binary cross-entropy (with logits and pos_weight).
#pragma once

#include <string>
#include <vector>

#include "core/import/decompositions/math.h"

namespace kiln::decomp {

/// `v` reduced as a loss: "none", "mean" or "sum" over every element.
template <class Cx>
Value* reduceLoss(Cx& cx, Value* v, const std::string& reduction) {
  if (reduction == "none") return v;
  return cx.emit(reduction, {v}, {{"dims", std::vector<int64_t>{}}, {"keepdim", int64_t{0}}});
}

/// The elementwise l1 ("l1"), smooth_l1 (k = beta) or huber (k = delta) loss of x, y (one dtype).
template <class Cx>
Value* robustLoss(Cx& cx, Value* x, Value* y, const std::string& kind, double k) {
  const DType t = x->dtype();
  Value* d = cx.emit("abs", {cx.emit("sub", {x, y})});
  if (kind == "l1" || (kind == "smooth_l1" && k == 0)) return d;
  Value* half_sq = cx.emit("mul", {cx.emit("mul", {d, d}), cx.scalar(0.5, t)});
  Value* small = cx.emit("lt", {d, cx.scalar(k, t)});
  Value* linear = cx.emit("sub", {d, cx.scalar(0.5 * k, t)});
  if (kind == "smooth_l1") return cx.emit("where", {small, cx.emit("div", {half_sq, cx.scalar(k, t)}), linear});
  return cx.emit("where", {small, half_sq, cx.emit("mul", {linear, cx.scalar(k, t)})});
}

/// Class-weighted negative log-likelihood of log-probabilities logp ([N, C,
/// d...] or unbatched [C, ...]; classes on dim 1, or 0 when target has one
/// dim less than logp's batch form) at integer targets, PyTorch's nll_loss
/// with `weight` [C]: each element's loss -w[t] logp[t], ignore_index
/// elements weigh 0, "mean" divides by the summed weights of the rest.
/// `total_weight` (optional out) gets that sum.
template <class Cx>
Value* weightedNll(Cx& cx, Value* logp, Value* target, Value* weight, const std::string& reduction,
                   int64_t ignore_index, Value** total_weight = nullptr) {
  const DType t = logp->dtype();
  const int64_t cd = target->type().rank() == logp->type().rank() - 1 && logp->type().rank() >= 2 ? 1 : 0;
  Value* ignored = cx.emit("eq", {target, cx.scalar(static_cast<double>(ignore_index), target->dtype())});
  Value* safe = cx.emit("where", {ignored, cx.scalar(0, target->dtype()), target});
  Shape picked_shape = target->shape();
  picked_shape.insert(picked_shape.begin() + cd, 1);
  Value* picked = cx.emit("gather", {logp, cx.emit("reshape", {safe}, {{"shape", picked_shape}})}, {{"dim", cd}});
  picked = cx.emit("reshape", {picked}, {{"shape", target->shape()}});
  Value* flat = cx.emit("reshape", {safe}, {{"shape", Shape{target->type().numel()}}});
  Value* wt = cx.emit("index", {cx.cast(weight, t), flat}, {{"dim", int64_t{0}}});
  wt = cx.emit("reshape", {wt}, {{"shape", target->shape()}});
  wt = cx.emit("where", {ignored, cx.scalar(0, t), wt});
  Value* loss = cx.emit("neg", {cx.emit("mul", {picked, wt})});
  auto all = [&](const char* op, Value* v) {
    return cx.emit(op, {v}, {{"dims", std::vector<int64_t>{}}, {"keepdim", int64_t{0}}});
  };
  if (total_weight) *total_weight = all("sum", wt);
  if (reduction == "none") return loss;
  if (reduction == "sum") return all("sum", loss);
  return cx.emit("div", {all("sum", loss), total_weight ? *total_weight : all("sum", wt)});
}

/// Class-weighted cross-entropy of logits x with label smoothing eps:
/// (1 - eps) nll + eps / C * smooth, smooth = -sum_c w_c logp_c per element
/// (0 where ignored; "mean" divides by the target weights' sum), as
/// PyTorch's cross_entropy_loss_label_smoothing does with a weight.
template <class Cx>
Value* weightedCrossEntropy(Cx& cx, Value* x, Value* target, Value* weight, const std::string& reduction,
                            int64_t ignore_index, double eps) {
  const int64_t cd = target->type().rank() == x->type().rank() - 1 && x->type().rank() >= 2 ? 1 : 0;
  Value* logp = cx.emit("log_softmax", {x}, {{"dim", cd}});
  Value* total = nullptr;
  Value* nll = weightedNll(cx, logp, target, weight, reduction, ignore_index, &total);
  if (eps == 0) return nll;
  const DType t = x->dtype();
  Shape ws(static_cast<size_t>(x->type().rank()), 1);
  ws[cd] = x->shape()[cd];
  Value* w = cx.emit("reshape", {cx.cast(weight, t)}, {{"shape", ws}});
  Value* smooth = cx.emit("neg", {cx.emit("sum", {cx.emit("mul", {logp, w})},
                                          {{"dims", std::vector<int64_t>{cd}}, {"keepdim", int64_t{0}}})});
  Value* ignored = cx.emit("eq", {target, cx.scalar(static_cast<double>(ignore_index), target->dtype())});
  smooth = cx.emit("where", {ignored, cx.scalar(0, t), smooth});
  if (reduction != "none") {
    smooth = cx.emit("sum", {smooth}, {{"dims", std::vector<int64_t>{}}, {"keepdim", int64_t{0}}});
    if (reduction == "mean") smooth = cx.emit("div", {smooth, total});
  }
  const double classes = static_cast<double>(x->shape()[cd]);
  return cx.emit("add", {cx.emit("mul", {nll, cx.scalar(1 - eps, t)}), cx.emit("mul", {smooth, cx.scalar(eps / classes, t)})});
}

/// Elementwise KL divergence of log-probabilities x from target t (one
/// dtype): t (log t - x) where t > 0, else 0; with log_target, exp(t) (t - x).
template <class Cx>
Value* klDiv(Cx& cx, Value* x, Value* t, bool log_target) {
  if (log_target) return cx.emit("mul", {cx.emit("exp", {t}), cx.emit("sub", {t, x})});
  Value* pos = cx.emit("mul", {t, cx.emit("sub", {cx.emit("log", {t}), x})});
  return cx.emit("where", {cx.emit("gt", {t, cx.scalar(0, t->dtype())}), pos, cx.scalar(0, t->dtype())});
}

/// log(v) clamped at -100, as PyTorch's binary_cross_entropy does.
template <class Cx>
Value* clampedLog(Cx& cx, Value* v) {
  return cx.emit("clamp", {cx.emit("log", {v})}, {{"min", -100.0}});
}

/// Elementwise binary cross-entropy of probabilities x and targets y (one
/// dtype), times the weight w when given.
template <class Cx>
Value* bce(Cx& cx, Value* x, Value* y, Value* w) {
  Value* one = cx.scalar(1.0, x->dtype());
  Value* pos = cx.emit("mul", {y, clampedLog(cx, x)});
  Value* neg = cx.emit("mul", {cx.emit("sub", {one, y}), clampedLog(cx, cx.emit("sub", {one, x}))});
  Value* loss = cx.emit("neg", {cx.emit("add", {pos, neg})});
  return w ? cx.emit("mul", {loss, w}) : loss;
}

/// Elementwise binary cross-entropy with logits x, in the stable form
/// (1 - y) x + w_pos (log1p(exp(-|x|)) + max(-x, 0)), w_pos = (pos_weight - 1) y + 1;
/// times the weight w when given.
template <class Cx>
Value* bceWithLogits(Cx& cx, Value* x, Value* y, Value* w, Value* pos_weight) {
  Value* one = cx.scalar(1.0, x->dtype());
  Value* softplus_neg = cx.emit("add", {cx.emit("log1p", {cx.emit("exp", {cx.emit("neg", {cx.emit("abs", {x})})})}),
                                        cx.emit("clamp", {cx.emit("neg", {x})}, {{"min", 0.0}})});
  if (pos_weight) {
    Value* wp = cx.emit("add", {cx.emit("mul", {cx.emit("sub", {pos_weight, one}), y}), one});
    softplus_neg = cx.emit("mul", {wp, softplus_neg});
  }
  Value* loss = cx.emit("add", {cx.emit("mul", {cx.emit("sub", {one, y}), x}), softplus_neg});
  return w ? cx.emit("mul", {loss, w}) : loss;
}

}  // namespace kiln::decomp
