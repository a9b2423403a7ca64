#include "core/tensor_type.h"

#include "core/result.h"

namespace kiln {

int64_t numelOf(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

int64_t boundedNumel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) return -1;
    if (d > 0 && n > kMaxTensorElements / d) return -1;
    n *= d;
  }
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
    fail("dim " + std::to_string(axis) + " is out of range for a tensor of rank " + std::to_string(rank));
  return axis < 0 ? axis + r : axis;
}

}  // namespace kiln

namespace kiln {

std::optional<int64_t> broadcastRunInner(const Shape& operand, const Shape& out) {
  if (operand.size() > out.size()) return std::nullopt;
  const size_t pad = out.size() - operand.size();
  int64_t last = -1;    // out dim of the run's last non-1 operand dim
  bool ended = false;   // a broadcast dim came after the run started
  for (size_t d = 0; d < out.size(); ++d) {
    const int64_t od = d < pad ? 1 : operand[d - pad];
    if (out[d] == 1) continue;  // size-1 dims neither start nor end a run
    if (od == 1) {
      ended = ended || last >= 0;
      continue;
    }
    if (od != out[d] || ended) return std::nullopt;
    last = static_cast<int64_t>(d);
  }
  int64_t inner = 1;
  if (last >= 0)
    for (size_t d = static_cast<size_t>(last) + 1; d < out.size(); ++d) inner *= out[d];
  return inner;
}

}  // namespace kiln
