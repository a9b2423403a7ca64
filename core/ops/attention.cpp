// Fused attention (see core/ops/attention.h for the contract). Created by
// the fuse_attention pass from matmul -> scale -> mask -> softmax -> matmul
// chains, never by importers. The gradient rule emits attention_backward,
// which takes the forward's y and lse instead of a saved probability matrix.
#include "core/ops/attention.h"

#include "core/grad.h"
#include "core/op_table.h"
#include "core/ops/op_helpers.h"

namespace kiln {

Shape AttentionGeom::scoreShape(const Shape& q) const {
  Shape s(q.begin(), q.end() - 3);
  s.insert(s.end(), {heads, L, S});
  return s;
}

namespace {

/// Batch dims before the head dim, heads, rows and width of a [*, H, T, W]
/// (or, tokens outer, [*, T, H, W]) tensor.
struct Dims {
  Shape batch;
  int64_t heads, rows, width;
};

Dims dimsOf(const Node& n, const Value* v, const char* what, bool tokens_outer) {
  const Shape& s = v->shape();
  if (s.size() < 3)
    opFail(n, std::string(what) + " " + v->type().str() + " needs rank >= 3 ([*, heads, tokens, features])");
  const size_t r = s.size();
  return {Shape(s.begin(), s.end() - 3), tokens_outer ? s[r - 2] : s[r - 3], tokens_outer ? s[r - 3] : s[r - 2],
          s[r - 1]};
}

}  // namespace

AttentionGeom attentionGeom(const Node& n, size_t qi) {
  const bool to = n.i("tokens_outer") != 0;
  const Dims q = dimsOf(n, n.input(qi), "q", to), k = dimsOf(n, n.input(qi + 1), "k", to),
             v = dimsOf(n, n.input(qi + 2), "v", to);
  if (k.batch != q.batch || v.batch != q.batch || k.heads != q.heads || v.heads != q.heads)
    opFail(n, "q " + n.input(qi)->type().str() + ", k " + n.input(qi + 1)->type().str() + " and v " +
                  n.input(qi + 2)->type().str() + " must share their batch and head dims");
  if (k.width != q.width)
    opFail(n, "k's feature dim " + std::to_string(k.width) + " differs from q's " + std::to_string(q.width));
  if (v.rows != k.rows)
    opFail(n, "v has " + std::to_string(v.rows) + " tokens, k " + std::to_string(k.rows));
  for (size_t i = qi; i < qi + 3; ++i)
    if (!isFloating(n.input(i)->dtype()) || n.input(i)->dtype() != n.input(qi)->dtype())
      opFail(n, "q, k and v must share one floating dtype, got " + n.input(qi)->type().str() + ", " +
                    n.input(qi + 1)->type().str() + ", " + n.input(qi + 2)->type().str());
  AttentionGeom g;
  g.outer = numelOf(q.batch);
  g.heads = q.heads;
  g.L = q.rows;
  g.S = k.rows;
  g.E = q.width;
  g.Ev = v.width;
  g.tokens_outer = to;
  return g;
}

namespace {

DType lseType(DType q) { return q == DType::F64 ? DType::F64 : DType::F32; }

/// The mask input (index `mi`), checked against the attribute and the scores.
void checkMask(const Node& n, const AttentionGeom& g, size_t qi, size_t mi) {
  const std::string& kind = n.s("mask");
  const bool has = n.numInputs() > mi;
  if (kind != "none" && kind != "keep" && kind != "drop" && kind != "add")
    opFail(n, "mask must be \"none\", \"keep\", \"drop\" or \"add\", got \"" + kind + "\"");
  if (has != (kind != "none"))
    opFail(n, has ? "has a mask input but mask=\"none\"" : "mask=\"" + kind + "\" needs a mask input");
  if (!has) return;
  const TensorType& m = n.input(mi)->type();
  if (kind == "add" ? !isFloating(m.dtype) : m.dtype != DType::Bool)
    opFail(n, "a \"" + kind + "\" mask must be " + (kind == "add" ? "floating" : "bool") + ", got " + m.str());
  const Shape scores = g.scoreShape(n.input(qi)->shape());
  if (broadcastShapes(n, m.shape, scores) != scores)
    opFail(n, "mask " + m.str() + " does not broadcast to the scores " + shapeStr(scores));
}

Shape lseShape(const Node& n, const AttentionGeom& g, size_t qi) {
  Shape s = g.scoreShape(n.input(qi)->shape());
  s.pop_back();
  return s;
}

std::vector<TensorType> inferAttention(const Node& n) {
  const AttentionGeom g = attentionGeom(n, 0);
  checkMask(n, g, 0, 3);
  Shape y = n.input(0)->shape();
  y.back() = g.Ev;
  return {{n.input(0)->dtype(), y}, {lseType(n.input(0)->dtype()), lseShape(n, g, 0)}};
}

std::vector<TensorType> inferAttentionBackward(const Node& n) {
  const AttentionGeom g = attentionGeom(n, 1);
  checkMask(n, g, 1, 6);
  const TensorType& y = n.input(4)->type();
  Shape ys = n.input(1)->shape();
  ys.back() = g.Ev;
  if (y.shape != ys || y.dtype != n.input(1)->dtype() || n.input(0)->type() != y)
    opFail(n, "gy " + n.input(0)->type().str() + " and y " + y.str() + " must be " + TensorType{n.input(1)->dtype(), ys}.str());
  const TensorType lse{lseType(n.input(1)->dtype()), lseShape(n, g, 1)};
  if (n.input(5)->type() != lse) opFail(n, "lse " + n.input(5)->type().str() + " must be " + lse.str());
  return {n.input(1)->type(), n.input(2)->type(), n.input(3)->type()};
}

/// Two GEMMs over the scores (4 L S E-ish flops) plus the softmax; bytes of
/// the operands only: the scores never reach memory.
Cost attentionCost(const Node& n) {
  const AttentionGeom g = attentionGeom(n, 0);
  const double bh = static_cast<double>(g.outer * g.heads), ls = static_cast<double>(g.L * g.S);
  const double frac = n.i("causal") ? 0.5 : 1.0;
  return {frac * bh * ls * (2.0 * static_cast<double>(g.E + g.Ev) + 8.0), ioBytes(n)};
}

/// The forward's score GEMM again plus four more.
Cost attentionBackwardCost(const Node& n) {
  const AttentionGeom g = attentionGeom(n, 1);
  const double bh = static_cast<double>(g.outer * g.heads), ls = static_cast<double>(g.L * g.S);
  const double frac = n.i("causal") ? 0.5 : 1.0;
  return {frac * bh * ls * (2.0 * static_cast<double>(3 * g.E + 2 * g.Ev) + 10.0), ioBytes(n)};
}

void attentionGrad(GradContext& c) {
  if (!c.grad(0)) return;  // only lse reached the loss: nothing differentiates through it
  if (!c.needs(0) && !c.needs(1) && !c.needs(2)) return;
  if (c.needs(3))
    opFail(c.node(), "an additive mask that depends on a parameter has no gradient through the fused kernel "
                     "(fuse_attention leaves such chains unfused)");
  AttrMap attrs;
  for (const char* name : {"scale", "causal", "mask", "tokens_outer"}) attrs[name] = *c.node().attr(name);
  std::vector<Value*> ins = {c.castTo(c.grad(0), c.in(0)->dtype()), c.in(0), c.in(1), c.in(2), c.out(0), c.out(1)};
  if (c.numInputs() > 3) ins.push_back(c.in(3));
  Node* b = c.opNode("attention_backward", std::move(ins), std::move(attrs));
  for (size_t i = 0; i < 3; ++i) c.setGrad(i, b->output(i));
}

}  // namespace

void registerAttentionOps(OpTable& t) {
  std::vector<AttrSpec> attrs = {reqAttr("scale", AttrKind::Float), optAttr("causal", int64_t{0}),
                                 optAttr("mask", std::string("none")), optAttr("tokens_outer", int64_t{0})};
  t.add({"attention", "softmax(scale * q k^T (+ mask)) v per batch and head -> (y, lse); see core/ops/attention.h", 3,
         4, 0, attrs, inferAttention, attentionCost});
  t.add({"attention_backward", "(gy, q, k, v, y, lse[, mask]) -> (gq, gk, gv): recomputes the scores tile by tile", 6,
         7, 0, attrs, inferAttentionBackward, attentionBackwardCost});
  t.setGrad("attention", attentionGrad);
}

}  // namespace kiln
