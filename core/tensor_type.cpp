#include "core/tensor_type.h"

#include "core/result.h"

namespace kiln {

int64_t numelOf(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

int64_t TensorType::numel() const { return numelOf(shape); }

std::string shapeStr(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

std::string TensorType::str() const { return std::string(dtypeName(dtype)) + shapeStr(shape); }

Shape contiguousStrides(const Shape& s) {
  Shape st(s.size(), 1);
  for (int64_t i = static_cast<int64_t>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

int64_t normalizeAxis(int64_t axis, int64_t rank) {
  int64_t r = rank == 0 ? 1 : rank;  // PyTorch lets dim 0/-1 address a scalar
  if (axis < -r || axis >= r)
    fail("axis " + std::to_string(axis) + " is out of range for a tensor of rank " + std::to_string(rank));
  return axis < 0 ? axis + r : axis;
}

}  // namespace kiln
