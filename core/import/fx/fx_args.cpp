// Argument normalization against op schemas, typed argument access, and
// PyTorch's result-dtype rule (see fx_args.h).
#include "core/import/fx/fx_args.h"

#include "core/import/fx/fx_lowering.h"
#include "core/result.h"

namespace kiln::fx {
namespace {

enum class Tier { Dim, Zero, Wrapped };

DType numberDType(const Number& n) {
  if (n.kind == FxArg::Kind::Bool) return DType::Bool;
  return n.isFloat() ? DType::F32 : DType::I64;
}

// c10::combine_categories: a lower tier only matters when its category
// (bool < integer < float) is higher than the higher tier's.
std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (isFloating(*higher)) return higher;
  if (*higher == DType::Bool || isFloating(*lower)) return promoteTypes(*higher, *lower);
  return higher;
}

}  // namespace

DType resultType(std::span<const Operand> operands) {
  std::optional<DType> tiers[3];
  for (const Operand& o : operands) {
    Tier tier = o.isNumber() ? Tier::Wrapped : o.tensor->type().rank() == 0 ? Tier::Zero : Tier::Dim;
    DType t = o.isNumber() ? numberDType(o.number) : o.tensor->dtype();
    auto& slot = tiers[static_cast<int>(tier)];
    slot = slot ? promoteTypes(*slot, t) : t;
  }
  auto r = combine(tiers[0], combine(tiers[1], tiers[2]));
  return r ? *r : DType::F32;
}

NodeArgs::NodeArgs(Lowering& cx, const FxNode& node, const FxSchema& schema, std::string_view kiln_op)
    : kiln(kiln_op), cx_(cx), node_(node) {
  std::vector<const FxArg*> slots(schema.args.size(), nullptr);
  size_t next = 0;
  for (const FxArg& a : node.args) {
    while (next < schema.args.size() && schema.args[next].kwarg_only) ++next;
    if (next >= schema.args.size())
      kiln::fail("too many positional arguments (" + std::to_string(node.args.size()) + ") for schema " +
                 quote(schema.text));
    slots[next++] = &a;
  }
  for (const auto& [name, a] : node.kwargs) {
    size_t k = 0;
    while (k < schema.args.size() && schema.args[k].name != name) ++k;
    if (k == schema.args.size()) kiln::fail("unknown keyword argument " + quote(name));
    if (slots[k]) kiln::fail("argument " + quote(name) + " given twice");
    slots[k] = &a;
  }
  for (size_t k = 0; k < slots.size(); ++k) {
    if (!slots[k]) {
      if (!schema.args[k].default_value)
        kiln::fail("missing argument " + quote(schema.args[k].name) + " (it has no default)");
      slots[k] = &*schema.args[k].default_value;
    }
    args_.emplace_back(schema.args[k].name, slots[k]);
  }
}

void NodeArgs::fail(std::string_view name, const std::string& msg) const {
  kiln::fail("argument '" + std::string(name) + "': " + msg);
}

bool NodeArgs::has(std::string_view name) const {
  for (const auto& [n, a] : args_)
    if (n == name) return true;
  return false;
}

const FxArg& NodeArgs::arg(std::string_view name) const {
  for (const auto& [n, a] : args_)
    if (n == name) return *a;
  kiln::fail("the op schema has no argument '" + std::string(name) + "' (a schema from another PyTorch version?)");
}

bool NodeArgs::given(std::string_view name) const { return has(name) && !arg(name).isNone(); }

Value* NodeArgs::tensor(std::string_view name) const {
  const FxArg& a = arg(name);
  if (a.kind != FxArg::Kind::Node) fail(name, "expected a tensor, got " + argKindName(a.kind));
  const FxValue& v = cx_.lookup(a.s);
  if (!v.unavailable.empty()) fail(name, quote(a.s) + " cannot be used: " + v.unavailable);
  if (!v.tensor) fail(name, quote(a.s) + " is a tuple, not a tensor");
  return v.tensor;
}

Value* NodeArgs::optTensor(std::string_view name) const { return arg(name).isNone() ? nullptr : tensor(name); }

std::vector<Value*> NodeArgs::optTensors(std::string_view name) const {
  const FxArg& a = arg(name);
  if (a.kind != FxArg::Kind::List && a.kind != FxArg::Kind::Tuple)
    fail(name, "expected a list of tensors, got " + argKindName(a.kind));
  std::vector<Value*> out;
  for (const FxArg& item : a.items) {
    if (item.isNone()) {
      out.push_back(nullptr);
      continue;
    }
    if (item.kind != FxArg::Kind::Node) fail(name, "expected a list of tensors, holding a " + argKindName(item.kind));
    const FxValue& v = cx_.lookup(item.s);
    if (!v.unavailable.empty()) fail(name, quote(item.s) + " cannot be used: " + v.unavailable);
    if (!v.tensor) fail(name, quote(item.s) + " is a tuple, not a tensor");
    out.push_back(v.tensor);
  }
  return out;
}

std::vector<Value*> NodeArgs::tensors(std::string_view name) const {
  auto out = optTensors(name);
  for (Value* v : out)
    if (!v) fail(name, "None is not allowed in this tensor list");
  return out;
}

Operand NodeArgs::operand(std::string_view name) const {
  const FxArg& a = arg(name);
  if (a.kind == FxArg::Kind::Node) return {tensor(name), {}};
  return {nullptr, number(name)};
}

Number NodeArgs::number(std::string_view name) const {
  const FxArg& a = arg(name);
  if (!a.isNumber()) fail(name, "expected a number, got " + argKindName(a.kind));
  return {a.kind, a.f, a.i};
}

double NodeArgs::real(std::string_view name) const { return number(name).value; }

std::optional<double> NodeArgs::optReal(std::string_view name) const {
  if (arg(name).isNone()) return std::nullopt;
  return real(name);
}

int64_t NodeArgs::checkedInt(std::string_view name, const FxArg& a, int64_t limit) const {
  if (a.kind != FxArg::Kind::Int && a.kind != FxArg::Kind::Bool)
    fail(name, "expected an int, got " + argKindName(a.kind));
  if (a.i > limit || a.i < -limit) fail(name, "value " + std::to_string(a.i) + " is out of range");
  return a.i;
}

int64_t NodeArgs::integer(std::string_view name) const { return checkedInt(name, arg(name), kMaxInt); }

std::optional<int64_t> NodeArgs::optInt(std::string_view name) const {
  if (arg(name).isNone()) return std::nullopt;
  return integer(name);
}

std::optional<int64_t> NodeArgs::optAnyInt(std::string_view name) const {
  const FxArg& a = arg(name);
  if (a.isNone()) return std::nullopt;
  if (a.kind != FxArg::Kind::Int && a.kind != FxArg::Kind::Bool)
    fail(name, "expected an int, got " + argKindName(a.kind));
  return a.i;
}

bool NodeArgs::flag(std::string_view name) const {
  const FxArg& a = arg(name);
  if (a.kind != FxArg::Kind::Bool && a.kind != FxArg::Kind::Int)
    fail(name, "expected a bool, got " + argKindName(a.kind));
  return a.i != 0;
}

std::optional<bool> NodeArgs::optFlag(std::string_view name) const {
  if (arg(name).isNone()) return std::nullopt;
  return flag(name);
}

std::string NodeArgs::str(std::string_view name) const {
  const FxArg& a = arg(name);
  if (a.kind != FxArg::Kind::String) fail(name, "expected a string, got " + argKindName(a.kind));
  return a.s;
}

std::optional<std::string> NodeArgs::optStr(std::string_view name) const {
  if (arg(name).isNone()) return std::nullopt;
  return str(name);
}

std::vector<int64_t> NodeArgs::ints(std::string_view name, int64_t limit) const {
  const FxArg& a = arg(name);
  if (a.kind == FxArg::Kind::Int || a.kind == FxArg::Kind::Bool) return {checkedInt(name, a, limit)};
  if (a.kind != FxArg::Kind::List && a.kind != FxArg::Kind::Tuple)
    fail(name, "expected an int list, got " + argKindName(a.kind));
  std::vector<int64_t> out;
  for (const FxArg& item : a.items) out.push_back(checkedInt(name, item, limit));
  return out;
}

std::optional<std::vector<int64_t>> NodeArgs::optInts(std::string_view name, int64_t limit) const {
  if (arg(name).isNone()) return std::nullopt;
  return ints(name, limit);
}

Shape NodeArgs::sizes(std::string_view name, bool expand) const {
  Shape s = ints(name, kMaxElements);
  int64_t numel = 1, inferred = 0;
  for (int64_t d : s) {
    if (d == -1) {
      if (++inferred > 1 && !expand) fail(name, "more than one -1 in " + shapeStr(s));
      continue;
    }
    if (d < 0) fail(name, "negative size in " + shapeStr(s));
    if (d > 0 && numel > kMaxElements / d) fail(name, "shape " + shapeStr(s) + " has more than 2^40 elements");
    numel *= d;
  }
  return s;
}

std::optional<DType> NodeArgs::optDType(std::string_view name) const {
  const FxArg& a = arg(name);
  if (a.isNone()) return std::nullopt;
  if (a.kind != FxArg::Kind::DType) fail(name, "expected a dtype, got " + argKindName(a.kind));
  return a.dtype;
}

}  // namespace kiln::fx
