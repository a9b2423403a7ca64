// TensorType: element type plus static shape. Kiln's IR is statically shaped.
#pragma once

#include <cstdint>
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

}  // namespace kiln
