#include "core/ops/op_helpers.h"

#include <algorithm>
#include <limits>
#include <optional>

namespace kiln {

void opFail(const Node& n, const std::string& msg) { fail(n.describe() + ": " + msg); }

namespace {
/// The broadcast of a and b, or nullopt when they do not broadcast.
std::optional<Shape> broadcastOf(const Shape& a, const Shape& b) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}
}  // namespace

Shape broadcastShapes(const Node& n, const Shape& a, const Shape& b) {
  auto s = broadcastOf(a, b);
  if (!s) opFail(n, "shapes " + shapeStr(a) + " and " + shapeStr(b) + " do not broadcast");
  return *s;
}

Shape broadcastShapes(const Shape& a, const Shape& b) {
  auto s = broadcastOf(a, b);
  if (!s) fail("shapes " + shapeStr(a) + " and " + shapeStr(b) + " do not broadcast");
  return *s;
}

Shape resolveReshape(const Node& n, const Shape& in, const std::vector<int64_t>& spec) {
  Shape out(spec.begin(), spec.end());
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer_at >= 0) opFail(n, "only one dimension can be -1 in " + shapeStr(spec));
      infer_at = static_cast<int64_t>(i);
    } else if (out[i] < 0) {
      opFail(n, "invalid dimension in " + shapeStr(spec));
    } else {
      known *= out[i];
    }
  }
  int64_t total = numelOf(in);
  if (infer_at >= 0) {
    if (known == 0 || total % known != 0) opFail(n, "cannot reshape " + shapeStr(in) + " to " + shapeStr(spec));
    out[infer_at] = total / known;
  }
  if (numelOf(out) != total) opFail(n, "cannot reshape " + shapeStr(in) + " to " + shapeStr(spec));
  return out;
}

Shape resolveExpand(const Node& n, const Shape& in, const std::vector<int64_t>& spec) {
  if (spec.size() < in.size()) opFail(n, "cannot expand " + shapeStr(in) + " to fewer dims " + shapeStr(spec));
  Shape out(spec.begin(), spec.end());
  size_t off = spec.size() - in.size();
  for (size_t i = 0; i < out.size(); ++i) {
    if (i < off) {
      if (out[i] < 0) opFail(n, "-1 is not allowed for a new leading dimension in expand");
      continue;
    }
    int64_t d = in[i - off];
    if (out[i] == -1) out[i] = d;
    if (d != out[i] && d != 1) opFail(n, "cannot expand " + shapeStr(in) + " to " + shapeStr(spec));
  }
  return out;
}

SliceBounds normalizeSlice(int64_t size, int64_t start, int64_t end, int64_t step) {
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, 0, size);
  int64_t len = end > start ? (end - start + step - 1) / step : 0;
  return {start, end, step, len};
}

int64_t pooledLength(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation, bool ceil_mode) {
  int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1;
  int64_t out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  // With ceil_mode, the last window must start inside the input or left padding.
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

Shape transposedConvOutput(const Shape& x, const Shape& w, const std::vector<int64_t>& stride,
                           const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
                           const std::vector<int64_t>& output_padding, int64_t groups) {
  if (x.size() != 4 || w.size() != 4 || stride.size() != 2 || padding.size() != 2 || dilation.size() != 2 ||
      output_padding.size() != 2)
    fail("conv_transpose: expected a 4-D input and weight and two values per window argument");
  if (x[1] != w[0])
    fail("conv_transpose: input " + shapeStr(x) + " has " + std::to_string(x[1]) + " channels, weight " +
         shapeStr(w) + " expects " + std::to_string(w[0]));
  Shape out = {x[0], w[1] * groups, 0, 0};
  for (size_t k = 0; k < 2; ++k) {
    if (output_padding[k] < 0 || (output_padding[k] >= stride[k] && output_padding[k] >= dilation[k]))
      fail("conv_transpose: output_padding must be smaller than either stride or dilation, got " +
           shapeStr(output_padding));
    out[2 + k] = (x[2 + k] - 1) * stride[k] - 2 * padding[k] + dilation[k] * (w[2 + k] - 1) + output_padding[k] + 1;
  }
  if (out[2] <= 0 || out[3] <= 0) fail("conv_transpose: output size " + shapeStr(out) + " is not positive");
  return out;
}

std::vector<int64_t> reductionAxes(const Node& n, const std::vector<int64_t>& dims, int64_t rank) {
  std::vector<int64_t> axes;
  if (dims.empty()) {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
    return axes;
  }
  for (int64_t d : dims) {
    int64_t a;
    try {
      a = normalizeAxis(d, rank);
    } catch (const KilnException& e) {
      opFail(n, e.what());
    }
    if (rank == 0) continue;  // reducing a scalar over dim 0 is a no-op
    if (std::find(axes.begin(), axes.end(), a) != axes.end()) opFail(n, "dimension repeated in dims");
    axes.push_back(a);
  }
  std::sort(axes.begin(), axes.end());
  return axes;
}

std::vector<DimGroup> groupDims(const Shape& s, const std::vector<int64_t>& axes) {
  std::vector<DimGroup> g;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    if (s[d] == 1) continue;
    const bool red = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!g.empty() && g.back().reduced == red)
      g.back().size *= s[d];
    else
      g.push_back({red, s[d]});
  }
  return g;
}

Shape reducedShape(const Shape& in, const std::vector<int64_t>& axes, bool keepdim) {
  Shape out;
  for (int64_t i = 0; i < static_cast<int64_t>(in.size()); ++i) {
    bool reduced = std::find(axes.begin(), axes.end(), i) != axes.end();
    if (!reduced) out.push_back(in[i]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

std::vector<int64_t> pair(const Node& n, const std::string& attr) {
  std::vector<int64_t> v = n.is(attr);
  if (v.size() == 1) v.push_back(v[0]);
  if (v.size() != 2) opFail(n, "attribute '" + attr + "' must have 2 values, got " + shapeStr(v));
  return v;
}

bool channelsLast(const Node& n) {
  const Attr* a = n.attr("channels_last");
  return a && std::get<int64_t>(*a) != 0;
}

int64_t channelsOf(const Node& n, const Shape& x) { return channelsLast(n) ? x.back() : x[1]; }

Shape nchwFromNhwc(const Shape& s) { return s.size() == 4 ? Shape{s[0], s[3], s[1], s[2]} : s; }
Shape nhwcFromNchw(const Shape& s) { return s.size() == 4 ? Shape{s[0], s[2], s[3], s[1]} : s; }

std::vector<TensorType> inferSameAsInput0(const Node& n) { return {n.input(0)->type()}; }

}  // namespace kiln
