// SV constructors, printing, and the ScalarType code table.
#include "core/import/torchscript/static_value.h"

#include "core/attribute.h"
#include "core/result.h"

namespace kiln::ts {

SV SV::boolean(bool b) {
  SV v;
  v.kind = Kind::Bool;
  v.i = b ? 1 : 0;
  return v;
}

SV SV::integer(int64_t x) {
  SV v;
  v.kind = Kind::Int;
  v.i = x;
  return v;
}

SV SV::real(double x) {
  SV v;
  v.kind = Kind::Float;
  v.f = x;
  return v;
}

SV SV::str(std::string x) {
  SV v;
  v.kind = Kind::Str;
  v.s = std::move(x);
  return v;
}

SV SV::device(std::string x) {
  SV v;
  v.kind = Kind::Device;
  v.s = std::move(x);
  return v;
}

SV SV::list(std::vector<SV> x) {
  SV v;
  v.kind = Kind::List;
  v.items = std::make_shared<std::vector<SV>>(std::move(x));
  return v;
}

SV SV::tuple(std::vector<SV> x) {
  SV v = list(std::move(x));
  v.kind = Kind::Tuple;
  return v;
}

SV SV::tensor(Value* value) {
  auto slot = std::make_shared<TensorSlot>();
  slot->value = value;
  return slotted(std::move(slot));
}

SV SV::slotted(std::shared_ptr<TensorSlot> slot) {
  SV v;
  v.kind = Kind::Tensor;
  v.slot = std::move(slot);
  return v;
}

SV SV::constTensor(Tensor t, bool wrapped) {
  SV v;
  v.kind = Kind::Const;
  v.constant = std::move(t);
  v.wrapped = wrapped;
  return v;
}

SV SV::object(int64_t handle, std::string path) {
  SV v;
  v.kind = Kind::Object;
  v.i = handle;
  v.s = std::move(path);
  return v;
}

SV SV::function(int64_t handle, std::string name) {
  SV v;
  v.kind = Kind::Function;
  v.i = handle;
  v.s = std::move(name);
  return v;
}

SV SV::uninit() {
  SV v;
  v.kind = Kind::Uninit;
  return v;
}

SV SV::unsupported() {
  SV v;
  v.kind = Kind::Unsupported;
  return v;
}

bool SV::dependsOnUnsupported() const {
  if (kind == Kind::Unsupported) return true;
  if (kind == Kind::List || kind == Kind::Tuple)
    for (const SV& e : elems())
      if (e.dependsOnUnsupported()) return true;
  return false;
}

double SV::number() const {
  switch (kind) {
    case Kind::Bool:
    case Kind::Int:
      return static_cast<double>(i);
    case Kind::Float:
      return f;
    case Kind::Const:
      if (constant.numel() == 1) return constant.at(0);
      break;
    default:
      break;
  }
  fail("expected a number, got " + describe());
}

const std::vector<SV>& SV::elems() const {
  if (!isSequence()) fail("expected a list or tuple, got " + describe());
  return *items;
}

std::string SV::describe() const {
  switch (kind) {
    case Kind::None:
      return "None";
    case Kind::Bool:
      return i ? "bool True" : "bool False";
    case Kind::Int:
      return "int " + std::to_string(i);
    case Kind::Float:
      return "float " + formatDouble(f);
    case Kind::Str:
      return "str \"" + s + "\"";
    case Kind::Device:
      return "device " + s;
    case Kind::List:
    case Kind::Tuple: {
      std::string out = kind == Kind::List ? "list[" : "tuple(";
      for (size_t k = 0; k < items->size(); ++k) {
        if (k) out += ", ";
        if (k == 6) {
          out += "...";
          break;
        }
        out += (*items)[k].describe();
      }
      return out + (kind == Kind::List ? "]" : ")");
    }
    case Kind::Tensor:
      return "Tensor " + (slot && slot->value ? slot->value->type().str() : std::string("?"));
    case Kind::Const:
      if (constant.numel() == 1)
        return "constant tensor " + constant.type().str() + " = " + formatDouble(constant.at(0));
      return "constant tensor " + constant.type().str();
    case Kind::Object:
      return "module " + (s.empty() ? std::string("<root>") : s);
    case Kind::Function:
      return "function " + s;
    case Kind::Uninit:
      return "uninitialized";
    case Kind::Unsupported:
      return "the result of an op that could not be imported";
  }
  return "?";
}

namespace {
struct CodeEntry {
  int64_t code;
  DType dtype;
};
// c10::ScalarType numbering.
constexpr CodeEntry kCodes[] = {{0, DType::U8},    {1, DType::I8},   {2, DType::I16}, {3, DType::I32},
                                {4, DType::I64},   {5, DType::F16},  {6, DType::F32}, {7, DType::F64},
                                {11, DType::Bool}, {15, DType::BF16}};
}  // namespace

std::optional<DType> dtypeFromScalarType(int64_t code) {
  for (const auto& e : kCodes)
    if (e.code == code) return e.dtype;
  return std::nullopt;
}

int64_t scalarTypeOf(DType t) {
  for (const auto& e : kCodes)
    if (e.dtype == t) return e.code;
  return 6;
}

}  // namespace kiln::ts
