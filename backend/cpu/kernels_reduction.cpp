// Reference CPU kernels for the reduction op family (core/ops/reduction.cpp):
// sum, mean, prod, amax, amin, var over a set of dims; argmax/argmin and
// cumsum along one dim.
//
// Reductions over dims never copy the input: its dims are merged into
// alternating kept/reduced runs; a trailing reduced run is reduced row by row
// (contiguous), the rest by accumulating whole contiguous rows of the last
// kept run, so batch-norm style sums over (N, H, W) vectorize too.
// Floating sums accumulate in double (PyTorch's CPU accumulation type for
// cumsum/var; more accurate than its float sum), integer sums in int64; var
// uses Welford's moments in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backend/cpu/cpu_loops.h"
#include "backend/cpu/cpu_math.h"
#include "backend/kernel.h"
#include "core/ops/op_helpers.h"

namespace kiln::cpu {
namespace {

using Inputs = std::span<const Tensor>;
using Outputs = std::span<Tensor>;

/// A run of adjacent input dims that are all kept or all reduced.
struct DimGroup {
  bool reduced;
  int64_t size;
};

/// The input's dims merged into alternating kept / reduced runs; size-1 dims
/// are dropped (they change nothing), size-0 dims kept.
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

/// Partial results are kept per fixed-size block so sums do not depend on the thread count.
constexpr int64_t kBlock = 16384;

/// Reduce one contiguous row. Eight independent accumulators break the
/// dependency chain of the adds and let the lanes map onto vector registers.
template <class Red, class In, class Step>
KILN_SIMD_CLONES typename Red::Acc reduceRow(const In* p, int64_t n, const Red& red, Step step) {
  constexpr int kLanes = 8;
  typename Red::Acc a[kLanes];
  for (int k = 0; k < kLanes; ++k) a[k] = red.init();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) step(a[k], p[i + k]);
  for (; i < n; ++i) step(a[0], p[i]);
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int k = 0; k < w; ++k) red.combine(a[k], a[k + w]);
  return a[0];
}

/// acc[i] = step(acc[i], p[i]) over a row (vectorizes across i).
template <class Acc, class In, class Step>
KILN_SIMD_CLONES void accumulateRow(Acc* acc, const In* p, int64_t n, Step step) {
  for (int64_t i = 0; i < n; ++i) step(acc[i], p[i]);
}

/// Reduce `src` laid out as `groups` whose last group (if any) is kept: for
/// each output row (kept prefix dims) accumulate whole rows of the last group
/// (`inner` contiguous elements, vectorizable) over every reduced prefix index.
/// fin(output index, Acc) stores each result.
template <class Red, class In, class Step, class Fin>
void reduceStrided(const In* src, std::vector<DimGroup> groups, const Red& red, Step step, Fin fin) {
  using Acc = typename Red::Acc;
  int64_t inner = 1;
  if (!groups.empty() && !groups.back().reduced) {
    inner = groups.back().size;
    groups.pop_back();
  }
  // Kept and reduced prefix dims with their element strides, innermost first.
  std::vector<int64_t> ks, kst, rs, rst;
  int64_t stride = inner, out_rows = 1, red_rows = 1;
  for (auto it = groups.rbegin(); it != groups.rend(); ++it) {
    (it->reduced ? rs : ks).push_back(it->size);
    (it->reduced ? rst : kst).push_back(stride);
    (it->reduced ? red_rows : out_rows) *= it->size;
    stride *= it->size;
  }
  constexpr int64_t kInnerBlock = 512;
  const int64_t iblocks = (inner + kInnerBlock - 1) / kInnerBlock;
  const int64_t work = red_rows * std::min(inner, kInnerBlock);
  parallelFor(out_rows * iblocks, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(work, 1)),
              [&](int64_t b, int64_t e) {
                std::vector<Acc> acc(static_cast<size_t>(std::min(inner, kInnerBlock)));
                std::vector<int64_t> idx(rs.size());
                for (int64_t t = b; t < e; ++t) {
                  const int64_t o = t / iblocks, i0 = (t % iblocks) * kInnerBlock;
                  const int64_t n = std::min(kInnerBlock, inner - i0);
                  int64_t base = i0;
                  for (size_t j = 0, rem = o; j < ks.size(); ++j) {
                    base += static_cast<int64_t>(rem % ks[j]) * kst[j];
                    rem /= ks[j];
                  }
                  std::fill(acc.begin(), acc.begin() + n, red.init());
                  std::fill(idx.begin(), idx.end(), 0);
                  int64_t off = 0;
                  for (int64_t k = 0; k < red_rows; ++k) {
                    accumulateRow(acc.data(), src + base + off, n, step);
                    for (size_t j = 0; j < rs.size(); ++j) {  // odometer over the reduced dims
                      off += rst[j];
                      if (++idx[j] < rs[j]) break;
                      off -= rs[j] * rst[j];
                      idx[j] = 0;
                    }
                  }
                  for (int64_t i = 0; i < n; ++i) fin(o * inner + i0 + i, acc[i]);
                }
              });
}

/// Reduce `x` (storage type T) over `axes` into `dst` without copying the
/// input: a trailing reduced run is reduced row by row first (into partial
/// accumulators when more reduced dims remain), the rest by reduceStrided.
/// Red provides Acc, init(), step(Acc&, compute_t<T>), combine(Acc&, const Acc&)
/// and finish(const Acc&, count) -> Out.
template <class T, class Red>
void reduceDims(const Tensor& x, const std::vector<int64_t>& axes, typename Red::Out* dst, const Red& red) {
  using Acc = typename Red::Acc;
  std::vector<DimGroup> g = groupDims(x.shape(), axes);
  int64_t count = 1, out_n = 1;
  for (const DimGroup& d : g) (d.reduced ? count : out_n) *= d.size;
  if (out_n == 0) return;
  auto fin = [&](int64_t o, const Acc& a) { dst[o] = red.finish(a, count); };
  if (count == 0) {
    for (int64_t o = 0; o < out_n; ++o) fin(o, red.init());
    return;
  }
  const T* src = x.data<T>();
  auto step = [&](Acc& a, const T& v) { red.step(a, compute_t<T>(v)); };
  if (g.empty() || !g.back().reduced) {
    reduceStrided(src, g, red, step, fin);
    return;
  }
  const int64_t len = g.back().size, rows = x.numel() / len;
  g.pop_back();
  const bool more = std::any_of(g.begin(), g.end(), [](const DimGroup& d) { return d.reduced; });
  if (rows == 1 && len > 2 * kBlock) {  // one long row: blocks in parallel
    const int64_t blocks = (len + kBlock - 1) / kBlock;
    std::vector<Acc> part(blocks);
    parallelFor(blocks, 2, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k)
        part[k] = reduceRow(src + k * kBlock, std::min(kBlock, len - k * kBlock), red, step);
    });
    for (int64_t k = 1; k < blocks; ++k) red.combine(part[0], part[k]);
    fin(0, part[0]);
    return;
  }
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / len);
  if (!more) {
    parallelFor(rows, grain, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) fin(o, reduceRow(src + o * len, len, red, step));
    });
    return;
  }
  std::vector<Acc> part(rows);
  parallelFor(rows, grain, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) part[o] = reduceRow(src + o * len, len, red, step);
  });
  reduceStrided(
      part.data(), g, red, [&](Acc& a, const Acc& v) { red.combine(a, v); }, fin);
}

template <class T, class OutT>
struct SumRed {
  using Acc = acc_t<T>;
  using Out = OutT;
  Acc init() const { return 0; }
  void step(Acc& a, compute_t<T> x) const { a += static_cast<Acc>(x); }
  void combine(Acc& a, const Acc& b) const { a += b; }
  Out finish(const Acc& a, int64_t) const { return convert<Out>(a); }
};

template <class T>
struct MeanRed : SumRed<T, T> {
  T finish(const double& a, int64_t r) const { return convert<T>(a / static_cast<double>(r)); }
};

template <class T, class OutT>
struct ProdRed {
  using Acc = acc_t<T>;
  using Out = OutT;
  Acc init() const { return 1; }
  void step(Acc& a, compute_t<T> x) const { a *= static_cast<Acc>(x); }
  void combine(Acc& a, const Acc& b) const { a *= b; }
  Out finish(const Acc& a, int64_t) const { return convert<Out>(a); }
};

/// amax / amin: NaN wins (propagates), as torch.amax.
template <class T, bool kMax>
struct ExtremeRed {
  // bool accumulates as uint8_t: std::vector<bool> has no references.
  using C = std::conditional_t<std::is_same_v<T, bool>, uint8_t, compute_t<T>>;
  using Acc = C;
  using Out = T;
  Acc init() const {
    if constexpr (std::is_floating_point_v<C>)
      return kMax ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
    else
      return kMax ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
  }
  void step(Acc& a, C x) const {
    if constexpr (std::is_floating_point_v<C>) {
      a = kMax ? maxNaN(x, a) : minNaN(x, a);  // a NaN, once in, stays
    } else {
      if (kMax ? x > a : x < a) a = x;
    }
  }
  void combine(Acc& a, const Acc& b) const { step(a, b); }
  Out finish(const Acc& a, int64_t) const { return T(a); }
};

/// Welford's running moments (merged with Chan's formula), in double.
struct Moments {
  double n = 0, mean = 0, m2 = 0;
};

/// Variance with `correction` (1: Bessel's): m2 / max(0, count - correction).
template <class T>
struct VarRed {
  using Acc = Moments;
  using Out = T;
  double correction;
  Acc init() const { return {}; }
  void step(Acc& a, compute_t<T> x) const {
    const double v = static_cast<double>(x), d = v - a.mean;
    a.n += 1;
    a.mean += d / a.n;
    a.m2 += d * (v - a.mean);
  }
  void combine(Acc& a, const Acc& b) const {
    if (b.n == 0) return;
    if (a.n == 0) {
      a = b;
      return;
    }
    const double n = a.n + b.n, d = b.mean - a.mean;
    a.mean += d * b.n / n;
    a.m2 += b.m2 + d * d * a.n * b.n / n;
    a.n = n;
  }
  Out finish(const Acc& a, int64_t count) const {
    return convert<T>(a.m2 / std::max(0.0, static_cast<double>(count) - correction));
  }
};

/// sum, mean, prod, amax, amin, var over `dims` (empty = all).
template <int kKind>  // 0 sum, 1 mean, 2 prod, 3 amax, 4 amin, 5 var
void reduceKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const Tensor& x = in[0];
  const std::vector<int64_t> axes = reductionAxes(n, n.is("dims"), x.rank());
  if constexpr (kKind == 3 || kKind == 4) {
    for (int64_t a : axes)
      if (x.shape()[a] == 0 && o.numel() > 0)
        opFail(n, "cannot reduce over a dimension of size 0 (amax/amin have no identity)");
  }
  auto body = [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kKind == 0 || kKind == 2) {
      // Floating sums keep their dtype; integer and bool sums give int64.
      using Out = std::conditional_t<is_floating_v<T>, T, int64_t>;
      using Red = std::conditional_t<kKind == 0, SumRed<T, Out>, ProdRed<T, Out>>;
      reduceDims<T>(x, axes, o.data<Out>(), Red{});
    } else if constexpr (kKind == 1) {
      reduceDims<T>(x, axes, o.data<T>(), MeanRed<T>{});
    } else if constexpr (kKind == 5) {
      reduceDims<T>(x, axes, o.data<T>(), VarRed<T>{n.f("correction")});
    } else {
      reduceDims<T>(x, axes, o.data<T>(), ExtremeRed<T, kKind == 3>{});
    }
  };
  if constexpr (kKind == 1 || kKind == 5)
    dispatchFloating(x.dtype(), body);
  else
    dispatchAll(x.dtype(), body);
}

/// The shape around one axis as [outer, size, inner] (a scalar is [1, 1, 1]).
struct AxisSplit {
  int64_t outer = 1, size = 1, inner = 1;
};
AxisSplit splitAt(const Tensor& x, int64_t axis) {
  AxisSplit a;
  for (int64_t d = 0; d < x.rank(); ++d) (d < axis ? a.outer : d > axis ? a.inner : a.size) *= x.shape()[d];
  return a;
}

/// argmax/argmin along `dim`: the first index of the extreme; a NaN counts as
/// the extreme (the first NaN wins), as in PyTorch.
template <bool kMax>
void argKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const Tensor& x = in[0];
  const int64_t axis = normalizeAxis(n.i("dim"), x.rank());
  const AxisSplit l = splitAt(x, axis);
  if (l.size == 0 && o.numel() > 0) opFail(n, "cannot take the arg-extreme of an empty dimension");
  int64_t* dst = o.data<int64_t>();
  dispatchAll(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* src = x.data<T>();
    const int64_t r = l.size, inner = l.inner;
    parallelFor(l.outer * inner, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(r, 1)),
                [&](int64_t b, int64_t e) {
                  for (int64_t t = b; t < e; ++t) {
                    const T* p = src + (t / inner) * r * inner + t % inner;
                    int64_t best = 0;
                    C bv = C(p[0]);
                    for (int64_t k = 1; k < r; ++k) {
                      if constexpr (std::is_floating_point_v<C>)
                        if (std::isnan(bv)) break;
                      const C v = C(p[k * inner]);
                      bool better;
                      if constexpr (std::is_floating_point_v<C>)
                        better = std::isnan(v) || (kMax ? v > bv : v < bv);
                      else
                        better = kMax ? v > bv : v < bv;
                      if (better) best = k, bv = v;
                    }
                    dst[t] = best;
                  }
                });
  });
}

/// Inclusive prefix sum along `dim`, accumulated in double / int64 and stored
/// after every step (PyTorch's CPU cumsum does the same).
void cumsumKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const Tensor& x = in[0];
  const int64_t axis = normalizeAxis(n.i("dim"), x.rank());
  const auto [outer, r, inner] = splitAt(x, axis);
  dispatchAll(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Out = std::conditional_t<is_floating_v<T>, T, int64_t>;
    using Acc = acc_t<T>;
    const T* src = x.data<T>();
    Out* dst = o.data<Out>();
    parallelFor(outer * inner, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(r, 1)),
                [&](int64_t b, int64_t e) {
                  for (int64_t t = b; t < e; ++t) {
                    const int64_t base = (t / inner) * r * inner + t % inner;
                    Acc acc = 0;
                    for (int64_t k = 0; k < r; ++k) {
                      acc += static_cast<Acc>(compute_t<T>(src[base + k * inner]));
                      dst[base + k * inner] = convert<Out>(acc);
                    }
                  }
                });
  });
}

void add(KernelRegistry& reg, const char* op, KernelFn fn) {
  reg.add({op, "cpu_ref", std::string("cpu_ref.") + op, 0, nullptr, fn});
}

}  // namespace
}  // namespace kiln::cpu

namespace kiln {

void registerCpuReductionKernels(KernelRegistry& r) {
  using namespace cpu;
  add(r, "sum", reduceKernel<0>);
  add(r, "mean", reduceKernel<1>);
  add(r, "prod", reduceKernel<2>);
  add(r, "amax", reduceKernel<3>);
  add(r, "amin", reduceKernel<4>);
  add(r, "var", reduceKernel<5>);
  add(r, "argmax", argKernel<true>);
  add(r, "argmin", argKernel<false>);
  add(r, "cumsum", cumsumKernel);
}

}  // namespace kiln
