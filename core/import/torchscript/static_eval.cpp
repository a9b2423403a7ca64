// Import-time evaluation: shape queries, Python scalar/str/list semantics and
// arithmetic on one-element constant tensors. Everything here is keyed by the
// TorchScript op name; which overload is meant follows from the argument
// kinds (a list, a str, a number, a constant tensor).
#include "core/import/torchscript/static_eval.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "core/attribute.h"
#include "core/result.h"

namespace kiln::ts {
namespace {

using Args = std::span<const SV>;
using Out = std::optional<std::vector<SV>>;
using K = SV::Kind;

Out one(SV v) {
  return std::vector<SV>{std::move(v)};
}

const SV& arg(Args a, size_t k) {
  if (k >= a.size()) fail("expects at least " + std::to_string(k + 1) + " arguments, got " + std::to_string(a.size()));
  return a[k];
}

bool isInt(const SV& v) {
  return v.kind == K::Int || v.kind == K::Bool;
}
bool isStaticNumber(const SV& v) {
  return v.isNumber() || v.isScalarConst();
}
bool anyRuntime(Args a) {
  return std::any_of(a.begin(), a.end(), [](const SV& v) { return v.kind == K::Tensor; });
}

int64_t toInt(const SV& v) {
  if (isInt(v)) return v.i;
  if (v.kind == K::Float) return static_cast<int64_t>(v.f);
  if (v.isScalarConst()) return static_cast<int64_t>(v.constant.at(0));
  fail("expected an int, got " + v.describe());
}

// ---- Python integer and float semantics -------------------------------------

int64_t floorDiv(int64_t a, int64_t b) {
  if (b == 0) fail("integer division by zero");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t pyMod(int64_t a, int64_t b) {
  if (b == 0) fail("integer modulo by zero");
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

double pyModF(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

/// Binary arithmetic by name on doubles (integral inputs stay exact below 2^53).
std::optional<double> arith(std::string_view op, double a, double b, bool integral) {
  if (op == "add") return a + b;
  if (op == "sub") return a - b;
  if (op == "mul") return a * b;
  if (op == "div") {
    if (b == 0 && integral) fail("division by zero");
    return a / b;
  }
  if (op == "floordiv" || op == "floor_divide") {
    if (integral) return static_cast<double>(floorDiv(static_cast<int64_t>(a), static_cast<int64_t>(b)));
    return std::floor(a / b);
  }
  if (op == "remainder" || op == "mod") {
    if (integral) return static_cast<double>(pyMod(static_cast<int64_t>(a), static_cast<int64_t>(b)));
    return pyModF(a, b);
  }
  if (op == "fmod") return std::fmod(a, b);
  if (op == "pow") return std::pow(a, b);
  if (op == "eq") return a == b;
  if (op == "ne") return a != b;
  if (op == "lt") return a < b;
  if (op == "le") return a <= b;
  if (op == "gt") return a > b;
  if (op == "ge") return a >= b;
  if (op == "min" || op == "minimum") return std::min(a, b);
  if (op == "max" || op == "maximum") return std::max(a, b);
  return std::nullopt;
}

bool isComparison(std::string_view op) {
  return op == "eq" || op == "ne" || op == "lt" || op == "le" || op == "gt" || op == "ge";
}

std::optional<double> unaryMath(std::string_view op, double x) {
  static const std::map<std::string_view, double (*)(double)> fns = {
      {"sqrt", [](double v) { return std::sqrt(v); }},
      {"exp", [](double v) { return std::exp(v); }},
      {"log", [](double v) { return std::log(v); }},
      {"log2", [](double v) { return std::log2(v); }},
      {"log10", [](double v) { return std::log10(v); }},
      {"sin", [](double v) { return std::sin(v); }},
      {"cos", [](double v) { return std::cos(v); }},
      {"tan", [](double v) { return std::tan(v); }},
      {"tanh", [](double v) { return std::tanh(v); }},
      {"atan", [](double v) { return std::atan(v); }},
      {"neg", [](double v) { return -v; }},
      {"abs", [](double v) { return std::fabs(v); }},
      {"floor", [](double v) { return std::floor(v); }},
      {"ceil", [](double v) { return std::ceil(v); }},
      {"round", [](double v) { return std::nearbyint(v); }},
      {"reciprocal", [](double v) { return 1.0 / v; }},
      {"rsqrt", [](double v) { return 1.0 / std::sqrt(v); }},
  };
  auto it = fns.find(op);
  if (it == fns.end()) return std::nullopt;
  return it->second(x);
}

// ---- Python scalars ------------------------------------------------------------

Out pythonBinary(std::string_view op, const SV& a, const SV& b) {
  bool ints = isInt(a) && isInt(b);
  if (op == "__and__" || op == "__or__" || op == "__xor__" || op == "bitwise_and" || op == "bitwise_or" ||
      op == "bitwise_xor") {
    if (!ints) return std::nullopt;
    int64_t r = op.find("and") != std::string_view::npos   ? (a.i & b.i)
                : op.find("xor") != std::string_view::npos ? (a.i ^ b.i)
                                                           : (a.i | b.i);
    if (a.kind == K::Bool && b.kind == K::Bool) return one(SV::boolean(r != 0));
    return one(SV::integer(r));
  }
  auto r = arith(op, a.number(), b.number(), ints);
  if (!r) return std::nullopt;
  if (isComparison(op)) return one(SV::boolean(*r != 0));
  if (op == "div") return one(SV::real(*r));
  if (op == "pow" && ints && b.i < 0) return one(SV::real(*r));
  if (ints) return one(SV::integer(static_cast<int64_t>(*r)));
  return one(SV::real(*r));
}

// ---- one-element constant tensors -------------------------------------------------

SV constResult(DType t, double v) {
  return SV::constTensor(Tensor::scalar(t, v));
}

/// Binary op with tensor semantics where at least one operand is a constant tensor.
Out tensorBinary(std::string_view op, Args a) {
  const SV& x = arg(a, 0);
  const SV& y = arg(a, 1);
  if (!isStaticNumber(x) || !isStaticNumber(y)) return std::nullopt;
  DType t = resultType(x, y);
  double xv = x.number(), yv = y.number();
  std::string_view name = op;
  if (op == "rsub") {
    std::swap(xv, yv);
    name = "sub";
  }
  if ((name == "add" || name == "sub") && a.size() > 2 && isStaticNumber(a[2])) yv *= a[2].number();
  if (name == "div") {
    std::string mode = a.size() > 2 && a[2].kind == K::Str ? a[2].s : "";
    if (mode == "floor") name = "floor_divide";
    if (mode.empty() && !isFloating(t)) t = DType::F32;
    if (mode == "trunc") {
      if (isIntegral(t) && yv == 0) fail("division by zero");
      return one(constResult(t, std::trunc(xv / yv)));
    }
  }
  auto r = arith(name, xv, yv, !isFloating(t));
  if (!r) return std::nullopt;
  if (isComparison(name)) return one(constResult(DType::Bool, *r));
  return one(constResult(t, *r));
}

// ---- containers, strings, shape queries ---------------------------------------------

int64_t normIndex(int64_t idx, size_t size) {
  int64_t n = static_cast<int64_t>(size);
  if (idx < 0) idx += n;
  if (idx < 0 || idx >= n) fail("index " + std::to_string(idx) + " out of range for length " + std::to_string(n));
  return idx;
}

const Shape& shapeOf(const SV& t) {
  if (t.kind == K::Tensor) return t.slot->value->shape();
  return t.constant.shape();
}

bool sameValue(const SV& a, const SV& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::None:
      return true;
    case K::Bool:
    case K::Int:
      return a.i == b.i;
    case K::Float:
      return a.f == b.f;
    case K::Str:
    case K::Device:
      return a.s == b.s;
    case K::Tensor:
      return a.slot == b.slot;
    case K::Const:
      return a.constant.raw() == b.constant.raw();
    case K::Object:
    case K::Function:
      return a.i == b.i;
    case K::List:
    case K::Tuple:
      return a.items == b.items;
    default:
      return false;
  }
}

/// Structural equality (list == list, str == str, None == None).
std::optional<bool> equalValues(const SV& a, const SV& b) {
  if (a.isNumber() && b.isNumber()) return a.number() == b.number();
  if (a.kind == K::Str && b.kind == K::Str) return a.s == b.s;
  if (a.kind == K::Device && b.kind == K::Device) return a.s == b.s;
  if (a.isNone() || b.isNone()) return a.isNone() && b.isNone();
  if (a.isSequence() && b.isSequence()) {
    if (a.items->size() != b.items->size()) return false;
    for (size_t k = 0; k < a.items->size(); ++k) {
      auto e = equalValues((*a.items)[k], (*b.items)[k]);
      if (!e) return std::nullopt;
      if (!*e) return false;
    }
    return true;
  }
  return std::nullopt;
}

std::string toStr(const SV& v) {
  switch (v.kind) {
    case K::Str:
    case K::Device:
      return v.s;
    case K::Bool:
      return v.i ? "True" : "False";
    case K::Int:
      return std::to_string(v.i);
    case K::Float:
      return formatDouble(v.f);
    default:
      return v.describe();
  }
}

Out listOp(std::string_view op, Args a, size_t num_outputs) {
  const SV& l = arg(a, 0);
  const auto& items = *l.items;
  if (op == "len") return one(SV::integer(static_cast<int64_t>(items.size())));
  if (op == "__getitem__") return one(items[normIndex(toInt(arg(a, 1)), items.size())]);
  if (op == "append") {
    l.items->push_back(arg(a, 1));
    return one(l);
  }
  if (op == "extend") {
    auto extra = arg(a, 1).elems();
    l.items->insert(l.items->end(), extra.begin(), extra.end());
    return num_outputs ? one(l) : Out(std::vector<SV>{});
  }
  if (op == "insert") {
    int64_t n = static_cast<int64_t>(items.size()), idx = toInt(arg(a, 1));
    if (idx < 0) idx = std::max<int64_t>(0, idx + n);
    l.items->insert(l.items->begin() + std::min(idx, n), arg(a, 2));
    return Out(std::vector<SV>{});
  }
  if (op == "pop") {
    int64_t idx = normIndex(a.size() > 1 ? toInt(a[1]) : -1, items.size());
    SV v = items[idx];
    l.items->erase(l.items->begin() + idx);
    return one(v);
  }
  if (op == "_set_item") {
    (*l.items)[normIndex(toInt(arg(a, 1)), items.size())] = arg(a, 2);
    return one(l);
  }
  if (op == "__contains__") {
    for (const SV& e : items)
      if (equalValues(e, arg(a, 1)).value_or(false)) return one(SV::boolean(true));
    return one(SV::boolean(false));
  }
  if (op == "slice") {
    int64_t n = static_cast<int64_t>(items.size());
    int64_t step = a.size() > 3 && !a[3].isNone() ? toInt(a[3]) : 1;
    if (step <= 0) return std::nullopt;
    int64_t start = a.size() > 1 && !a[1].isNone() ? toInt(a[1]) : 0;
    int64_t end = a.size() > 2 && !a[2].isNone() ? toInt(a[2]) : n;
    if (start < 0) start += n;
    if (end < 0) end += n;
    start = std::clamp<int64_t>(start, 0, n);
    end = std::clamp<int64_t>(end, 0, n);
    std::vector<SV> out;
    for (int64_t k = start; k < end; k += step) out.push_back(items[k]);
    return one(SV::list(std::move(out)));
  }
  if (op == "list" || op == "copy") return one(SV::list(items));
  if (op == "add" && a.size() > 1 && a[1].isSequence()) {
    std::vector<SV> out = items;
    out.insert(out.end(), a[1].items->begin(), a[1].items->end());
    return one(SV::list(std::move(out)));
  }
  if (op == "mul" && a.size() > 1 && isInt(a[1])) {
    std::vector<SV> out;
    for (int64_t r = 0; r < a[1].i; ++r) out.insert(out.end(), items.begin(), items.end());
    return one(SV::list(std::move(out)));
  }
  if (op == "all" || op == "any") {
    bool all = true, any = false;
    for (const SV& e : items) {
      if (!e.isNumber()) return std::nullopt;
      bool b = e.number() != 0;
      all = all && b;
      any = any || b;
    }
    return one(SV::boolean(op == "all" ? all : any));
  }
  if (op == "sum") {
    bool ints = true;
    double s = 0;
    for (const SV& e : items) {
      if (!e.isNumber()) return std::nullopt;
      ints = ints && isInt(e);
      s += e.number();
    }
    return one(ints ? SV::integer(static_cast<int64_t>(s)) : SV::real(s));
  }
  if (op == "reverse") {
    std::reverse(l.items->begin(), l.items->end());
    return Out(std::vector<SV>{});
  }
  if ((op == "eq" || op == "ne") && a.size() > 1) {
    auto e = equalValues(l, a[1]);
    if (!e) return std::nullopt;
    return one(SV::boolean(op == "eq" ? *e : !*e));
  }
  if (op == "max" || op == "min") {
    if (items.empty()) fail(std::string(op) + "() of an empty list");
    SV best = items[0];
    for (const SV& e : items) {
      if (!e.isNumber()) return std::nullopt;
      if (op == "max" ? e.number() > best.number() : e.number() < best.number()) best = e;
    }
    return one(best);
  }
  return std::nullopt;
}

Out stringOp(std::string_view op, Args a) {
  const std::string& s = arg(a, 0).s;
  if (op == "len") return one(SV::integer(static_cast<int64_t>(s.size())));
  if (op == "__contains__") return one(SV::boolean(s.find(toStr(arg(a, 1))) != std::string::npos));
  if (op == "find") {
    auto p = s.find(toStr(arg(a, 1)), a.size() > 2 ? static_cast<size_t>(toInt(a[2])) : 0);
    return one(SV::integer(p == std::string::npos ? -1 : static_cast<int64_t>(p)));
  }
  if (op == "startswith") return one(SV::boolean(s.rfind(toStr(arg(a, 1)), 0) == 0));
  if (op == "endswith") {
    std::string t = toStr(arg(a, 1));
    return one(SV::boolean(s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0));
  }
  if (op == "add") return one(SV::str(s + toStr(arg(a, 1))));
  if (op == "eq" || op == "ne") {
    bool eq = arg(a, 1).kind == K::Str && arg(a, 1).s == s;
    return one(SV::boolean(op == "eq" ? eq : !eq));
  }
  if (op == "lower" || op == "upper") {
    std::string t = s;
    for (char& c : t) c = static_cast<char>(op == "lower" ? std::tolower(c) : std::toupper(c));
    return one(SV::str(t));
  }
  if (op == "__getitem__") return one(SV::str(std::string(1, s.at(normIndex(toInt(arg(a, 1)), s.size())))));
  return std::nullopt;
}

/// Shape and property queries on tensors (run-time or constant).
Out tensorQuery(std::string_view op, Args a) {
  const SV& t = a[0];
  const Shape& shape = shapeOf(t);
  DType dt = t.kind == K::Tensor ? t.slot->value->dtype() : t.constant.dtype();
  auto rank = static_cast<int64_t>(shape.size());
  if (op == "size" || op == "sym_size") {
    if (a.size() == 1) {
      std::vector<SV> dims;
      for (int64_t d : shape) dims.push_back(SV::integer(d));
      return one(SV::list(std::move(dims)));
    }
    return one(SV::integer(shape[normalizeAxis(toInt(a[1]), rank)]));
  }
  if (op == "dim") return one(SV::integer(rank));
  if (op == "numel" || op == "sym_numel") return one(SV::integer(numelOf(shape)));
  if (op == "len") {
    if (shape.empty()) fail("len() of a 0-d tensor");
    return one(SV::integer(shape[0]));
  }
  if (op == "dtype") return one(SV::integer(scalarTypeOf(dt)));
  if (op == "device") return one(SV::device("cpu"));
  if (op == "layout") return one(SV::integer(0));  // torch.strided
  if (op == "is_floating_point") return one(SV::boolean(isFloating(dt)));
  if (op == "is_complex") return one(SV::boolean(false));
  if (op == "is_cuda" || op == "is_nested" || op == "is_sparse" || op == "is_mkldnn" || op == "is_quantized" ||
      op == "is_meta" || op == "is_xpu" || op == "is_vulkan" || op == "is_mps" || op == "is_ipu")
    return one(SV::boolean(false));
  if (op == "_shape_as_tensor") return one(SV::constTensor(Tensor::fromInt64s({rank}, shape)));
  return std::nullopt;
}

/// Converts a number or one-element constant to the Python type `op` names.
Out convert(std::string_view op, const SV& v) {
  if (!isStaticNumber(v)) {
    if (op == "Int" && v.kind == K::Str) return one(SV::integer(std::stoll(v.s)));
    if (op == "Float" && v.kind == K::Str) return one(SV::real(std::stod(v.s)));
    return std::nullopt;
  }
  double x = v.number();
  bool integral = isInt(v) || (v.kind == K::Const && !isFloating(v.constant.dtype()));
  if (op == "Int") return one(SV::integer(static_cast<int64_t>(x)));
  if (op == "Float") return one(SV::real(x));
  if (op == "Bool" || op == "is_nonzero") return one(SV::boolean(x != 0));
  // ScalarImplicit / item: keep the tensor's category.
  if (v.kind == K::Const && v.constant.dtype() == DType::Bool) return one(SV::boolean(x != 0));
  return one(integral ? SV::integer(static_cast<int64_t>(x)) : SV::real(x));
}

/// A constant tensor from nested lists of numbers (torch.tensor(data)).
Tensor tensorFromData(const SV& data, std::optional<DType> dtype) {
  Shape shape;
  const SV* cur = &data;
  while (cur->isSequence()) {
    shape.push_back(static_cast<int64_t>(cur->items->size()));
    if (cur->items->empty()) break;
    cur = &(*cur->items)[0];
  }
  std::vector<double> flat;
  bool any_float = false, all_bool = true;
  std::function<void(const SV&)> collect = [&](const SV& v) {
    if (v.isSequence()) {
      for (const SV& e : *v.items) collect(e);
      return;
    }
    if (!isStaticNumber(v)) fail("torch.tensor() of " + v.describe() + " is not known at import time");
    any_float = any_float || v.kind == K::Float || (v.kind == K::Const && isFloating(v.constant.dtype()));
    all_bool = all_bool && v.kind == K::Bool;
    flat.push_back(v.number());
  };
  collect(data);
  if (static_cast<int64_t>(flat.size()) != numelOf(shape)) fail("torch.tensor() of a ragged list");
  DType t = dtype.value_or(any_float ? DType::F32 : all_bool && !flat.empty() ? DType::Bool : DType::I64);
  Tensor out(t, shape);
  for (size_t k = 0; k < flat.size(); ++k) out.set(static_cast<int64_t>(k), flat[k]);
  return out;
}

std::optional<DType> optDType(Args a, size_t k) {
  if (k >= a.size() || a[k].isNone()) return std::nullopt;
  auto d = dtypeFromScalarType(toInt(a[k]));
  if (!d) fail("unsupported dtype code " + std::to_string(toInt(a[k])));
  return d;
}

/// aten::to / type_as on a one-element constant (dtype changes only).
Out constTo(Args a) {
  const SV& x = a[0];
  std::optional<DType> target;
  if (a.size() > 1) {
    const SV& b = a[1];
    if (b.kind == K::Int)
      target = optDType(a, 1);
    else if (b.kind == K::Device && a.size() > 2 && a[2].kind == K::Int)
      target = optDType(a, 2);
    else if (b.kind == K::Const)
      target = b.constant.dtype();
    else if (b.kind == K::Tensor)
      target = b.slot->value->dtype();
  }
  // The result of aten::to is an ordinary tensor, no longer a wrapped Python number.
  return one(SV::constTensor(target ? x.constant.to(*target) : x.constant));
}

std::string_view stripNamespace(std::string_view kind, std::string_view& ns) {
  auto p = kind.find("::");
  if (p == std::string_view::npos) return kind;
  ns = kind.substr(0, p);
  return kind.substr(p + 2);
}

}  // namespace

DType dtypeOf(const SV& v) {
  switch (v.kind) {
    case K::Bool:
      return DType::Bool;
    case K::Int:
      return DType::I64;
    case K::Float:
      return DType::F32;
    case K::Tensor:
      return v.slot->value->dtype();
    case K::Const:
      return v.constant.dtype();
    default:
      fail("expected a tensor or a number, got " + v.describe());
  }
}

DType resultType(std::span<const SV* const> operands) {
  std::optional<DType> dim, zero, wrapped;
  auto merge = [](std::optional<DType>& acc, DType t) { acc = acc ? promoteTypes(*acc, t) : t; };
  for (const SV* v : operands) {
    if (v->isNumber() || (v->kind == K::Const && v->wrapped)) {
      DType t = dtypeOf(*v);
      // Python numbers take the default dtype of their category.
      if (isFloating(t))
        t = DType::F32;
      else if (isIntegral(t))
        t = DType::I64;
      merge(wrapped, t);
    } else if (v->isTensorLike()) {
      DType t = dtypeOf(*v);
      bool is_zero_dim = v->kind == K::Tensor ? v->slot->value->type().rank() == 0 : v->constant.rank() == 0;
      merge(is_zero_dim ? zero : dim, t);
    }
  }
  auto combine = [](std::optional<DType> higher, std::optional<DType> lower) -> std::optional<DType> {
    if (!higher) return lower;
    if (!lower) return higher;
    if (isFloating(*higher)) return higher;
    if (*higher == DType::Bool || isFloating(*lower)) return promoteTypes(*higher, *lower);
    return higher;
  };
  return combine(dim, combine(zero, wrapped)).value_or(DType::F32);
}

DType resultType(const SV& a, const SV& b) {
  const SV* ops[] = {&a, &b};
  return resultType(ops);
}

std::optional<std::vector<SV>> evalStatic(std::string_view kind, std::span<const SV> a, size_t num_outputs) {
  std::string_view ns;
  std::string_view op = stripNamespace(kind, ns);

  // Plumbing that is static whatever the elements are.
  if (kind == "prim::ListConstruct") return one(SV::list({a.begin(), a.end()}));
  if (kind == "prim::TupleConstruct") return one(SV::tuple({a.begin(), a.end()}));
  if (kind == "prim::ListUnpack" || kind == "prim::TupleUnpack") {
    const auto& items = arg(a, 0).elems();
    if (items.size() != num_outputs)
      fail("unpacks " + std::to_string(items.size()) + " values into " + std::to_string(num_outputs));
    return items;
  }
  if (kind == "prim::TupleIndex") {
    const auto& items = arg(a, 0).elems();
    return one(items[normIndex(toInt(arg(a, 1)), items.size())]);
  }
  if (kind == "prim::TupleSlice") {
    const auto& items = arg(a, 0).elems();
    int64_t b = toInt(arg(a, 1)), e = toInt(arg(a, 2));
    return one(SV::tuple({items.begin() + b, items.begin() + e}));
  }
  if (kind == "prim::Uninitialized") return one(SV::uninit());
  if (kind == "prim::unchecked_unwrap_optional" || kind == "aten::_unwrap_optional") {
    if (arg(a, 0).isNone()) fail("unwrapping an Optional that is None");
    return one(a[0]);
  }
  if (kind == "prim::unchecked_cast" || kind == "aten::detach" || kind == "aten::alias") {
    if (!a.empty() && a[0].kind != K::Tensor) return one(a[0]);
    if (kind == "prim::unchecked_cast") return one(a[0]);
    return std::nullopt;
  }
  if (kind == "prim::NumToTensor" || kind == "aten::scalar_tensor") {
    const SV& v = arg(a, 0);
    if (v.kind == K::Const) return one(v);
    if (!v.isNumber()) return std::nullopt;
    std::optional<DType> t = kind == "aten::scalar_tensor" ? optDType(a, 1) : std::nullopt;
    DType d = t.value_or(v.kind == K::Float  ? (kind == "prim::NumToTensor" ? DType::F64 : DType::F32)
                         : v.kind == K::Bool ? DType::Bool
                                             : (kind == "prim::NumToTensor" ? DType::I64 : DType::F32));
    return one(SV::constTensor(Tensor::scalar(d, v.number()), kind == "prim::NumToTensor"));
  }
  if (kind == "aten::tensor" || kind == "aten::as_tensor") {
    if (a.empty() || anyRuntime(a.subspan(0, 1))) return std::nullopt;
    if (a[0].kind == K::Const) return std::nullopt;
    return one(SV::constTensor(tensorFromData(a[0], optDType(a, 1))));
  }
  if (kind == "aten::__is__" || kind == "aten::__isnot__") {
    bool same = sameValue(arg(a, 0), arg(a, 1));
    return one(SV::boolean(kind == "aten::__is__" ? same : !same));
  }
  if (kind == "aten::warn" || kind == "prim::Print") return std::vector<SV>{};
  if (kind == "aten::format") {
    std::string fmt = arg(a, 0).s, out;
    size_t next = 1;
    for (size_t p = 0; p < fmt.size(); ++p) {
      if (fmt.compare(p, 2, "{}") == 0 && next < a.size()) {
        out += toStr(a[next++]);
        ++p;
      } else {
        out += fmt[p];
      }
    }
    return one(SV::str(out));
  }
  if (kind == "aten::str") return one(SV::str(toStr(arg(a, 0))));
  if (kind == "aten::device") return arg(a, 0).kind == K::Str ? one(SV::device(a[0].s)) : std::nullopt;
  if (kind == "aten::is_grad_enabled" || kind == "aten::is_scripting") return one(SV::boolean(true));
  if (kind == "aten::is_autocast_enabled" || kind == "aten::is_autocast_cpu_enabled") return one(SV::boolean(false));
  if (kind == "aten::__range_length") {
    int64_t lo = toInt(arg(a, 0)), hi = toInt(arg(a, 1)), step = toInt(arg(a, 2));
    if (step == 0) fail("range() step must not be zero");
    int64_t n = step > 0 ? (hi - lo + step - 1) / step : (lo - hi - step - 1) / -step;
    return one(SV::integer(std::max<int64_t>(n, 0)));
  }
  if (kind == "aten::__derive_index") return one(SV::integer(toInt(arg(a, 1)) + toInt(arg(a, 0)) * toInt(arg(a, 2))));

  if (a.empty()) return std::nullopt;
  const SV& a0 = a[0];

  // Properties and shapes of tensors (known for run-time tensors too).
  if (a0.isTensorLike() &&
      (ns == "prim" || op == "size" || op == "sym_size" || op == "dim" || op == "numel" || op == "sym_numel" ||
       op == "len" || op == "is_floating_point" || op == "is_complex" || op == "_shape_as_tensor")) {
    if (auto r = tensorQuery(op, a)) return r;
  }
  if (a0.isSequence()) return listOp(op, a, num_outputs);
  if (a0.kind == K::Str) return stringOp(op, a);
  if (kind == "aten::__not__") return a0.isNumber() ? one(SV::boolean(a0.number() == 0)) : std::nullopt;
  if (op == "Int" || op == "Float" || op == "Bool" || op == "ScalarImplicit" || op == "item" || op == "is_nonzero")
    return convert(op, a0);
  if (kind == "prim::min" || kind == "prim::max") {
    if (a.size() == 1) return std::nullopt;
    return pythonBinary(op, a0, arg(a, 1));
  }

  // Arithmetic: all operands static. Python numbers follow Python, constant
  // tensors follow PyTorch (dtype promotion, true division).
  if (anyRuntime(a)) return std::nullopt;
  bool any_const = std::any_of(a.begin(), a.end(), [](const SV& v) { return v.kind == K::Const; });
  if (any_const) {
    if (!isStaticNumber(a0)) return std::nullopt;
    if (op == "detach" || op == "clone" || op == "contiguous") return one(a0);
    if (op == "to" || op == "type_as") return a0.isScalarConst() ? constTo(a) : std::nullopt;
    if (a.size() >= 2 && isStaticNumber(a[1])) return tensorBinary(op, a);
    if (a.size() == 1 && a0.isScalarConst()) {
      DType t = a0.constant.dtype();
      auto r = unaryMath(op, a0.number());
      if (!r) return std::nullopt;
      bool keeps_dtype = op == "neg" || op == "abs" || op == "floor" || op == "ceil" || op == "round";
      return one(constResult(keeps_dtype || isFloating(t) ? t : DType::F32, *r));
    }
    return std::nullopt;
  }
  if (a.size() >= 2 && a0.isNumber() && a[1].isNumber()) return pythonBinary(op, a0, a[1]);
  if (a0.isNumber() && (a.size() == 1)) {
    if (op == "neg") return one(a0.kind == K::Float ? SV::real(-a0.f) : SV::integer(-a0.i));
    if (op == "abs") return one(a0.kind == K::Float ? SV::real(std::fabs(a0.f)) : SV::integer(std::llabs(a0.i)));
    auto r = unaryMath(op, a0.number());
    if (!r) return std::nullopt;
    // math.floor/ceil/round return ints in TorchScript.
    if (op == "floor" || op == "ceil" || op == "round") return one(SV::integer(static_cast<int64_t>(*r)));
    return one(SV::real(*r));
  }
  return std::nullopt;
}

}  // namespace kiln::ts
