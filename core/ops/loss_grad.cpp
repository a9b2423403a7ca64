// Gradient rules for the loss family (see core/grad.h): cross_entropy,
// nll_loss and mse_loss. Semantics are PyTorch's (checked against 1.13):
//   - targets equal to ignore_index get a zero gradient row, and "mean"
//     divides by the number M of targets that are not ignored (all ignored:
//     the loss is 0/0 = nan, the gradient is zero, as PyTorch's);
//   - cross_entropy with label smoothing s over C classes differentiates
//     (1 - s) * nll + s / C * sum_k(-log p_k) per non-ignored target, with the
//     smoothing term also divided by M under "mean", so per element
//       dL/dx_k = scale * (p_k - s / C - (1 - s) * [k == target])
//     with scale = g / M (mean), g (sum) or g[e] (none).
//   - mse_loss: 2 * (a - b) * g (divided by the broadcast numel under "mean"),
//     summed down to each input's shape (PyTorch broadcasts both first).
//
// Backward ops (CPU kernels in backend/cpu/kernels_loss_grad.cpp):
//   cross_entropy_backward(g, logits, target) {reduction, ignore_index, label_smoothing}
//     recomputes the softmax from the logits (one fused pass; a composite of
//     softmax, one-hot and masks would be about eight nodes). It computes in
//     g's dtype and returns the logits': an f32 g over bf16/f16 logits (the
//     gradient of a cross_entropy {dtype=f32} over them) reads them widened
//     and rounds the result once, as f32 math and a cast after it would.
//   nll_loss_backward(g, target) {reduction, ignore_index, num_classes}
//     scatters -scale into the target class; it needs only the targets, so
//     the forward input need not stay alive for the backward.
// mse_loss composes sub/mul/neg (three simple nodes).
#include "core/grad.h"
#include "core/ops/op_helpers.h"

namespace kiln {
namespace {

/// The shape of the unreduced loss: the input without its class dim.
Shape perElementShape(const Shape& x) {
  if (x.size() <= 1) return {};
  Shape s = x;
  s.erase(s.begin() + 1);
  return s;
}

void checkReduction(const Node& n) {
  const std::string& r = n.s("reduction");
  if (r != "mean" && r != "sum" && r != "none")
    opFail(n, "reduction must be \"mean\", \"sum\" or \"none\", got \"" + r + "\"");
}

/// g must be floating with the loss's shape: the target's shape for
/// reduction "none", 0-d otherwise.
void checkLossGrad(const Node& n, const Shape& target) {
  checkReduction(n);
  const TensorType& g = n.input(0)->type();
  const Shape want = n.s("reduction") == "none" ? target : Shape{};
  if (!isFloating(g.dtype) || g.shape != want)
    opFail(n, "gradient " + g.str() + " must be floating with the loss's shape " + shapeStr(want));
}

void checkTarget(const Node& n, size_t i) {
  if (!isIntegral(n.input(i)->dtype()))
    opFail(n, "target must hold class indices (integers), got " + n.input(i)->type().str());
}

std::vector<TensorType> inferCrossEntropyBackward(const Node& n) {
  const TensorType& x = n.input(1)->type();
  const DType g = n.input(0)->dtype();
  const bool widened = g == DType::F32 && isLowPrecisionFloat(x.dtype);
  if (!isFloating(x.dtype) || (g != x.dtype && !widened))
    opFail(n, "logits " + x.str() + " and gradient " + n.input(0)->type().str() +
                  " must be one floating type (or an f32 gradient over bf16/f16 logits)");
  if (x.rank() < 1) opFail(n, "logits must have at least 1 dim, got " + x.str());
  checkTarget(n, 2);
  const Shape target = perElementShape(x.shape);
  if (n.input(2)->shape() != target)
    opFail(n, "target " + n.input(2)->type().str() + " does not match logits " + x.str());
  checkLossGrad(n, target);
  const double s = n.f("label_smoothing");
  if (!(s >= 0 && s <= 1)) opFail(n, "label_smoothing must be in [0, 1], got " + std::to_string(s));
  return {x};
}

std::vector<TensorType> inferNllLossBackward(const Node& n) {
  checkTarget(n, 1);
  const int64_t classes = n.i("num_classes");
  if (classes < 0) opFail(n, "num_classes must be non-negative, got " + std::to_string(classes));
  const Shape& target = n.input(1)->shape();
  checkLossGrad(n, target);
  // Inverse of perElementShape: a 0-d target belongs to a [C] input.
  Shape x = target;
  x.insert(x.empty() ? x.begin() : x.begin() + 1, classes);
  return {{n.input(0)->dtype(), x}};
}

/// A few flops per logit (exp dominates).
Cost lossBackwardCost(const Node& n) {
  return {6.0 * static_cast<double>(n.output()->type().numel()), ioBytes(n)};
}

AttrMap forwardAttrs(GradContext& c, std::initializer_list<const char*> names) {
  AttrMap a;
  for (const char* name : names) a[name] = *c.node().attr(name);
  return a;
}

void crossEntropyGrad(GradContext& c) {
  if (!c.needs(0)) return;
  // The backward computes in g's dtype: the loss's (f32 over widened bf16
  // logits), else the logits'.
  Value* g = c.castTo(c.grad(), c.node().output()->dtype());
  c.setGrad(0, c.op("cross_entropy_backward", {g, c.in(0), c.in(1)},
                    forwardAttrs(c, {"reduction", "ignore_index", "label_smoothing"})));
}

void nllLossGrad(GradContext& c) {
  if (!c.needs(0)) return;
  const Shape& x = c.in(0)->shape();
  AttrMap attrs = forwardAttrs(c, {"reduction", "ignore_index"});
  attrs["num_classes"] = x.size() == 1 ? x[0] : x[1];
  Value* g = c.castTo(c.grad(), c.in(0)->dtype());
  c.setGrad(0, c.op("nll_loss_backward", {g, c.in(1)}, std::move(attrs)));
}

void mseLossGrad(GradContext& c) {
  if (!c.needs(0) && !c.needs(1)) return;
  const Node& n = c.node();
  checkReduction(n);
  const double count = static_cast<double>(numelOf(broadcastShapes(n, c.in(0)->shape(), c.in(1)->shape())));
  const double norm = n.s("reduction") == "mean" ? 2.0 / count : 2.0;
  // norm * g first: a 0-d product under mean/sum, so one full-size multiply.
  Value* scaled = c.op("mul", {c.grad(), c.scalar(norm, c.grad()->dtype())});
  Value* grad_a = c.op("mul", {c.op("sub", {c.in(0), c.in(1)}), scaled});
  c.setGradBroadcast(0, grad_a);
  if (c.needs(1)) c.setGradBroadcast(1, c.op("neg", {grad_a}));
}

}  // namespace

void registerLossGrads(OpTable& t) {
  const std::string mean = "mean";
  t.add({"cross_entropy_backward", "dL/dlogits of cross_entropy from (g, logits, class targets)", 3, 3, 0,
         {optAttr("reduction", mean), optAttr("ignore_index", int64_t{-100}), optAttr("label_smoothing", 0.0)},
         inferCrossEntropyBackward, lossBackwardCost});
  t.add({"nll_loss_backward", "dL/dinput of nll_loss from (g, class targets): -scale at each target class", 2, 2, 0,
         {optAttr("reduction", mean), optAttr("ignore_index", int64_t{-100}), reqAttr("num_classes", AttrKind::Int)},
         inferNllLossBackward, lossBackwardCost});

  t.setGrad("cross_entropy", crossEntropyGrad);
  t.setGrad("nll_loss", nllLossGrad);
  t.setGrad("mse_loss", mseLossGrad);
}

}  // namespace kiln
