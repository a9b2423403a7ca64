#include "core/dtype.h"

#include <array>

namespace kiln {
namespace {
struct DTypeInfo {
  DType type;
  size_t size;
  std::string_view name;
  std::string_view st_name;
};
constexpr std::array<DTypeInfo, 10> kInfo = {{
    {DType::F32, 4, "f32", "F32"},
    {DType::F64, 8, "f64", "F64"},
    {DType::F16, 2, "f16", "F16"},
    {DType::BF16, 2, "bf16", "BF16"},
    {DType::I64, 8, "i64", "I64"},
    {DType::I32, 4, "i32", "I32"},
    {DType::I16, 2, "i16", "I16"},
    {DType::I8, 1, "i8", "I8"},
    {DType::U8, 1, "u8", "U8"},
    {DType::Bool, 1, "bool", "BOOL"},
}};
const DTypeInfo& info(DType t) { return kInfo[static_cast<size_t>(t)]; }

// Rank inside a category for promotion: bool < integers < floats.
int category(DType t) { return t == DType::Bool ? 0 : isIntegral(t) ? 1 : 2; }
}  // namespace

size_t dtypeSize(DType t) { return info(t).size; }
std::string_view dtypeName(DType t) { return info(t).name; }
std::string_view dtypeSafetensorsName(DType t) { return info(t).st_name; }

std::optional<DType> parseDType(std::string_view s) {
  for (const auto& i : kInfo)
    if (i.name == s) return i.type;
  return std::nullopt;
}
std::optional<DType> parseSafetensorsDType(std::string_view s) {
  for (const auto& i : kInfo)
    if (i.st_name == s) return i.type;
  return std::nullopt;
}

bool isFloating(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16;
}
bool isIntegral(DType t) {
  return t == DType::I64 || t == DType::I32 || t == DType::I16 || t == DType::I8 || t == DType::U8;
}

DType promoteTypes(DType a, DType b) {
  if (a == b) return a;
  int ca = category(a), cb = category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 2) {
    // f16 + bf16 -> f32, as in PyTorch.
    if ((a == DType::F16 && b == DType::BF16) || (a == DType::BF16 && b == DType::F16)) return DType::F32;
    return dtypeSize(a) >= dtypeSize(b) ? a : b;
  }
  // Integers: u8 with a signed type of the same width promotes up (i8+u8 -> i16).
  if ((a == DType::U8 && b == DType::I8) || (a == DType::I8 && b == DType::U8)) return DType::I16;
  return dtypeSize(a) >= dtypeSize(b) ? a : b;
}

DType promoteOperands(DType a, bool a_scalar, DType b, bool b_scalar) {
  if (a_scalar == b_scalar) return promoteTypes(a, b);
  DType dim = a_scalar ? b : a, zero = a_scalar ? a : b;
  return category(zero) > category(dim) ? zero : dim;
}

}  // namespace kiln
