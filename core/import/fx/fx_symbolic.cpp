// Symbolic sizes of PyTorch 2.x FX dumps: aten.sym_size.int(x, dim),
// sym_numel, sym_stride, sym_storage_offset, the runtime asserts torch.export
// writes about them, and Python arithmetic on the results (operator.add/sub/
// mul/floordiv/truediv/mod/neg/pow, comparisons, math.ceil/floor,
// torch.sym_int/sym_float/sym_max/sym_min). Kiln's shapes are static, so every
// such value is a number known at import: FxValue::known. Before a rule reads
// its arguments, references to those nodes become the numbers themselves
// (withKnownNumbers), so `view(x, [sym_size_0, -1])` reads like
// `view(x, [4, -1])`.
#include <cmath>

#include "core/import/fx/fx_lowering.h"
#include "core/result.h"

namespace kiln::fx {
namespace {

FxArg intArg(int64_t v) {
  FxArg a;
  a.kind = FxArg::Kind::Int;
  a.i = v;
  a.f = static_cast<double>(v);
  return a;
}

FxArg floatArg(double v) {
  FxArg a;
  a.kind = FxArg::Kind::Float;
  a.f = v;
  return a;
}

FxArg boolArg(bool v) {
  FxArg a;
  a.kind = FxArg::Kind::Bool;
  a.b = v;
  a.i = v;
  a.f = v;
  return a;
}

double asDouble(const FxArg& a) { return a.kind == FxArg::Kind::Float ? a.f : static_cast<double>(a.i); }

/// sym_size.int(self, dim) -> self.size(dim).
FxValue lowerSymSize(Lowering&, NodeArgs& a) {
  Value* x = a.tensor("self");
  return FxValue::known(intArg(x->shape()[static_cast<size_t>(normDim(a.integer("dim"), x->type().rank()))]));
}

/// sym_size.default(self) -> every size (a list).
FxValue lowerSymSizes(Lowering&, NodeArgs& a) {
  std::vector<FxValue> items;
  for (int64_t d : a.tensor("self")->shape()) items.push_back(FxValue::known(intArg(d)));
  return FxValue::tuple(std::move(items));
}

FxValue lowerSymNumel(Lowering&, NodeArgs& a) { return FxValue::known(intArg(a.tensor("self")->type().numel())); }

/// sym_stride.int(self, dim): Kiln's tensors are contiguous (row-major).
FxValue lowerSymStride(Lowering&, NodeArgs& a) {
  Value* x = a.tensor("self");
  const int64_t d = normDim(a.integer("dim"), x->type().rank());
  int64_t stride = 1;
  for (int64_t k = x->type().rank() - 1; k > d; --k) stride *= x->shape()[static_cast<size_t>(k)];
  return FxValue::known(intArg(stride));
}

FxValue lowerSymStorageOffset(Lowering&, NodeArgs&) { return FxValue::known(intArg(0)); }

/// _assert_scalar(self, assert_msg): checked now, every value being known.
FxValue lowerAssertScalar(Lowering&, NodeArgs& a) {
  const FxArg& v = a.arg("self");
  if (!v.isNumber()) a.fail("self", "expected a number known at import, got " + argKindName(v.kind));
  if (asDouble(v) == 0) kiln::fail("a shape assertion of the dump fails for these shapes: " + a.str("assert_msg"));
  return FxValue::missing("_assert_scalar returns nothing");
}

/// sym_constrain_range(_for_size): a range the dump's dynamic size must lie in; static here.
FxValue lowerConstrainRange(Lowering&, NodeArgs&) { return FxValue::missing("sym_constrain_range returns nothing"); }

constexpr FxRule kRules[] = {
    {"aten.sym_size.int", lowerSymSize},
    {"aten.sym_size.default", lowerSymSizes},
    {"aten.sym_numel.default", lowerSymNumel},
    {"aten.sym_stride.int", lowerSymStride},
    {"aten.sym_storage_offset.default", lowerSymStorageOffset},
    {"aten._assert_scalar.default", lowerAssertScalar},
    {"aten.sym_constrain_range.default", lowerConstrainRange},
    {"aten.sym_constrain_range_for_size.default", lowerConstrainRange},
};

constexpr std::string_view kArithmetic[] = {
    "operator.add", "operator.sub", "operator.mul", "operator.floordiv", "operator.truediv", "operator.mod",
    "operator.neg", "operator.pow", "operator.eq", "operator.ne", "operator.lt", "operator.le", "operator.gt",
    "operator.ge", "math.ceil", "math.floor", "torch.sym_int", "torch.sym_float", "torch.sym_max", "torch.sym_min",
    "torch.sym_not"};

/// "_operator.mul" (the builtin's module) reads as "operator.mul".
std::string_view canonical(std::string_view target) {
  return target.rfind("_operator.", 0) == 0 ? target.substr(1) : target;
}

}  // namespace

std::span<const FxRule> symbolicRules() { return kRules; }

bool isPythonArithmetic(std::string_view target) {
  for (std::string_view t : kArithmetic)
    if (t == canonical(target)) return true;
  return false;
}

std::vector<std::string> pythonArithmeticTargets() { return {std::begin(kArithmetic), std::end(kArithmetic)}; }

FxValue lowerPythonArithmetic(const Lowering& cx, const FxNode& n) {
  const std::string_view op = canonical(n.target);
  std::vector<FxArg> v;
  for (const FxArg& a : n.args) {
    FxArg x = a;
    if (a.kind == FxArg::Kind::Node) {
      const FxValue& r = cx.lookup(a.s);
      if (!r.number)
        kiln::fail(std::string(op) + " on " + quote(a.s) + ", which is " + (r.tensor ? "a tensor" : "no number") +
                   ": Python arithmetic in an FX graph works on sizes only");
      x = *r.number;
    }
    if (!x.isNumber()) kiln::fail(std::string(op) + ": expected numbers, got " + argKindName(x.kind));
    v.push_back(x);
  }
  const size_t arity = op == "operator.neg" || op == "math.ceil" || op == "math.floor" || op == "torch.sym_int" ||
                               op == "torch.sym_float" || op == "torch.sym_not"
                           ? 1
                           : 2;
  if (v.size() != arity || !n.kwargs.empty())
    kiln::fail(std::string(op) + " expects " + std::to_string(arity) + " positional arguments, got " +
               std::to_string(n.args.size()));
  auto isInt = [](const FxArg& a) { return a.kind != FxArg::Kind::Float; };
  const bool ints = isInt(v[0]) && (arity == 1 || isInt(v[1]));
  const double x = asDouble(v[0]), y = arity == 2 ? asDouble(v[1]) : 0;
  const int64_t i = v[0].i, j = arity == 2 ? v[1].i : 0;
  auto number = [&](double d, int64_t k) { return FxValue::known(ints ? intArg(k) : floatArg(d)); };
  if (op == "operator.add") return number(x + y, i + j);
  if (op == "operator.sub") return number(x - y, i - j);
  if (op == "operator.mul") return number(x * y, i * j);
  if (op == "operator.neg") return number(-x, -i);
  if (op == "operator.truediv") {
    if (y == 0) kiln::fail("operator.truediv: division by zero");
    return FxValue::known(floatArg(x / y));
  }
  if (op == "operator.floordiv" || op == "operator.mod") {
    if (y == 0) kiln::fail(std::string(op) + ": division by zero");
    // Python's floor division and modulo (the result takes the divisor's sign).
    const double q = std::floor(x / y);
    int64_t qi = 0, ri = 0;
    if (ints) {
      qi = i / j;
      if ((i % j != 0) && ((i < 0) != (j < 0))) --qi;
      ri = i - qi * j;
    }
    return op == "operator.floordiv" ? number(q, qi) : number(x - q * y, ri);
  }
  if (op == "operator.pow") {
    if (ints && j >= 0) {
      int64_t r = 1;
      for (int64_t k = 0; k < j; ++k) r *= i;
      return FxValue::known(intArg(r));
    }
    return FxValue::known(floatArg(std::pow(x, y)));
  }
  if (op == "operator.eq") return FxValue::known(boolArg(x == y));
  if (op == "operator.ne") return FxValue::known(boolArg(x != y));
  if (op == "operator.lt") return FxValue::known(boolArg(x < y));
  if (op == "operator.le") return FxValue::known(boolArg(x <= y));
  if (op == "operator.gt") return FxValue::known(boolArg(x > y));
  if (op == "operator.ge") return FxValue::known(boolArg(x >= y));
  if (op == "math.ceil") return FxValue::known(intArg(static_cast<int64_t>(std::ceil(x))));
  if (op == "math.floor" || op == "torch.sym_int")
    return FxValue::known(intArg(static_cast<int64_t>(op == "math.floor" ? std::floor(x) : std::trunc(x))));
  if (op == "torch.sym_float") return FxValue::known(floatArg(x));
  if (op == "torch.sym_not") return FxValue::known(boolArg(x == 0));
  if (op == "torch.sym_max") return x >= y ? FxValue::known(v[0]) : FxValue::known(v[1]);
  return x <= y ? FxValue::known(v[0]) : FxValue::known(v[1]);  // torch.sym_min
}

namespace {

const FxArg* knownNumber(const Lowering& cx, const FxArg& a) {
  if (a.kind != FxArg::Kind::Node || !cx.defined(a.s)) return nullptr;
  const FxValue& v = cx.lookup(a.s);
  return v.number ? &*v.number : nullptr;
}

bool refersToNumber(const Lowering& cx, const FxArg& a) {
  if (knownNumber(cx, a)) return true;
  for (const FxArg& item : a.items)
    if (refersToNumber(cx, item)) return true;
  return false;
}

void substitute(const Lowering& cx, FxArg& a) {
  if (const FxArg* n = knownNumber(cx, a)) {
    a = *n;
    return;
  }
  for (FxArg& item : a.items) substitute(cx, item);
}

}  // namespace

std::optional<FxNode> withKnownNumbers(const Lowering& cx, const FxNode& n) {
  bool any = false;
  for (const FxArg& a : n.args) any = any || refersToNumber(cx, a);
  for (const auto& [name, a] : n.kwargs) any = any || refersToNumber(cx, a);
  if (!any) return std::nullopt;  // the common case: no copy
  FxNode copy = n;
  for (FxArg& a : copy.args) substitute(cx, a);
  for (auto& [name, a] : copy.kwargs) substitute(cx, a);
  return copy;
}

}  // namespace kiln::fx
