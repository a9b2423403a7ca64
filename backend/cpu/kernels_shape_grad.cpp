// Reference CPU kernels for the backward ops of the shape family (registered
// in core/ops/shape_grad.cpp):
//   slice_backward, select_backward  zeros, then the gradient copied into the
//                                    sliced/selected region (any dtype, by element)
//   pad_backward                     per padded axis, sums the gradient of
//                                    every output position onto the input
//                                    position F.pad read it from
//   index_add, scatter_add           base plus src added at the indices
// The accumulating kernels are deterministic: each output element receives
// its contributions in index order on one thread (threads split the
// positions that can never collide), and half types accumulate in float.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_loops.h"
#include "backend/kernel.h"
#include "core/ops/op_helpers.h"

namespace kiln::cpu {
namespace {

using Inputs = std::span<const Tensor>;
using Outputs = std::span<Tensor>;

/// A tensor viewed as [outer, size, inner] around `axis`.
struct AxisSplit {
  int64_t outer = 1, size = 1, inner = 1;
};
AxisSplit splitAt(const Shape& s, int64_t axis) {
  AxisSplit a;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d)
    (d < axis ? a.outer : d == axis ? a.size : a.inner) *= s[d];
  return a;
}

/// Inner elements handled per task by the accumulating kernels (so work on
/// one wide row still spreads over threads).
constexpr int64_t kBlock = 1024;

// ---- slice_backward / select_backward -------------------------------------------

/// o = zeros, then o.data[offset + sum_d idx[d] * o_strides[d]] = g[idx] for
/// every index of g. The region is injective, so threads never collide.
void scatterRegion(Tensor& o, const Tensor& g, int64_t offset, const Shape& o_strides) {
  std::memset(o.raw(), 0, static_cast<size_t>(o.numel()) * dtypeSize(o.dtype()));  // 0 bits are 0 in every dtype
  dispatchAll(o.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dst = o.data<T>() + offset;
    const T* src = g.data<T>();
    forEachStrided<2>(g.shape(), {o_strides, contiguousStrides(g.shape())},
                      [=](const int64_t* off, const int64_t* st, int64_t cnt) {
                        for (int64_t i = 0; i < cnt; ++i) dst[off[0] + i * st[0]] = src[off[1] + i * st[1]];
                      });
  });
}

void sliceBackwardKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const int64_t axis = normalizeAxis(n.i("dim"), o.rank());
  const SliceBounds b = normalizeSlice(o.shape()[axis], n.i("start"), n.i("end"), n.i("step"));
  Shape st = contiguousStrides(o.shape());
  const int64_t offset = b.length > 0 ? b.start * st[axis] : 0;
  st[axis] *= b.step;
  scatterRegion(o, in[0], offset, st);
}

void selectBackwardKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const int64_t axis = normalizeAxis(n.i("dim"), o.rank());
  const int64_t size = o.shape()[axis];
  int64_t idx = n.i("index");
  if (idx < -size || idx >= size)
    opFail(n, "index " + std::to_string(idx) + " is out of range for size " + std::to_string(size));
  if (idx < 0) idx += size;
  Shape st = contiguousStrides(o.shape());
  const int64_t offset = idx * st[axis];
  st.erase(st.begin() + axis);
  scatterRegion(o, in[0], offset, st);
}

// ---- pad_backward ------------------------------------------------------------------

/// For one padded axis: the input coordinate each output coordinate of F.pad
/// reads, or -1 for the fill value. The same map as padMap in kernels_shape.cpp
/// (kept in step by hand: the backward must be the forward's exact adjoint).
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

/// out[k, j, :] = sum over i with map[i] == j of g[k, i, :] (g viewed as
/// [outer, map.size(), inner], out as [outer, size, inner]); i ascending.
template <class T>
void unpadAxis(T* out, const T* g, AxisSplit a, const std::vector<int64_t>& map) {
  const auto len = static_cast<int64_t>(map.size());
  const int64_t blocks = (a.inner + kBlock - 1) / kBlock;
  std::fill(out, out + a.outer * a.size * a.inner, T(0));
  parallelFor(a.outer * blocks,
              std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(len * std::min(a.inner, kBlock), 1)),
              [=, &map](int64_t b, int64_t e) {
                for (int64_t t = b; t < e; ++t) {
                  const int64_t k = t / blocks, c0 = (t % blocks) * kBlock, c1 = std::min(a.inner, c0 + kBlock);
                  for (int64_t i = 0; i < len; ++i) {
                    if (map[i] < 0) continue;
                    T* w = out + (k * a.size + map[i]) * a.inner;
                    const T* r = g + (k * len + i) * a.inner;
                    for (int64_t c = c0; c < c1; ++c) w[c] += r[c];
                  }
                }
              });
}

/// The forward is a separable gather (one map per axis), so its adjoint is
/// one unpadAxis per padded axis. Computes in f64 for f64, f32 otherwise.
void padBackwardKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  const Shape& xs = n.output()->shape();
  const auto& pads = n.is("pads");
  const std::string& mode = n.s("mode");
  const auto rank = static_cast<int64_t>(xs.size());
  const DType ct = in[0].dtype() == DType::F64 ? DType::F64 : DType::F32;
  Tensor cur = asDType(in[0], ct);
  bool fresh = cur.raw() != in[0].raw();
  for (int64_t i = 0; 2 * i + 1 < static_cast<int64_t>(pads.size()); ++i) {
    const int64_t lo = pads[2 * i], hi = pads[2 * i + 1], axis = rank - 1 - i;
    if (lo == 0 && hi == 0) continue;
    std::vector<int64_t> map = padMap(n, mode, xs[axis], lo, hi);
    Shape next_shape = cur.shape();
    next_shape[axis] = xs[axis];
    Tensor next = Tensor::empty({ct, next_shape});
    AxisSplit a = splitAt(next_shape, axis);
    if (ct == DType::F64)
      unpadAxis(next.data<double>(), cur.data<double>(), a, map);
    else
      unpadAxis(next.data<float>(), cur.data<float>(), a, map);
    cur = std::move(next);
    fresh = true;
  }
  if (cur.dtype() != n.output()->dtype()) cur = cur.to(n.output()->dtype());
  out[0] = fresh ? cur : cur.clone();
}

// ---- index_add / scatter_add -------------------------------------------------------

[[noreturn]] void indexOutOfRange(const Node& n, int64_t v, int64_t axis, int64_t size) {
  opFail(n, "index " + std::to_string(v) + " is out of range for dimension " + std::to_string(axis) + " of size " +
                std::to_string(size));
}

/// Adjoint of `index`: base as [outer, size, inner], src as [outer, m, inner]
/// with m = index.numel(); out[k, pos[j], :] += src[k, j, :] for j ascending.
/// Negative indices count from the end, as in the forward.
void indexAddKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  const Tensor &base = in[0], &src = in[2];
  const Tensor idx = asDType(in[1], DType::I64);
  const int64_t axis = normalizeAxis(n.i("dim"), base.rank());
  const AxisSplit a = base.rank() == 0 ? AxisSplit{} : splitAt(base.shape(), axis);
  const int64_t m = idx.numel();
  std::vector<int64_t> pos(static_cast<size_t>(m));
  const int64_t* pi = idx.data<int64_t>();
  for (int64_t j = 0; j < m; ++j) {
    const int64_t v = pi[j];
    if (v < -a.size || v >= a.size) indexOutOfRange(n, v, axis, a.size);
    pos[j] = v < 0 ? v + a.size : v;
  }
  Tensor& o = allocOutput(n, out, 0);
  std::memcpy(o.raw(), base.raw(), static_cast<size_t>(o.numel()) * dtypeSize(o.dtype()));
  dispatchFloating(o.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    T* dst = o.data<T>();
    const T* s = src.data<T>();
    const int64_t* p = pos.data();
    const int64_t blocks = (a.inner + kBlock - 1) / kBlock;
    parallelFor(a.outer * blocks,
                std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(m * std::min(a.inner, kBlock), 1)),
                [=](int64_t b, int64_t e) {
                  for (int64_t t = b; t < e; ++t) {
                    const int64_t k = t / blocks, c0 = (t % blocks) * kBlock, c1 = std::min(a.inner, c0 + kBlock);
                    for (int64_t j = 0; j < m; ++j) {
                      T* w = dst + (k * a.size + p[j]) * a.inner;
                      const T* r = s + (k * m + j) * a.inner;
                      for (int64_t c = c0; c < c1; ++c) w[c] = T(C(w[c]) + C(r[c]));
                    }
                  }
                });
  });
}

/// torch.scatter_add: out = base; out[i with i[dim] = index[i]] += src[i] for
/// every index position i (src may be larger than index: its extra elements
/// are unused). Positions that differ outside `dim` never collide, so the
/// walk runs over the index shape with `dim` collapsed and each run loops
/// over `dim` in order.
/// What scatter_add and scatter_reduce share: the indices checked, base
/// copied to the output, then every contribution src[j] handed, in index
/// order, to `combine(dst, at, value)` (value in the compute type). Threads
/// own distinct output rows: positions that differ outside dim never collide.
template <class Combine>
void scatterWalk(const Node& n, Inputs in, Outputs out, Combine combine) {
  const Tensor &base = in[0], &src = in[2];
  const Tensor idx = asDType(in[1], DType::I64);
  const int64_t axis = normalizeAxis(n.i("dim"), base.rank());
  const int64_t size = base.rank() == 0 ? 1 : base.shape()[axis];
  const int64_t* pi = idx.data<int64_t>();
  for (int64_t j = 0, cnt = idx.numel(); j < cnt; ++j)
    if (pi[j] < 0 || pi[j] >= size) indexOutOfRange(n, pi[j], axis, size);
  Tensor& o = allocOutput(n, out, 0);
  std::memcpy(o.raw(), base.raw(), static_cast<size_t>(o.numel()) * dtypeSize(o.dtype()));
  if (idx.numel() == 0) return;

  Shape walk = idx.shape(), ist = contiguousStrides(idx.shape()), sst = contiguousStrides(src.shape()),
        ost = contiguousStrides(base.shape());
  int64_t m = 1, i_ax = 0, s_ax = 0, o_ax = 0;
  if (base.rank() > 0) {
    m = walk[axis];
    i_ax = ist[axis], s_ax = sst[axis], o_ax = ost[axis];
    walk[axis] = 1;
    ist[axis] = sst[axis] = ost[axis] = 0;
  }
  dispatchFloating(o.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    T* dst = o.data<T>();
    const T* s = src.data<T>();
    forEachStrided<3>(
        walk, {ist, sst, ost},
        [=](const int64_t* off, const int64_t* st, int64_t cnt) {
          for (int64_t i = 0; i < cnt; ++i) {
            const int64_t io = off[0] + i * st[0], so = off[1] + i * st[1], oo = off[2] + i * st[2];
            for (int64_t j = 0; j < m; ++j) combine(dst, oo + pi[io + j * i_ax] * o_ax, C(s[so + j * s_ax]));
          }
        },
        std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(m, 1)));
  });
}

/// scatter_reduce (prod, amax, amin): scatter_add's walk, combining instead
/// of adding; without include_self the first contribution to a position
/// replaces base's value. amax/amin propagate NaN, as PyTorch's do.
void scatterReduceKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  const std::string& reduce = n.s("reduce");
  const int kind = reduce == "prod" ? 0 : reduce == "amax" ? 1 : 2;
  std::vector<uint8_t> seen(n.i("include_self") != 0 ? 0 : static_cast<size_t>(n.output()->type().numel()), 0);
  uint8_t* first = seen.empty() ? nullptr : seen.data();
  scatterWalk(n, in, out, [=](auto* dst, int64_t at, auto v) {
    using T = std::remove_reference_t<decltype(*dst)>;
    using C = decltype(v);
    if (first && !first[at]) {
      first[at] = 1;
      dst[at] = T(v);
      return;
    }
    const C w = C(dst[at]);
    C r;
    if (kind == 0)
      r = w * v;
    else if (std::isnan(static_cast<double>(w)) || std::isnan(static_cast<double>(v)))
      r = std::isnan(static_cast<double>(w)) ? w : v;
    else
      r = kind == 1 ? std::max(w, v) : std::min(w, v);
    dst[at] = T(r);
  });
}

void scatterAddKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  scatterWalk(n, in, out, [](auto* dst, int64_t at, auto v) {
    using T = std::remove_reference_t<decltype(*dst)>;
    dst[at] = T(decltype(v)(dst[at]) + v);
  });
}

void add(KernelRegistry& r, const char* op, KernelFn fn) {
  r.add({op, "cpu", std::string("cpu.") + op, 0, nullptr, fn});
}

}  // namespace
}  // namespace kiln::cpu

namespace kiln {

void registerCpuShapeGradKernels(KernelRegistry& r) {
  using namespace cpu;
  add(r, "slice_backward", sliceBackwardKernel);
  add(r, "select_backward", selectBackwardKernel);
  add(r, "pad_backward", padBackwardKernel);
  add(r, "index_add", indexAddKernel);
  add(r, "scatter_add", scatterAddKernel);
  add(r, "scatter_reduce", scatterReduceKernel);
}

}  // namespace kiln
