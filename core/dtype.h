// Element types Kiln's IR and tensors know about.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kiln {

/// Element type. The short names (f32, i64, ...) are the text-IR spelling;
/// the safetensors names (F32, I64, ...) are used on disk.
enum class DType : uint8_t { F32, F64, F16, BF16, I64, I32, I16, I8, U8, Bool };

/// Bytes per element.
size_t dtypeSize(DType t);
/// Text-IR name: "f32", "i64", "bool", ...
std::string_view dtypeName(DType t);
/// Parse a text-IR name; nullopt if unknown.
std::optional<DType> parseDType(std::string_view s);
/// safetensors name: "F32", "I64", "BOOL", ...
std::string_view dtypeSafetensorsName(DType t);
std::optional<DType> parseSafetensorsDType(std::string_view s);

bool isFloating(DType t);
bool isIntegral(DType t);  ///< integer types, not bool
/// bf16 or f16: the types amp computes in, which widen exactly to f32.
inline bool isLowPrecisionFloat(DType t) {
  return t == DType::BF16 || t == DType::F16;
}

/// Type promotion of two tensor operands, following PyTorch's
/// category-then-width rule for tensors of equal "rank class".
DType promoteTypes(DType a, DType b);

/// Result dtype of an elementwise op over operands of these dtypes and ranks,
/// as torch.result_type: a 0-d operand only decides the dtype when its
/// category (bool < integer < floating) is higher than every dimensioned
/// operand's (i32[2] + i64[] -> i32, i64[2] + f64[] -> f64).
DType promoteOperands(DType a, bool a_scalar, DType b, bool b_scalar);

}  // namespace kiln
