// The algebraic rule table of the simplify pass (passes/simplify.cpp).
//
// Needs: nothing beyond a verified graph. Each entry matches one node (and
// looks at its producers), and gives the value that replaces its output; the
// simplify driver does the replacing, erasing and counting. Every rule keeps
// the node's output type exactly: a rule whose shortcut would broadcast or
// change the dtype (x + 0 where 0 is bigger than x, f32 x * f64 1) does not
// match. Guarantees: the replacement computes the same values; bit for bit
// unless the rule's `why` says otherwise (the -0.0 cases, which still compare
// equal). To add a rule: write a small function below and add one entry to
// the table at the end, with the reason it is valid.
#include "passes/algebraic_rules.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "core/ops/op_helpers.h"
#include "passes/fold.h"

namespace kiln {
namespace {

/// The node producing input `i` of `n` when its op is `op`, else nullptr.
Node* producerOf(const Node& n, size_t i, Op op) {
  Node* p = n.input(i)->producer();
  return p && p->is(op) ? p : nullptr;
}

/// `v` when it has exactly n's output type (so no broadcast and no dtype
/// change is lost by using it), else nullptr.
Value* sameType(Value* v, const Node& n) {
  return v->type() == n.output()->type() ? v : nullptr;
}

/// Whether `v` is a splat constant whose elements, converted to the dtype
/// the node computes in (its output dtype), equal `x` (+0.0 == -0.0).
bool isSplat(const Value* v, const Node& n, double x) {
  std::optional<double> e = splatValue(v);
  if (!e) return false;
  std::optional<double> c = splatElement(n.output()->dtype(), *e);
  return c && *c == x;
}

/// A new node before `like` with its scope and provenance; returns its output.
Value* emit(Graph& g, const Node& like, std::string_view op, std::vector<Value*> inputs, AttrMap attrs) {
  return g.add(op, std::move(inputs), std::move(attrs), like.scope(), like.provenance());
}

std::vector<int64_t> permutation(const Node& n) {
  std::vector<int64_t> dims = n.is("dims");
  for (int64_t& d : dims) d = normalizeAxis(d, static_cast<int64_t>(dims.size()));
  return dims;
}

bool isIdentity(const std::vector<int64_t>& dims) {
  for (size_t d = 0; d < dims.size(); ++d)
    if (dims[d] != static_cast<int64_t>(d)) return false;
  return true;
}

// ---- layout ------------------------------------------------------------------

Value* identityPermute(Graph&, Node& n) {
  return isIdentity(permutation(n)) ? n.input(0) : nullptr;
}

Value* permuteOfPermute(Graph& g, Node& n) {
  Node* inner = producerOf(n, 0, Op::permute);
  if (!inner) return nullptr;
  // out.dim[d] = mid.dim[outer[d]] = x.dim[inner[outer[d]]]
  const std::vector<int64_t> a = permutation(*inner), b = permutation(n);
  std::vector<int64_t> dims(b.size());
  for (size_t d = 0; d < b.size(); ++d) dims[d] = a[b[d]];
  Value* x = inner->input(0);
  return isIdentity(dims) ? x : emit(g, n, "permute", {x}, {{"dims", dims}});
}

Value* permuteAsReshape(Graph& g, Node& n) {
  // Only size-1 dims move when the other dims keep their relative order.
  const std::vector<int64_t> dims = permutation(n);
  const Shape& in = n.input(0)->shape();
  int64_t last = -1;
  for (int64_t d : dims) {
    if (in[d] == 1) continue;
    if (d < last) return nullptr;
    last = d;
  }
  return emit(g, n, "reshape", {n.input(0)}, {{"shape", n.output()->shape()}});
}

Value* identityReshape(Graph&, Node& n) {
  return sameType(n.input(0), n);
}

Value* reshapeOfReshape(Graph& g, Node& n) {
  Node* inner = producerOf(n, 0, Op::reshape);
  if (!inner) return nullptr;
  Value* x = inner->input(0);
  if (Value* same = sameType(x, n)) return same;
  return emit(g, n, "reshape", {x}, {{"shape", n.output()->shape()}});
}

Value* identityExpand(Graph&, Node& n) {
  return sameType(n.input(0), n);
}

Value* expandOfExpand(Graph& g, Node& n) {
  Node* inner = producerOf(n, 0, Op::expand);
  if (!inner) return nullptr;
  Value* x = inner->input(0);
  if (Value* same = sameType(x, n)) return same;
  return emit(g, n, "expand", {x}, {{"shape", n.output()->shape()}});
}

Value* wholeSlice(Graph&, Node& n) {
  return sameType(n.input(0), n);
}

Value* catOfOne(Graph&, Node& n) {
  return n.numInputs() == 1 ? sameType(n.input(0), n) : nullptr;
}

// ---- casts -------------------------------------------------------------------

Value* identityCast(Graph&, Node& n) {
  return sameType(n.input(0), n);
}

// ---- arithmetic ----------------------------------------------------------------

/// `binary(x, c)` or `binary(c, x)` with c a splat of `x`: the other operand.
Value* otherOfSplat(Node& n, double c, bool commutes) {
  if (isSplat(n.input(1), n, c)) return sameType(n.input(0), n);
  if (commutes && isSplat(n.input(0), n, c)) return sameType(n.input(1), n);
  return nullptr;
}

Value* mulByOne(Graph&, Node& n) {
  return otherOfSplat(n, 1.0, true);
}
Value* divByOne(Graph&, Node& n) {
  return otherOfSplat(n, 1.0, false);
}
Value* addZero(Graph&, Node& n) {
  return otherOfSplat(n, 0.0, true);
}
Value* subZero(Graph&, Node& n) {
  return otherOfSplat(n, 0.0, false);
}

Value* negOfNeg(Graph&, Node& n) {
  Node* inner = producerOf(n, 0, Op::neg);
  return inner ? sameType(inner->input(0), n) : nullptr;
}

/// A binary elementwise op reading a splat constant of the full output shape
/// reads a 0-d one instead: same elements, and no tensor to materialize (the
/// folded gradient of mean, expand(full) -> full[N,M], is one).
Value* splatOperandToScalar(Graph& g, Node& n) {
  // Only the broadcasting binary ops of core/ops/elementwise.cpp: other
  // two-input elementwise ops (unary_backward) need equal shapes, and a
  // fused_elementwise body names its operand types.
  static const std::set<std::string, std::less<>> broadcasting = {
      "add",   "sub", "mul", "div", "floor_div", "remainder", "pow", "maximum",     "minimum",    "atan2",
      "xlogy", "eq",  "ne",  "lt",  "le",        "gt",        "ge",  "logical_and", "logical_or", "logical_xor"};
  if (!broadcasting.count(n.op())) return nullptr;
  for (size_t i = 0; i < 2; ++i) {
    Value *c = n.input(i), *x = n.input(1 - i);
    // Same dtype on both sides: promotion cannot depend on which one is 0-d.
    if (!splatValue(c) || c->type().rank() == 0 || c->dtype() != x->dtype() || x->shape() != n.output()->shape())
      continue;
    Node* full = c->producer();
    Value* scalar =
        emit(g, *full, "full", {}, {{"dtype", c->dtype()}, {"shape", Shape{}}, {"value", full->f("value")}});
    std::vector<Value*> inputs(n.inputs().begin(), n.inputs().end());
    inputs[i] = scalar;
    return emit(g, n, n.op(), inputs, n.attrs());
  }
  return nullptr;
}

/// pow(x, 2) -> x * x for floating x: PyTorch's own special case for the
/// exponent 2 (RMSNorm's x.pow(2), variances), one fusible multiply instead
/// of a call to pow.
Value* squareAsMul(Graph& g, Node& n) {
  Value* x = n.input(0);
  if (!isFloating(x->dtype()) || !sameType(x, n) || n.input(1)->type().rank() != 0 || !isSplat(n.input(1), n, 2.0))
    return nullptr;
  return emit(g, n, "mul", {x, x}, {});
}

/// The gradient of pow(x, 2) for x: g * (2 * x), PyTorch's pow_backward
/// (grad * exponent * x^(exponent-1), with x^1 = x) and the pow gradient
/// kernel's own arithmetic with pow(x, 1) = x; two fusible multiplies.
Value* squareGradAsMul(Graph& g, Node& n) {
  if (n.s("fn") != "pow" || n.i("input") != 0) return nullptr;
  Value *grad = n.input(0), *x = n.input(1), *c = n.input(2);
  if (!isFloating(x->dtype()) || !sameType(x, n) || !sameType(grad, n) || c->type().rank() != 0 ||
      !isSplat(c, n, 2.0))
    return nullptr;
  return emit(g, n, "mul", {grad, emit(g, n, "mul", {x, c}, {})}, {});
}

// ---- gradient accumulation ----------------------------------------------------------

/// A gradient written into zeros along `dim` at [start, end): select_backward
/// (one index) or slice_backward with step 1.
struct Placement {
  Value* g;
  int64_t dim, start, end;
  bool select;
};

std::optional<Placement> placementOf(const Value* v) {
  const Node* p = v->producer();
  if (!p || (!p->is(Op::select_backward) && !p->is(Op::slice_backward))) return std::nullopt;
  const Shape& s = v->shape();
  const int64_t dim = normalizeAxis(p->i("dim"), static_cast<int64_t>(s.size()));
  if (p->is(Op::select_backward)) {
    const int64_t i = p->i("index") < 0 ? p->i("index") + s[dim] : p->i("index");
    return Placement{p->input(0), dim, i, i + 1, true};
  }
  const SliceBounds b = normalizeSlice(s[dim], p->i("start"), p->i("end"), p->i("step"));
  if (b.step != 1) return std::nullopt;
  return Placement{p->input(0), dim, b.start, b.start + b.length, false};
}

/// The leaves of the tree of adds rooted at `n`: an operand made by an add of
/// n's type that nothing else reads is part of the tree.
void addLeaves(const Node& n, std::vector<Value*>& leaves) {
  for (Value* v : n.inputs()) {
    const Node* p = v->producer();
    if (p && p->is(Op::add) && v->type() == n.output()->type() && v->uses().size() == 1)
      addLeaves(*p, leaves);
    else
      leaves.push_back(v);
  }
}

Value* placementSum(Graph& g, Node& n) {
  // Only the root of a tree (inner adds are rewritten with it), and not the
  // inner adds a rewrite left dead (dce drops them after the sweeps): peeling
  // those one level per sweep would take a sweep per step of a long loop.
  const Value* out = n.output();
  if (out->uses().empty()) {
    bool returned = false;
    for (const GraphOutput& o : g.outputs()) returned = returned || o.value == out;
    if (!returned) return nullptr;
  }
  if (out->uses().size() == 1) {
    const Node* user = out->uses()[0].user;
    if (user->is(Op::add) && user->output()->type() == out->type()) return nullptr;
  }
  std::vector<Value*> leaves;
  addLeaves(n, leaves);
  std::vector<Placement> placed;
  Value* other = nullptr;
  for (Value* v : leaves) {
    std::optional<Placement> p = v->type() == out->type() ? placementOf(v) : std::nullopt;
    if (p) {
      placed.push_back(*p);
    } else if (other) {
      return nullptr;  // two other terms: their order of addition would change
    } else {
      other = v;
    }
  }
  if (placed.size() < 2) return nullptr;
  std::sort(placed.begin(), placed.end(), [](const Placement& a, const Placement& b) { return a.start < b.start; });
  const int64_t dim = placed[0].dim;
  for (size_t i = 0; i < placed.size(); ++i)
    if (placed[i].dim != dim || (i > 0 && placed[i].start < placed[i - 1].end)) return nullptr;
  const Shape& shape = out->shape();
  auto zeros = [&](int64_t len) {
    std::vector<int64_t> s(shape.begin(), shape.end());
    s[dim] = len;
    return emit(g, n, "full", {}, {{"shape", s}, {"value", 0.0}, {"dtype", out->dtype()}});
  };
  std::vector<Value*> pieces;
  int64_t at = 0;
  for (const Placement& p : placed) {
    if (p.start > at) pieces.push_back(zeros(p.start - at));
    Value* piece = p.g;
    if (p.select) {
      std::vector<int64_t> s(shape.begin(), shape.end());
      s[dim] = 1;
      piece = emit(g, n, "reshape", {piece}, {{"shape", s}});
    }
    pieces.push_back(piece);
    at = p.end;
  }
  if (at < shape[dim]) pieces.push_back(zeros(shape[dim] - at));
  Value* whole = emit(g, n, "cat", pieces, {{"dim", dim}});
  return other ? emit(g, n, "add", {whole, other}, {}) : whole;
}

// ---- selection -----------------------------------------------------------------

Value* whereSameBranches(Graph&, Node& n) {
  return n.input(1) == n.input(2) ? sameType(n.input(1), n) : nullptr;
}

Value* whereSplatCondition(Graph&, Node& n) {
  std::optional<double> c = splatValue(n.input(0));
  if (!c) return nullptr;
  return sameType(n.input(*c != 0 ? 1 : 2), n);
}

}  // namespace

const std::vector<AlgebraicRule>& algebraicRules() {
  static const std::vector<AlgebraicRule> rules = {
      // layout
      {"identity_permute", "permute by (0, 1, ..., n-1) moves nothing; bit-exact", "permute", identityPermute},
      {"permute_of_permute",
       "permute(permute(x, a), b) reads x.dim[a[b[d]]] at dim d: one permute by the composition, none when that is "
       "the identity; bit-exact",
       "permute", permuteOfPermute},
      {"permute_as_reshape",
       "a permute that moves only size-1 dims keeps the row-major element order: a reshape, which moves no data "
       "and merges with neighbouring reshapes; bit-exact",
       "permute", permuteAsReshape},
      {"identity_reshape", "reshape to x's own shape keeps the same elements in the same order; bit-exact", "reshape",
       identityReshape},
      {"reshape_of_reshape",
       "reshape keeps the row-major element order, so two in a row are one to the final shape; bit-exact", "reshape",
       reshapeOfReshape},
      {"identity_expand", "expand to x's own shape broadcasts nothing; bit-exact", "expand", identityExpand},
      {"expand_of_expand",
       "every dim expand(x, s1) broadcast is 1 in x too, so x expands to the final shape directly; bit-exact", "expand",
       expandOfExpand},
      {"whole_slice", "a slice whose type equals its input's takes every element in order (start 0, step 1); bit-exact",
       "slice", wholeSlice},
      {"cat_of_one", "concatenating a single tensor copies it; bit-exact", "cat", catOfOne},
      // casts
      {"identity_cast", "a cast to the dtype x already has copies it (castTensor clones); bit-exact", "cast",
       identityCast},
      // arithmetic
      {"mul_by_one", "x * 1 == x in IEEE arithmetic (-0.0, inf and NaN included) and for integers; bit-exact", "mul",
       mulByOne},
      {"div_by_one", "x / 1 == x in IEEE arithmetic (-0.0, inf and NaN included); bit-exact", "div", divByOne},
      {"add_zero",
       "x + 0 == x; for x = -0.0 and a +0.0 splat IEEE gives +0.0, equal to x but not bit-identical (bit-exact when "
       "the splat is -0.0)",
       "add", addZero},
      {"sub_zero",
       "x - (+0.0) == x bit for bit (-0.0 - +0.0 is -0.0); x - (-0.0) gives +0.0 for x = -0.0: equal, not "
       "bit-identical",
       "sub", subZero},
      {"neg_of_neg", "-(-x) == x: negation flips the sign bit (integers wrap back); bit-exact", "neg", negOfNeg},
      {"splat_operand_to_scalar",
       "a splat tensor operand of a binary elementwise op holds the same element at every index a 0-d one "
       "broadcasts to; with both operands of one dtype the result type is unchanged; bit-exact",
       "*", splatOperandToScalar},
      {"square_as_mul",
       "pow(x, 2) for floating x is x * x, the special case PyTorch computes (and the exact square rounded once, "
       "which pow's correctly rounded result also is)",
       "pow", squareAsMul},
      {"square_grad_as_mul",
       "the gradient of pow(x, 2) for x, g * (2 * pow(x, 1)), is g * (x * 2): pow(x, 1) is x, and the products "
       "are PyTorch's pow_backward's; bit-exact",
       "binary_backward", squareGradAsMul},
      // gradient accumulation
      {"placement_sum",
       "a sum of gradients that select_backward / slice_backward (step 1) place into zeros at disjoint positions "
       "along one dim, plus at most one other term, is their concatenation with zeros in the gaps (plus that "
       "term): every element adds one gradient or none to zeros, which is exact, so the values are the same (a "
       "-0.0 gradient stays -0.0 where the adds gave +0.0) while the work drops from one full-size add per "
       "placement (T steps of an unrolled loop: O(T^2)) to one copy",
       "add", placementSum},
      // selection
      {"where_same_branches", "where(c, a, a) is a whatever c holds; bit-exact", "where", whereSameBranches},
      {"where_splat_condition",
       "where with a constant condition is the branch it picks, when that branch already has the result type; "
       "bit-exact",
       "where", whereSplatCondition},
  };
  return rules;
}

}  // namespace kiln
