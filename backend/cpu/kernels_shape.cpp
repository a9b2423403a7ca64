// Reference CPU kernels for the layout and source ops of core/ops/shape.cpp:
// reshape (an alias), permute/expand/slice/select/flip (one strided copy
// each), cat, split, roll, repeat, pad, triu/tril, full and arange. The
// data-dependent ops index and gather live in kernels_shape_index.cpp.
//
// Every output except reshape's is a fresh contiguous tensor. Layout ops copy
// by element size, so they handle every dtype with the same code.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "backend/cpu/cpu_loops.h"
#include "backend/kernel.h"
#include "core/ops/op_helpers.h"

namespace kiln::cpu {

void registerCpuShapeIndexKernels(KernelRegistry& r);  // kernels_shape_index.cpp

namespace {

using Inputs = std::span<const Tensor>;
using Outputs = std::span<Tensor>;

/// Shape as [outer, size(axis), inner] around `axis`.
struct AxisSplit {
  int64_t outer = 1, size = 1, inner = 1;
};
AxisSplit splitAt(const Shape& s, int64_t axis) {
  AxisSplit a;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    if (d < axis)
      a.outer *= s[d];
    else if (d == axis)
      a.size = s[d];
    else
      a.inner *= s[d];
  }
  return a;
}

unsigned char* bytesOf(Tensor& t) {
  return static_cast<unsigned char*>(t.raw());
}
const unsigned char* bytesOf(const Tensor& t) {
  return static_cast<const unsigned char*>(t.raw());
}

/// Reshape reuses the input buffer (Tensor::reshaped): no copy.
void reshapeKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  out[0] = in[0].reshaped(n.output()->shape());
}

void permuteKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  std::vector<int64_t> dims;
  for (int64_t d : n.is("dims")) dims.push_back(normalizeAxis(d, in[0].rank()));
  permuteInto(in[0], dims, allocOutput(n, out, 0));
}

void expandKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  copyStrided(o, in[0], 0, broadcastStrides(in[0].shape(), o.shape()));
}

void sliceKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const Tensor& x = in[0];
  const int64_t axis = normalizeAxis(n.i("dim"), x.rank());
  const SliceBounds b = normalizeSlice(x.shape()[axis], n.i("start"), n.i("end"), n.i("step"));
  Shape st = contiguousStrides(x.shape());
  const int64_t offset = b.length > 0 ? b.start * st[axis] : 0;
  st[axis] *= b.step;
  copyStrided(o, x, offset, st);
}

void selectKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const Tensor& x = in[0];
  const int64_t axis = normalizeAxis(n.i("dim"), x.rank());
  const int64_t size = x.shape()[axis];
  int64_t idx = n.i("index");
  if (idx < -size || idx >= size)
    opFail(n, "index " + std::to_string(idx) + " is out of range for size " + std::to_string(size));
  if (idx < 0) idx += size;
  Shape st = contiguousStrides(x.shape());
  const int64_t offset = idx * st[axis];
  st.erase(st.begin() + axis);
  copyStrided(o, x, offset, st);
}

/// Flip walks the flipped dims backwards: start at their last element, negative stride.
void flipKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const Tensor& x = in[0];
  Shape st = contiguousStrides(x.shape());
  std::vector<bool> flipped(std::max<int64_t>(x.rank(), 1));
  int64_t offset = 0;
  for (int64_t d : n.is("dims")) {
    const int64_t a = normalizeAxis(d, x.rank());
    if (flipped[a]) opFail(n, "dim " + std::to_string(d) + " appears more than once in dims");
    flipped[a] = true;
    if (x.rank() == 0 || x.shape()[a] == 0) continue;
    offset += (x.shape()[a] - 1) * st[a];
    st[a] = -st[a];
  }
  copyStrided(o, x, offset, st);
}

/// Inputs are converted to the promoted output dtype, then copied row by row
/// into their column range of the output viewed as [outer, total * inner].
void catKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const int64_t axis = normalizeAxis(n.i("dim"), o.rank());
  const AxisSplit os = splitAt(o.shape(), axis);
  const size_t es = dtypeSize(o.dtype());
  const int64_t out_row = os.size * os.inner * static_cast<int64_t>(es);
  int64_t col = 0;
  for (const Tensor& t : in) {
    const Tensor c = asDType(t, o.dtype());
    const int64_t row = splitAt(c.shape(), axis).size * os.inner * static_cast<int64_t>(es);
    if (row > 0) {
      unsigned char* dst = bytesOf(o) + col;
      const unsigned char* src = bytesOf(c);
      parallelFor(os.outer, std::max<int64_t>(1, 4 * kParallelGrain / row), [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) std::memcpy(dst + k * out_row, src + k * row, static_cast<size_t>(row));
      });
    }
    col += row;
  }
}

void splitKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  const Tensor& x = in[0];
  const int64_t axis = normalizeAxis(n.i("dim"), x.rank());
  const Shape st = contiguousStrides(x.shape());
  int64_t start = 0;
  for (size_t k = 0; k < n.numOutputs(); ++k) {
    Tensor& o = allocOutput(n, out, k);
    copyStrided(o, x, start * st[axis], st);
    start += o.shape()[axis];
  }
}

/// Roll [outer, size, inner] by `shift` along the middle dim: two block copies per row.
Tensor rollAxis(const Tensor& x, AxisSplit a, int64_t shift) {
  Tensor o(x.type());
  if (a.size == 0 || x.numel() == 0) return o;
  const int64_t s = ((shift % a.size) + a.size) % a.size;
  const size_t es = dtypeSize(x.dtype());
  const size_t block = static_cast<size_t>(a.inner) * es, row = block * static_cast<size_t>(a.size);
  const unsigned char* src = bytesOf(x);
  unsigned char* dst = bytesOf(o);
  parallelFor(a.outer, std::max<int64_t>(1, 4 * kParallelGrain / static_cast<int64_t>(row)), [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const unsigned char* r = src + k * row;
      unsigned char* w = dst + k * row;
      std::memcpy(w + s * block, r, (a.size - s) * block);  // out[s:] = in[:n-s]
      std::memcpy(w, r + (a.size - s) * block, s * block);  // out[:s] = in[n-s:]
    }
  });
  return o;
}

/// roll with dims rolls each listed dim in turn; without dims it rolls the
/// flattened tensor and restores the shape.
void rollKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  const Tensor& x = in[0];
  const auto& shifts = n.is("shifts");
  const auto& dims = n.is("dims");
  if (dims.empty()) {
    out[0] = shifts.empty() ? x.clone() : rollAxis(x, {1, x.numel(), 1}, shifts[0]);
    return;
  }
  Tensor cur = x;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t axis = normalizeAxis(dims[i], x.rank());
    cur = rollAxis(cur, x.rank() == 0 ? AxisSplit{} : splitAt(x.shape(), axis), shifts[i]);
  }
  out[0] = cur;
}

/// Tensor.repeat: output dim d is (repeat r_d, input i_d) in row-major order,
/// so walking the shape [r0, i0, r1, i1, ...] with input strides [0, s0, 0, s1, ...]
/// writes the output contiguously.
void repeatKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const Tensor& x = in[0];
  const auto& reps = n.is("repeats");
  const size_t off = reps.size() - x.shape().size();
  Shape xs(off, 1);
  xs.insert(xs.end(), x.shape().begin(), x.shape().end());
  const Shape st = contiguousStrides(xs);
  Shape walk, walk_st;
  for (size_t d = 0; d < reps.size(); ++d) {
    walk.insert(walk.end(), {reps[d], xs[d]});
    walk_st.insert(walk_st.end(), {0, st[d]});
  }
  Tensor view = o.reshaped(walk);
  copyStrided(view, x, 0, walk_st);
}

/// For one padded axis: the input coordinate each output coordinate reads, or -1 for the fill value.
std::vector<int64_t> padMap(const Node& n, const std::string& mode, int64_t size, int64_t lo, int64_t hi) {
  const int64_t len = size + lo + hi;
  std::vector<int64_t> map(static_cast<size_t>(std::max<int64_t>(len, 0)));
  if (mode != "constant") {
    if (size == 0) opFail(n, mode + " padding needs a non-empty dimension");
    if (mode == "reflect" && (lo >= size || hi >= size))
      opFail(n, "reflect padding (" + std::to_string(lo) + ", " + std::to_string(hi) +
                    ") must be smaller than the dimension size " + std::to_string(size));
    if (mode == "circular" && (lo > size || hi > size))
      opFail(n, "circular padding (" + std::to_string(lo) + ", " + std::to_string(hi) +
                    ") must be at most the dimension size " + std::to_string(size));
  }
  for (int64_t i = 0; i < len; ++i) {
    int64_t j = i - lo;
    if (mode == "constant")
      j = (j >= 0 && j < size) ? j : -1;
    else if (mode == "reflect")
      j = j < 0 ? -j : (j >= size ? 2 * (size - 1) - j : j);
    else if (mode == "replicate")
      j = std::clamp<int64_t>(j, 0, size - 1);
    else
      j = ((j % size) + size) % size;  // circular
    map[i] = j;
  }
  return map;
}

/// F.pad: per-axis coordinate maps, then one pass over output rows.
void padKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const Tensor& x = in[0];
  if (x.rank() == 0) {
    out[0] = x.clone();
    return;
  }
  const auto& pads = n.is("pads");
  const std::string& mode = n.s("mode");
  const int64_t rank = x.rank();
  std::vector<std::vector<int64_t>> maps(rank);
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t i = rank - 1 - d;  // pads run from the last dim backwards
    const int64_t lo = 2 * i < static_cast<int64_t>(pads.size()) ? pads[2 * i] : 0;
    const int64_t hi = 2 * i + 1 < static_cast<int64_t>(pads.size()) ? pads[2 * i + 1] : 0;
    maps[d] = padMap(n, mode, x.shape()[d], lo, hi);
  }
  const Shape& os = o.shape();
  const Shape xst = contiguousStrides(x.shape());
  const int64_t width = os[rank - 1], rows = width ? o.numel() / width : 0;
  const std::vector<int64_t>& last = maps[rank - 1];
  // Output columns [ib, ie) read input columns [ib - lo_last, ie - lo_last) in order.
  const int64_t lo_last = pads.size() >= 2 ? pads[0] : 0;
  const int64_t ib = std::clamp<int64_t>(lo_last, 0, width);
  const int64_t ie = std::max(ib, std::clamp<int64_t>(lo_last + x.shape()[rank - 1], 0, width));
  dispatchAll(o.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T fill = convert<T>(n.f("value"));
    const T* src = x.data<T>();
    T* dst = o.data<T>();
    parallelFor(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(width, 1)), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        // Input offset of this row, or -1 when an outer coordinate falls in the padding.
        int64_t off = 0, rem = row;
        for (int64_t d = rank - 2; d >= 0 && off >= 0; --d) {
          const int64_t j = maps[d][rem % os[d]];
          rem /= os[d];
          off = j < 0 ? -1 : off + j * xst[d];
        }
        T* w = dst + row * width;
        if (off < 0) {
          std::fill(w, w + width, fill);
          continue;
        }
        // Borders through the map, the interior (which every mode maps to itself) as one copy.
        for (int64_t k = 0; k < ib; ++k) w[k] = last[k] < 0 ? fill : src[off + last[k]];
        std::copy(src + off + ib - lo_last, src + off + ie - lo_last, w + ib);
        for (int64_t k = ie; k < width; ++k) w[k] = last[k] < 0 ? fill : src[off + last[k]];
      }
    });
  });
}

/// triu keeps j - i >= diagonal, tril keeps j - i <= diagonal, on the last two dims.
template <bool kUpper>
void triangularKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  out[0] = in[0].clone();
  Tensor& o = out[0];
  const int64_t rank = o.rank(), rows = o.shape()[rank - 2], cols = o.shape()[rank - 1];
  const int64_t k = n.i("diagonal");
  const size_t es = dtypeSize(o.dtype());
  const int64_t mats = rows * cols > 0 ? o.numel() / (rows * cols) : 0;
  unsigned char* base = bytesOf(o);
  parallelFor(mats * rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(cols, 1)),
              [&](int64_t b, int64_t e) {
                for (int64_t t = b; t < e; ++t) {
                  const int64_t i = t % rows;
                  // Zero columns [z0, z1): all-zero bits is 0 in every dtype.
                  const int64_t z0 = kUpper ? 0 : std::clamp<int64_t>(i + k + 1, 0, cols);
                  const int64_t z1 = kUpper ? std::clamp<int64_t>(i + k, 0, cols) : cols;
                  if (z1 > z0) std::memset(base + (t * cols + z0) * es, 0, static_cast<size_t>(z1 - z0) * es);
                }
              });
}

/// The value converted to the dtype (truncated for integers; bool is value != 0).
void fullKernel(const Node& n, Inputs, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  dispatchAll(o.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::fill(o.data<T>(), o.data<T>() + o.numel(), convert<T>(n.f("value")));
  });
}

/// Element i is start + i * step computed in double, then converted.
void arangeKernel(const Node& n, Inputs, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const double start = n.f("start"), step = n.f("step");
  dispatchAll(o.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = o.data<T>();
    for (int64_t i = 0, len = o.numel(); i < len; ++i) p[i] = convert<T>(start + static_cast<double>(i) * step);
  });
}

void add(KernelRegistry& r, const char* op, KernelFn fn) {
  r.add({op, "cpu", std::string("cpu.") + op, 0, nullptr, fn});
}

}  // namespace
}  // namespace kiln::cpu

namespace kiln {

void registerCpuShapeKernels(KernelRegistry& r) {
  using namespace cpu;
  r.add({"reshape", "cpu", "cpu.reshape", 0, nullptr, reshapeKernel, /*output_views_input0=*/true});
  // detach is x itself (its output's shape is x's): the same alias.
  r.add({"detach", "cpu", "cpu.detach", 0, nullptr, reshapeKernel, /*output_views_input0=*/true});
  add(r, "permute", permuteKernel);
  add(r, "expand", expandKernel);
  add(r, "slice", sliceKernel);
  add(r, "select", selectKernel);
  add(r, "flip", flipKernel);
  add(r, "cat", catKernel);
  add(r, "split", splitKernel);
  add(r, "roll", rollKernel);
  add(r, "repeat", repeatKernel);
  add(r, "pad", padKernel);
  add(r, "triu", triangularKernel<true>);
  add(r, "tril", triangularKernel<false>);
  add(r, "full", fullKernel);
  add(r, "arange", arangeKernel);
  registerCpuShapeIndexKernels(r);
}

}  // namespace kiln
