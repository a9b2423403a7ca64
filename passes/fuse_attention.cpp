// The fuse_attention pass.
//
// Needs: a forward graph (run before amp and autodiff: the attention node
// gets amp's low-precision policy and its own gradient rule, which
// recomputes the scores instead of saving the softmax). The target must have
// attention kernels (PassContext::cpu_only_ops; the CPU does).
// Does: finds softmax over the last dim whose input is, walking back,
//   [where(mask, s, -inf) | where(mask, -inf, s) | add(s, mask)]
//   [mul(s, c) | div(s, c)]...            (c a splat constant)
//   matmul(q', k^T)                        (q' optionally q * c or q / c)
// and whose only use is matmul(p, v) (or matmul(w, p^T), the output
// transposed), maybe through a dropout that drops nothing (p = 0 or eval),
// every intermediate used once, and replaces the chain by
//   attention(q, k, v[, mask]) {scale, causal, mask, tokens_outer}.
// A bool mask built as triu(full(true), 1) (dropped) or tril(full(true))
// (kept) over [L, S] becomes causal=1 with no mask input, so the kernel
// skips the upper triangle. When q, k and v are all head-split permutes
// (swapping the token dim with the head dim), the node reads their inputs
// in that layout (tokens_outer=1) and a permute restores the output, which
// simplify later cancels against the head merge. Chains with real dropout
// on the probabilities, an additive mask that depends on a parameter, a scale
// applied after an additive mask, or a softmax whose result is used
// elsewhere (returned attention weights) stay as they are.
// Guarantees: the same values within float rounding (the scale is applied
// to q k^T in one multiply; softmax sums in the kernel's order).
#include "passes/fuse_attention.h"

#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <vector>

#include "core/ops/op_helpers.h"
#include "passes/dce.h"
#include "passes/fold.h"

namespace kiln {
namespace {

using ValueSet = std::set<const Value*>;

/// One node reads `v` and the graph does not return it.
bool usedOnce(const ValueSet& outputs, const Value* v) {
  return v->uses().size() == 1 && !outputs.count(v);
}

Node* producerIf(const Value* v, Op op) {
  Node* p = v->producer();
  return p && p->is(op) ? p : nullptr;
}

/// Whether `n` is a permute swapping dims a and b and nothing else.
bool swapsOnly(const Node* n, int64_t a, int64_t b) {
  if (!n || !n->is(Op::permute)) return false;
  const auto& dims = n->is("dims");
  const int64_t r = static_cast<int64_t>(dims.size());
  for (int64_t d = 0; d < r; ++d) {
    const int64_t want = d == a ? b : d == b ? a : d;
    if (normalizeAxis(dims[static_cast<size_t>(d)], r) != want) return false;
  }
  return true;
}

bool swapsLastTwo(const Node* n, int64_t rank) {
  return swapsOnly(n, rank - 2, rank - 1);
}

/// x * c, c * x or x / c with c a finite, non-zero splat constant that
/// leaves x's type as it is: x and the factor it is multiplied by.
struct Scaled {
  Value* x;
  double factor;
};
std::optional<Scaled> scaledByConstant(const Node* n) {
  if (!n || (!n->is(Op::mul) && !n->is(Op::div))) return std::nullopt;
  const size_t ci = n->is(Op::mul) && numelOf(n->input(0)->shape()) == 1 ? 0 : 1;
  Value* x = n->input(1 - ci);
  if (n->output()->type() != x->type() || numelOf(n->input(ci)->shape()) != 1) return std::nullopt;
  std::optional<double> c = splatValue(n->input(ci));
  if (!c || *c == 0 || !std::isfinite(*c)) return std::nullopt;
  return Scaled{x, n->is(Op::mul) ? *c : 1.0 / *c};
}

bool isNegInf(const Value* v) {
  auto x = splatValue(v);
  return x && std::isinf(*x) && *x < 0 && numelOf(v->shape()) == 1;
}

/// Whether a graph input with the Param role feeds `v` (an explicit stack:
/// a mask computed from activations reaches back through the whole forward).
bool dependsOnParam(const Value* v) {
  std::set<const Value*> seen;
  std::vector<const Value*> todo = {v};
  while (!todo.empty()) {
    const Value* x = todo.back();
    todo.pop_back();
    if (!seen.insert(x).second) continue;
    if (x->isGraphInput()) {
      if (x->role() == ValueRole::Param) return true;
      continue;
    }
    for (const Value* in : x->producer()->inputs()) todo.push_back(in);
  }
  return false;
}

/// A bool [L, S] (after leading 1s) mask that is the causal pattern:
/// triu(true, 1) dropped or tril(true, 0) kept.
bool isCausalMask(const Value* m, bool drop, int64_t L, int64_t S) {
  const Node* t = m->producer();
  if (!t || !t->is(drop ? Op::triu : Op::tril) || t->i("diagonal") != (drop ? 1 : 0)) return false;
  const Shape& s = m->shape();
  if (s.size() < 2 || s[s.size() - 2] != L || s[s.size() - 1] != S) return false;
  for (size_t d = 0; d + 2 < s.size(); ++d)
    if (s[d] != 1) return false;
  auto fill = splatValue(t->input(0));
  return fill && *fill != 0;
}

struct Match {
  Node* softmax = nullptr;
  Node* out_matmul = nullptr;  // matmul(p, v) or matmul(w, p^T)
  bool transposed_out = false;
  Value* q = nullptr;
  Value* k_t = nullptr;  // [*, E, S]
  Value* v = nullptr;    // [*, S, Ev] (nullptr when transposed_out: w is)
  Value* w = nullptr;    // [*, Ev, S] when transposed_out
  double scale = 1.0;
  std::string mask_kind = "none";
  Value* mask = nullptr;
};

std::optional<Match> matchChain(Node* sm, const ValueSet& outs) {
  Value* p = sm->output();
  const int64_t r = p->type().rank();
  if (r < 3 || normalizeAxis(sm->i("dim"), r) != r - 1 || !isFloating(p->dtype()) || !usedOnce(outs, p))
    return std::nullopt;
  Match m;
  m.softmax = sm;
  // The consumer: matmul(p, v), or permute(p)^T feeding matmul(w, p^T),
  // possibly through a dropout that drops nothing (p = 0 or eval).
  const Use* up = &p->uses()[0];
  if (Node* d = up->user; d->is(Op::dropout) && (d->f("p") == 0.0 || !d->i("training"))) {
    if (!usedOnce(outs, d->output(0)) || (d->numOutputs() > 1 && !d->output(1)->uses().empty())) return std::nullopt;
    up = &d->output(0)->uses()[0];
  }
  const Use& u = *up;
  if (u.user->is(Op::matmul) && u.index == 0) {
    m.out_matmul = u.user;
    m.v = u.user->input(1);
  } else if (swapsLastTwo(u.user, r) && usedOnce(outs, u.user->output())) {
    const Use& u2 = u.user->output()->uses()[0];
    if (!u2.user->is(Op::matmul) || u2.index != 1) return std::nullopt;
    m.out_matmul = u2.user;
    m.transposed_out = true;
    m.w = u2.user->input(0);
  } else {
    return std::nullopt;
  }
  const Value* vv = m.transposed_out ? m.w : m.v;
  if (vv->type().rank() != r || vv->dtype() != p->dtype() ||
      !std::equal(vv->shape().begin(), vv->shape().end() - 2, p->shape().begin()))
    return std::nullopt;
  if ((m.transposed_out ? vv->shape()[r - 1] : vv->shape()[r - 2]) != p->shape()[r - 1]) return std::nullopt;
  // Walk back from the softmax input to the score matmul. A factor met
  // before a mask is applied after it: fine for
  // a -inf mask when positive, never for an additive one.
  Value* s = sm->input(0);
  while (true) {
    if (!usedOnce(outs, s)) return std::nullopt;
    Node* n = s->producer();
    if (!n) return std::nullopt;
    if (n->is(Op::matmul)) break;
    if (n->is(Op::where) && m.mask_kind == "none" && n->input(0)->dtype() == DType::Bool) {
      const bool drop = isNegInf(n->input(1)), keep = isNegInf(n->input(2));
      if (drop == keep || m.scale < 0) return std::nullopt;
      Value* chain = n->input(drop ? 2 : 1);
      if (chain->type() != s->type()) return std::nullopt;
      m.mask_kind = drop ? "drop" : "keep";
      m.mask = n->input(0);
      s = chain;
    } else if (n->is(Op::add) && m.mask_kind == "none") {
      // The chain is the side a matmul/mul/div made; the other is the mask.
      const auto fromChain = [](const Value* x) {
        const Node* pn = x->producer();
        return pn && (pn->is(Op::matmul) || pn->is(Op::mul) || pn->is(Op::div));
      };
      const int ci = fromChain(n->input(0)) ? 0 : fromChain(n->input(1)) ? 1 : -1;
      if (ci < 0 || n->input(ci)->type() != s->type() || m.scale != 1.0) return std::nullopt;
      Value* mask = n->input(1 - ci);
      if (!isFloating(mask->dtype()) || dependsOnParam(mask)) return std::nullopt;
      m.mask_kind = "add";
      m.mask = mask;
      s = n->input(ci);
    } else if (std::optional<Scaled> sc = scaledByConstant(n)) {
      m.scale *= sc->factor;
      s = sc->x;
    } else {
      return std::nullopt;
    }
  }
  Node* mm = s->producer();
  Value* a = mm->input(0);
  Value* b = mm->input(1);
  if (a->type().rank() != r || b->type().rank() != r || a->dtype() != p->dtype() || b->dtype() != p->dtype() ||
      !std::equal(a->shape().begin(), a->shape().end() - 2, p->shape().begin()) ||
      !std::equal(b->shape().begin(), b->shape().end() - 2, p->shape().begin()))
    return std::nullopt;
  // q scaled before the product (nn.MultiheadAttention: q / sqrt(E)).
  if (std::optional<Scaled> sc = usedOnce(outs, a) ? scaledByConstant(a->producer()) : std::nullopt) {
    m.scale *= sc->factor;
    a = sc->x;
  }
  m.q = a;
  m.k_t = b;
  return m;
}

/// The value before a swap-last-two permute, or a new permute of `v`.
Value* swapLastTwo(Graph& g, Value* v, const Node& like) {
  const int64_t r = v->type().rank();
  if (Node* p = v->producer(); swapsLastTwo(p, r)) return p->input(0);
  std::vector<int64_t> dims(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) dims[static_cast<size_t>(d)] = d;
  std::swap(dims[static_cast<size_t>(r - 2)], dims[static_cast<size_t>(r - 1)]);
  return g.add("permute", {v}, {{"dims", dims}}, like.scope(), like.provenance());
}

std::vector<int64_t> swapDims(int64_t r, int64_t a, int64_t b) {
  std::vector<int64_t> dims(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) dims[static_cast<size_t>(d)] = d;
  std::swap(dims[static_cast<size_t>(a)], dims[static_cast<size_t>(b)]);
  return dims;
}

}  // namespace

Result<PassResult> runFuseAttention(Graph& g, PassContext& ctx) {
  PassResult res;
  if (!ctx.cpu_only_ops) return res;
  ValueSet outs;
  for (const GraphOutput& o : g.outputs()) outs.insert(o.value);
  std::vector<Node*> softmaxes;
  for (const auto& n : g.nodes())
    if (n->is(Op::softmax)) softmaxes.push_back(n.get());
  double fused = 0, causal = 0, tokens_outer = 0, score_bytes = 0;
  for (Node* sm : softmaxes) {
    std::optional<Match> m = matchChain(sm, outs);
    if (!m) continue;
    const int64_t r = sm->output()->type().rank();
    const Shape& ps = sm->output()->shape();
    const int64_t L = ps[static_cast<size_t>(r - 2)], S = ps[static_cast<size_t>(r - 1)];
    g.setInsertPoint(m->out_matmul);
    const Node& like = *m->out_matmul;
    Value* k = swapLastTwo(g, m->k_t, like);
    Value* v = m->transposed_out ? swapLastTwo(g, m->w, like) : m->v;
    Value* q = m->q;
    // Head-split layout: q, k, v all [*, L, H, E] permuted to [*, H, L, E].
    int64_t to = 0;
    Node *pq = q->producer(), *pk = k->producer(), *pv = v->producer();
    if (swapsOnly(pq, r - 3, r - 2) && swapsOnly(pk, r - 3, r - 2) && swapsOnly(pv, r - 3, r - 2)) {
      q = pq->input(0);
      k = pk->input(0);
      v = pv->input(0);
      to = 1;
    }
    AttrMap attrs = {{"scale", m->scale}, {"causal", int64_t{0}}, {"mask", m->mask_kind}, {"tokens_outer", to}};
    std::vector<Value*> ins = {q, k, v};
    if (m->mask && m->mask_kind != "add" && isCausalMask(m->mask, m->mask_kind == "drop", L, S)) {
      attrs["causal"] = int64_t{1};
      attrs["mask"] = std::string("none");
      causal += 1;
    } else if (m->mask) {
      ins.push_back(m->mask);
    }
    const std::string& prov = sm->provenance();
    Node* att = g.create("attention", ins, attrs, like.scope(), prov.empty() ? "fuse_attention" : prov);
    Value* y = att->output(0);
    if (to) y = g.add("permute", {y}, {{"dims", swapDims(r, r - 3, r - 2)}}, like.scope(), like.provenance());
    if (m->transposed_out)
      y = g.add("permute", {y}, {{"dims", swapDims(r, r - 2, r - 1)}}, like.scope(), like.provenance());
    g.replaceAllUsesWith(m->out_matmul->output(), y);
    fused += 1;
    tokens_outer += static_cast<double>(to);
    score_bytes += static_cast<double>(numelOf(ps) * dtypeSize(sm->output()->dtype()));
  }
  g.setInsertPoint(nullptr);
  if (fused > 0) {
    auto d = runDce(g, ctx);
    if (!d) return d.error();
  }
  res.changed = fused > 0;
  res.statistics = {{"fused", fused}, {"causal", causal}, {"tokens_outer", tokens_outer}, {"score_bytes", score_bytes}};
  return res;
}

}  // namespace kiln
