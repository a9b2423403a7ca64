// fx export of the fused attention ops (core/ops/attention.h) as the aten
// sequence the kernels compute: in the compute dtype (f64, else f32; q, k,
// v and an additive mask are cast up first, y and the gradients cast back),
// s = q k^T * scale, masked with -inf (keep / drop / causal) or plus the
// mask, p = softmax(s), y = p v, lse = logsumexp(s); the backward
// recomputes s and p = exp(s - lse) and applies the softmax-backward
// formula. Head-split storage (tokens_outer) is transposed on the way in
// and out.
#include <limits>

#include "core/export/fx_python_ops.h"
#include "core/ops/attention.h"

namespace kiln::fx {
namespace {

DType computeOf(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

/// A [*, H, T, W] logical view in the compute dtype of input i.
std::string logicalIn(Emitter& e, const Node& n, size_t i) {
  const DType ct = computeOf(n.input(i)->dtype());
  std::string x = e.cast(e.in(n, i), n.input(i)->dtype(), ct);
  if (n.i("tokens_outer")) x = e.call("aten.transpose.int", {x, "-3", "-2"});
  return x;
}

/// Back to storage layout and the node's dtype of output `o`.
std::string storedOut(Emitter& e, const Node& n, size_t o, const std::string& x) {
  std::string y = n.i("tokens_outer") ? e.call("aten.transpose.int", {x, "-3", "-2"}) : x;
  y = e.call("aten.clone.default", {y}, {"memory_format=torch.contiguous_format"});
  return e.cast(y, computeOf(n.output(o)->dtype()), n.output(o)->dtype());
}

/// The masked, scaled scores from logical q and k; `mi` is the mask input's index.
std::string scores(Emitter& e, const Node& n, const std::string& q, const std::string& k, size_t mi) {
  const DType ct = computeOf(n.input(n.is(Op::attention) ? 0 : 1)->dtype());
  std::string s = e.call("aten.matmul.default", {q, e.call("aten.transpose.int", {k, "-2", "-1"})});
  s = e.call("aten.mul.Tensor", {s, pyFloat(n.f("scale"))});
  const std::string ninf = pyFloat(-std::numeric_limits<double>::infinity());
  const std::string& kind = n.s("mask");
  if (kind == "keep") s = e.call("aten.masked_fill.Scalar", {s, e.call("aten.logical_not.default", {e.in(n, mi)}), ninf});
  if (kind == "drop") s = e.call("aten.masked_fill.Scalar", {s, e.in(n, mi), ninf});
  if (kind == "add") s = e.call("aten.add.Tensor", {s, e.cast(e.in(n, mi), n.input(mi)->dtype(), ct)});
  if (n.i("causal")) {
    const AttentionGeom g = attentionGeom(n, n.is(Op::attention) ? 0 : 1);
    std::string ones = e.call("aten.ones.default", {pyInts({g.L, g.S})}, {"dtype=torch.bool"});
    s = e.call("aten.masked_fill.Scalar", {s, e.call("aten.triu.default", {ones, "1"}), ninf});
  }
  return s;
}

void emitAttention(Emitter& e, const Node& n) {
  const std::string q = logicalIn(e, n, 0), k = logicalIn(e, n, 1), v = logicalIn(e, n, 2);
  const std::string s = scores(e, n, q, k, 3);
  const std::string p = e.call("aten._softmax.default", {s, "-1", "False"});
  e.setOut(n, 0, storedOut(e, n, 0, e.call("aten.matmul.default", {p, v})));
  e.setOut(n, 1, e.call("aten.logsumexp.default", {s, "[-1]"}));
}

void emitAttentionBackward(Emitter& e, const Node& n) {
  const std::string gy = logicalIn(e, n, 0), q = logicalIn(e, n, 1), k = logicalIn(e, n, 2), v = logicalIn(e, n, 3);
  const std::string s = scores(e, n, q, k, 6);
  const std::string p =
      e.call("aten.exp.default", {e.call("aten.sub.Tensor", {s, e.call("aten.unsqueeze.default", {e.in(n, 5), "-1"})})});
  const std::string gv = e.call("aten.matmul.default", {e.call("aten.transpose.int", {p, "-2", "-1"}), gy});
  const std::string gp = e.call("aten.matmul.default", {gy, e.call("aten.transpose.int", {v, "-2", "-1"})});
  const std::string d = e.call("aten.sum.dim_IntList", {e.call("aten.mul.Tensor", {p, gp}), "[-1]", "True"});
  std::string gs = e.call("aten.mul.Tensor", {p, e.call("aten.sub.Tensor", {gp, d})});
  gs = e.call("aten.mul.Tensor", {gs, pyFloat(n.f("scale"))});
  e.setOut(n, 0, storedOut(e, n, 0, e.call("aten.matmul.default", {gs, k})));
  e.setOut(n, 1, storedOut(e, n, 1, e.call("aten.matmul.default", {e.call("aten.transpose.int", {gs, "-2", "-1"}), q})));
  e.setOut(n, 2, storedOut(e, n, 2, gv));
}

}  // namespace

void addAttentionEmitters(EmitTable& t) {
  t["attention"] = emitAttention;
  t["attention_backward"] = emitAttentionBackward;
}

}  // namespace kiln::fx
