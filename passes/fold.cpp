// fold: constant folding of splat constants.
//
// Needs: any graph. Does: replaces each node whose tensor inputs are all
// `full` nodes (splat constants: every element holds one value) by a new
// `full` of the node's output type, when the result is known exactly at the
// IR level, without running a kernel:
//   - arithmetic neg, add, sub, mul, div, sqrt, abs, relu, maximum, minimum;
//   - comparisons eq, ne, lt, le, gt, ge, and where;
//   - cast;
//   - layout ops, which keep the value and change the shape: reshape,
//     permute, expand, slice, select, flip, roll, repeat, split, and cat of
//     equal splats.
// Transcendental ops (exp, log, tanh, erf, sigmoid, ...) are never folded:
// the kernels' libm (or the vectorized forms in backend/cpu/cpu_math.h, or
// CUDA's) may differ from the host's in the last bit. Neither are reductions:
// their result depends on the kernel's summation order. A fold whose result
// would be NaN is skipped too (its sign bit does not survive the text form).
// Guarantees: every folded value is bit-identical to what the CPU kernels
// compute for the unfolded node (see foldArithmetic for why); the new `full`
// keeps the folded node's scope and provenance; constants the fold leaves
// unused are erased. Statistics: folded, nodes_removed.
#include "passes/fold.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "core/op_table.h"
#include "core/tensor.h"

namespace kiln {
namespace {

/// Bit equality: unlike ==, tells -0.0 from +0.0 (a fold must keep the sign).
bool sameBits(double a, double b) {
  return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
}

/// Largest magnitude below which every integer is a double: integer results
/// under it are exact in double arithmetic.
constexpr double kExactIntLimit = 9007199254740992.0;  // 2^53

/// [lowest, max] of an integer dtype, as doubles.
std::pair<double, double> integerRange(DType t) {
  switch (t) {
    case DType::I64:
      return {-9223372036854775808.0, 9223372036854775807.0};
    case DType::I32:
      return {-2147483648.0, 2147483647.0};
    case DType::I16:
      return {-32768.0, 32767.0};
    case DType::I8:
      return {-128.0, 127.0};
    case DType::U8:
      return {0.0, 255.0};
    default:
      return {0.0, 1.0};  // bool
  }
}

/// The shortest decimal that becomes the element `e` of dtype `t` again,
/// so a folded 1/6 in f32 prints as 0.16666667, not 0.1666666716337204.
double canonicalValue(DType t, double e) {
  char buf[40];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, e);
    double v = std::strtod(buf, nullptr);
    std::optional<double> back = splatElement(t, v);
    if (back && sameBits(*back, e)) return v;
  }
  return e;
}

/// A new `full` of type `type` holding element `e`, before `like`, with its
/// scope and provenance.
Value* makeFull(Graph& g, const Node& like, const TensorType& type, double e) {
  return g.add("full", {}, {{"dtype", type.dtype}, {"shape", type.shape}, {"value", canonicalValue(type.dtype, e)}},
               like.scope(), like.provenance());
}

/// The arithmetic fold computes, by op: f(a, b) in double (b unused
/// by unary ops). Operands are never NaN here.
using ArithmeticFn = double (*)(double, double);
const std::map<Op, ArithmeticFn>& arithmeticOps() {
  static const std::map<Op, ArithmeticFn> ops = {
      {Op::neg, [](double a, double) { return -a; }},
      {Op::abs, [](double a, double) { return std::fabs(a); }},
      {Op::relu, [](double a, double) { return a < 0 ? 0.0 : a; }},  // keeps -0.0, as the kernel
      {Op::sqrt, [](double a, double) { return std::sqrt(a); }},
      {Op::add, [](double a, double b) { return a + b; }},
      {Op::sub, [](double a, double b) { return a - b; }},
      {Op::mul, [](double a, double b) { return a * b; }},
      {Op::div, [](double a, double b) { return a / b; }},
      {Op::maximum, [](double a, double b) { return std::max(a, b); }},
      {Op::minimum, [](double a, double b) { return std::min(a, b); }},
  };
  return ops;
}

/// Elementwise arithmetic on splats. The kernels convert both operands to the
/// output dtype first (backend/cpu/kernels_elementwise.cpp), so we do too,
/// then compute in double and round once to the output dtype. That is exact:
/// for add, sub, mul, div and sqrt of f32 operands, double (53 bits >= 2 * 24
/// + 2) rounded to f32 gives the correctly rounded f32 result, which is what
/// the f32 kernel computes; f16 and bf16 compute in f32 and round to their
/// width, as splatElement does; f64 is plain IEEE double arithmetic. Integer
/// results are folded only when they fit the dtype (no wrapping) and 2^53
/// (exact in double).
std::optional<double> foldArithmetic(const Node& n, const std::vector<double>& in) {
  const Op op = n.kind();
  const DType t = n.output()->dtype();
  if (t == DType::Bool) return std::nullopt;  // bool arithmetic runs in int64 then narrows; rare, not worth it
  std::vector<double> c;
  for (double v : in) {
    std::optional<double> e = splatElement(t, v);
    if (!e || std::isnan(*e)) return std::nullopt;  // a NaN result is not folded (see the file comment)
    c.push_back(*e);
  }
  auto it = arithmeticOps().find(op);
  if (it == arithmeticOps().end()) return std::nullopt;
  const double r = it->second(c[0], c.size() > 1 ? c[1] : 0.0);
  if (std::isnan(r)) return std::nullopt;
  if (!isFloating(t)) {
    auto [lo, hi] = integerRange(t);
    if (r < lo || r > hi || std::fabs(r) >= kExactIntLimit) return std::nullopt;
  }
  // maximum/minimum of -0.0 and +0.0: the kernel's choice between equal
  // values is not worth modelling.
  if ((op == Op::maximum || op == Op::minimum) && c[0] == c[1] && !sameBits(c[0], c[1])) return std::nullopt;
  return splatElement(t, r);
}

/// Comparisons run on both operands converted to their promoted dtype.
std::optional<double> foldCompare(const Node& n, const std::vector<double>& in) {
  const Value *a = n.input(0), *b = n.input(1);
  const DType t = promoteOperands(a->dtype(), a->type().rank() == 0, b->dtype(), b->type().rank() == 0);
  std::optional<double> x = splatElement(t, in[0]), y = splatElement(t, in[1]);
  if (!x || !y) return std::nullopt;
  const Op op = n.kind();
  bool r = op == Op::eq   ? *x == *y
           : op == Op::ne ? *x != *y
           : op == Op::lt ? *x < *y
           : op == Op::le ? *x <= *y
           : op == Op::gt ? *x > *y
                        : *x >= *y;
  return r ? 1.0 : 0.0;
}

bool isLayoutOp(Op op) {
  static const std::set<Op> ops = {Op::reshape, Op::permute, Op::expand, Op::slice,  Op::select,
                                   Op::flip,    Op::roll,    Op::repeat, Op::split, Op::cat};
  return ops.count(op) != 0;
}

bool isCompare(Op op) {
  return op == Op::eq || op == Op::ne || op == Op::lt || op == Op::le || op == Op::gt || op == Op::ge;
}

/// The element every output of `n` holds, when one value fills them all.
std::optional<double> foldedElement(const Node& n, const std::vector<double>& in) {
  const Op op = n.kind();
  const DType t = n.output()->dtype();
  if (arithmeticOps().count(op)) return foldArithmetic(n, in);
  if (isCompare(op)) return foldCompare(n, in);
  if (op == Op::cast) return splatElement(t, in[0]);
  if (op == Op::where) return splatElement(t, in[0] != 0 ? in[1] : in[2]);
  if (isLayoutOp(op)) {
    // Layout ops move elements without changing them; cat may promote its
    // inputs, and folds only when they all become the same element.
    std::optional<double> e = splatElement(t, in[0]);
    for (double v : in) {
      std::optional<double> o = splatElement(t, v);
      if (!e || !o || !sameBits(*o, *e)) return std::nullopt;
    }
    return e;
  }
  return std::nullopt;
}

/// Erase the nodes of `vs` that are `full` constants nothing uses any more.
size_t eraseDeadConstants(Graph& g, const std::vector<Value*>& vs) {
  std::set<Node*> dead;
  for (Value* v : vs) {
    Node* p = v->producer();
    if (!p || !p->is(Op::full) || !v->uses().empty()) continue;
    bool is_output = false;
    for (const GraphOutput& o : g.outputs()) is_output = is_output || o.value == v;
    if (!is_output) dead.insert(p);
  }
  for (Node* p : dead) g.erase(p);
  return dead.size();
}

}  // namespace

std::optional<double> splatElement(DType t, double v) {
  switch (t) {
    case DType::F64:
      return v;
    case DType::F32:
      return static_cast<double>(static_cast<float>(v));
    case DType::F16:
      return static_cast<double>(halfToFloat(floatToHalf(static_cast<float>(v))));
    case DType::BF16:
      return static_cast<double>(bf16ToFloat(floatToBf16(static_cast<float>(v))));
    case DType::Bool:
      return v != 0 ? 1.0 : 0.0;  // NaN is true, as in the kernels
    default: {
      // Floating to integer truncates toward zero through int64, so narrow
      // types wrap (backend/cpu/cpu_loops.h convert); outside int64 it is
      // undefined behaviour in C++, so we leave it alone.
      if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) return std::nullopt;  // NaN too
      const int64_t i = static_cast<int64_t>(v);
      switch (t) {
        case DType::I32:
          return static_cast<double>(static_cast<int32_t>(i));
        case DType::I16:
          return static_cast<double>(static_cast<int16_t>(i));
        case DType::I8:
          return static_cast<double>(static_cast<int8_t>(i));
        case DType::U8:
          return static_cast<double>(static_cast<uint8_t>(i));
        default:
          return static_cast<double>(i);
      }
    }
  }
}

std::optional<double> splatValue(const Value* v) {
  const Node* p = v->producer();
  if (!p || !p->is(Op::full)) return std::nullopt;
  return splatElement(p->dt("dtype"), p->f("value"));
}

std::vector<Value*> foldNode(Graph& g, Node& n) {
  const OpDef& def = n.def();
  if (def.has(kSource) || def.has(kRandom) || def.has(kSideEffect) || n.numInputs() == 0) return {};
  std::vector<double> in;
  for (Value* v : n.inputs()) {
    std::optional<double> e = splatValue(v);
    if (!e) return {};
    in.push_back(*e);
  }
  std::optional<double> e = foldedElement(n, in);
  if (!e) return {};
  g.setInsertPoint(&n);
  std::vector<Value*> out;
  for (Value* o : n.outputs()) out.push_back(makeFull(g, n, o->type(), *e));
  g.setInsertPoint(nullptr);
  return out;
}

Result<PassResult> runFold(Graph& g, PassContext&) {
  return catchErrors([&]() -> PassResult {
    const size_t before = g.numNodes();
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    size_t folded = 0;
    // In order, so a chain of foldable nodes folds in one sweep: each node
    // sees its inputs already folded. Erasing only the node itself and the
    // dead constants before it keeps the later entries of `order` valid.
    for (Node* n : order) {
      std::vector<Value*> repl = foldNode(g, *n);
      if (repl.empty()) continue;
      std::vector<Value*> inputs(n->inputs().begin(), n->inputs().end());
      for (size_t i = 0; i < repl.size(); ++i) g.replaceAllUsesWith(n->output(i), repl[i]);
      g.erase(n);
      eraseDeadConstants(g, inputs);
      ++folded;
    }
    PassResult r = nodesRemoved(before - g.numNodes());
    r.changed = folded > 0;
    r.statistics["folded"] = static_cast<double>(folded);
    return r;
  });
}

}  // namespace kiln
