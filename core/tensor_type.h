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
/// The most elements one tensor may have (2^40: 4 TiB of f32). Every edge
/// where a shape comes in (text types, --input-shape, --batch, FX dumps,
/// safetensors headers) refuses more: far beyond any machine's memory, and
/// far enough below int64 that shape arithmetic cannot overflow.
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 40;
/// Product of dims, or -1 when a dim is negative or the product exceeds
/// kMaxTensorElements (computed without overflowing).
int64_t boundedNumel(const Shape& s);
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
