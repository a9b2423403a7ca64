// TensorType: element type plus static shape. Kiln's IR is statically shaped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace kiln {

using Shape = std::vector<int64_t>;

/// dtype + static shape. Printed as "f32[2,3]"; a scalar is "f32[]".
struct TensorType {
  DType dtype = DType::F32;
  Shape shape;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtypeSize(dtype); }
  std::string str() const;
  bool operator==(const TensorType& o) const { return dtype == o.dtype && shape == o.shape; }
  bool operator!=(const TensorType& o) const { return !(*this == o); }
};

/// "[2,3]"
std::string shapeStr(const Shape& s);
/// Product of dims (1 for a scalar).
int64_t numelOf(const Shape& s);
/// Contiguous (row-major) strides in elements.
Shape contiguousStrides(const Shape& s);
/// Normalize a possibly negative axis; throws KilnException if out of range.
int64_t normalizeAxis(int64_t axis, int64_t rank);
/// When `operand` broadcasts to `out` along one contiguous run of dims (its
/// non-1 dims, right-aligned, are consecutive and equal `out`'s there: a
/// bias [C] on [N, T, C], a mask [T, T] on [B, H, T, T], a [C, 1, 1] scale on
/// [N, C, H, W]), the element of `operand` for flat index i of `out` is
/// (i / inner) % numel(operand): returns inner. nullopt otherwise. A
/// one-element operand gives inner 1 (i % 1 == 0), the same shape gives 1.
std::optional<int64_t> broadcastRunInner(const Shape& operand, const Shape& out);

}  // namespace kiln
