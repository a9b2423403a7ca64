// The loops of the CPU reductions over dims (sum, mean, prod, amax, amin,
// var), shared by the one-op kernels (kernels_reduction.cpp) and the fused
// reduction kernel (kernels_fused.cpp).
//
// The input is never copied: its dims are merged into alternating
// kept/reduced runs; a trailing reduced run is reduced row by row
// (contiguous), the rest by accumulating whole contiguous rows of the last
// kept run, so batch-norm style sums over (N, H, W) vectorize too. Floating
// sums accumulate in double (PyTorch's CPU accumulation type for
// cumsum/var; more accurate than its float sum), integer sums in int64; var
// uses Welford's moments in double.
//
// The loops read through a Source: a tensor's buffer (BufferSource), or
// values a fused kernel computes on demand. The order in which elements are
// combined depends only on the shape and the axes, never on the source or
// the thread count, so every source gives the same bits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_loops.h"
#include "backend/cpu/cpu_math.h"
#include "core/ops/op_helpers.h"

namespace kiln::cpu {

/// Reads `Value`s at flat indices of the (contiguous) reduction input. One
/// cursor per thread: rows(off, n) returns n consecutive values from flat
/// index off, for n up to chunk() (a multiple of 8, at least 512).
template <class T>
struct BufferSource {
  using Value = T;
  const T* p;
  int64_t chunk() const { return std::numeric_limits<int64_t>::max() & ~int64_t{7}; }
  struct Cursor {
    const T* p;
    const T* rows(int64_t off, int64_t) const { return p + off; }
  };
  Cursor cursor() const { return {p}; }
};

/// Partial results are kept per fixed-size block so sums do not depend on the thread count.
constexpr int64_t kReduceBlock = 16384;
/// Rows of the last kept run are accumulated this many elements at a time.
constexpr int64_t kReduceInnerBlock = 512;
/// Eight independent accumulators per row.
constexpr int kReduceLanes = 8;

/// Lane k takes elements k, k + 8, k + 16, ... of p[0, n), n a multiple of 8.
/// Eight independent accumulators break the dependency chain of the adds and
/// let the lanes map onto vector registers.
template <class Acc, class In, class Step>
KILN_SIMD_CLONES void reduceLanes(Acc* lanes, const In* p, int64_t n, Step step) {
  Acc a[kReduceLanes];
  for (int k = 0; k < kReduceLanes; ++k) a[k] = lanes[k];
  for (int64_t i = 0; i < n; i += kReduceLanes)
    for (int k = 0; k < kReduceLanes; ++k) step(a[k], p[i + k]);
  for (int k = 0; k < kReduceLanes; ++k) lanes[k] = a[k];
}

/// Reduce the n values from flat index off, pulled from the cursor in chunks
/// that are multiples of 8, so each element meets the same lane as in one
/// pass; the ragged tail goes to lane 0, then the lanes combine pairwise.
template <class Red, class Cursor, class Step>
typename Red::Acc reduceRow(Cursor& cur, int64_t off, int64_t n, int64_t chunk, const Red& red, Step step) {
  typename Red::Acc a[kReduceLanes];
  for (int k = 0; k < kReduceLanes; ++k) a[k] = red.init();
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t m = std::min(chunk, n - i), whole = m & ~int64_t{kReduceLanes - 1};
    const auto* p = cur.rows(off + i, m);
    reduceLanes(a, p, whole, step);
    for (int64_t j = whole; j < m; ++j) step(a[0], p[j]);  // only in the last chunk
  }
  for (int w = kReduceLanes / 2; w > 0; w /= 2)
    for (int k = 0; k < w; ++k) red.combine(a[k], a[k + w]);
  return a[0];
}

/// acc[i] = step(acc[i], p[i]) over a row (vectorizes across i).
template <class Acc, class In, class Step>
KILN_SIMD_CLONES_512 void accumulateRow(Acc* acc, const In* p, int64_t n, Step step) {
  for (int64_t i = 0; i < n; ++i) step(acc[i], p[i]);
}

/// Below this many (kept row, inner block) tasks, reduceStrided also splits
/// the reduced rows (a bias gradient's [tokens, C] -> [C] has one task per
/// 512 columns: one thread at C <= 512).
constexpr int64_t kMinStridedTasks = 8;

/// Reduce `src` laid out as `groups` whose last group (if any) is kept: for
/// each output row (kept prefix dims) accumulate whole rows of the last group
/// (`inner` contiguous elements, vectorizable) over every reduced prefix index.
/// With few output rows the reduced rows are cut into chunks of a fixed
/// number of rows (from the shape, never the thread count), each summed into
/// its own partial accumulators, which then combine in chunk order.
/// fin(output index, Acc) stores each result.
template <class Red, class Source, class Step, class Fin>
void reduceStrided(const Source& src, std::vector<DimGroup> groups, const Red& red, Step step, Fin fin) {
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
  const int64_t iblocks = (inner + kReduceInnerBlock - 1) / kReduceInnerBlock;
  const int64_t width = std::min(inner, kReduceInnerBlock), tasks = out_rows * iblocks;
  const int64_t chunk_rows = std::max<int64_t>(1, kReduceBlock / std::max<int64_t>(width, 1));
  const int64_t chunks = tasks < kMinStridedTasks ? std::max<int64_t>(1, (red_rows + chunk_rows - 1) / chunk_rows) : 1;
  const int64_t rows_per = chunks > 1 ? chunk_rows : red_rows;
  // Chunk partials (only with chunks > 1): [tasks, chunks, width].
  std::vector<Acc> part(chunks > 1 ? static_cast<size_t>(tasks * chunks * width) : 0);
  const int64_t work = rows_per * width;
  parallelFor(tasks * chunks, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(work, 1)),
              [&](int64_t b, int64_t e) {
                auto cur = src.cursor();
                std::vector<Acc> own(chunks > 1 ? 0 : static_cast<size_t>(width));
                std::vector<int64_t> idx(rs.size());
                for (int64_t u = b; u < e; ++u) {
                  const int64_t t = u / chunks, c = u % chunks;
                  const int64_t o = t / iblocks, i0 = (t % iblocks) * kReduceInnerBlock;
                  const int64_t n = std::min(kReduceInnerBlock, inner - i0);
                  int64_t base = i0;
                  for (size_t j = 0, rem = o; j < ks.size(); ++j) {
                    base += static_cast<int64_t>(rem % ks[j]) * kst[j];
                    rem /= ks[j];
                  }
                  Acc* acc = chunks > 1 ? part.data() + u * width : own.data();
                  std::fill(acc, acc + n, red.init());
                  // The odometer over the reduced dims, started at row k0.
                  const int64_t k0 = c * rows_per, k1 = std::min(red_rows, k0 + rows_per);
                  int64_t off = 0;
                  for (size_t j = 0, rem = k0; j < rs.size(); ++j) {
                    idx[j] = static_cast<int64_t>(rem % rs[j]);
                    off += idx[j] * rst[j];
                    rem /= rs[j];
                  }
                  for (int64_t k = k0; k < k1; ++k) {
                    accumulateRow(acc, cur.rows(base + off, n), n, step);
                    for (size_t j = 0; j < rs.size(); ++j) {
                      off += rst[j];
                      if (++idx[j] < rs[j]) break;
                      off -= rs[j] * rst[j];
                      idx[j] = 0;
                    }
                  }
                  if (chunks == 1)
                    for (int64_t i = 0; i < n; ++i) fin(o * inner + i0 + i, acc[i]);
                }
              });
  if (chunks == 1) return;
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t o = t / iblocks, i0 = (t % iblocks) * kReduceInnerBlock;
    const int64_t n = std::min(kReduceInnerBlock, inner - i0);
    Acc* first = part.data() + t * chunks * width;
    for (int64_t c = 1; c < chunks; ++c)
      for (int64_t i = 0; i < n; ++i) red.combine(first[i], first[c * width + i]);
    for (int64_t i = 0; i < n; ++i) fin(o * inner + i0 + i, first[i]);
  }
}

/// Reduce the input of `shape` read through `src` over `axes` into `dst`: a
/// trailing reduced run is reduced row by row first (into partial
/// accumulators when more reduced dims remain), the rest by reduceStrided.
/// Every input element is read exactly once. Red provides Acc, init(),
/// step(Acc&, compute_t<T>), combine(Acc&, const Acc&) and
/// finish(const Acc&, count) -> Out.
template <class Source, class Red>
void reduceDims(const Source& src, const Shape& shape, const std::vector<int64_t>& axes, typename Red::Out* dst,
                const Red& red) {
  using T = typename Source::Value;
  using Acc = typename Red::Acc;
  std::vector<DimGroup> g = groupDims(shape, axes);
  int64_t count = 1, out_n = 1;
  for (const DimGroup& d : g) (d.reduced ? count : out_n) *= d.size;
  if (out_n == 0) return;
  auto fin = [&](int64_t o, const Acc& a) { dst[o] = red.finish(a, count); };
  if (count == 0) {
    for (int64_t o = 0; o < out_n; ++o) fin(o, red.init());
    return;
  }
  auto step = [&](Acc& a, const T& v) { red.step(a, compute_t<T>(v)); };
  if (g.empty() || !g.back().reduced) {
    reduceStrided(src, g, red, step, fin);
    return;
  }
  const int64_t len = g.back().size, rows = out_n * count / len, chunk = src.chunk();
  g.pop_back();
  const bool more = std::any_of(g.begin(), g.end(), [](const DimGroup& d) { return d.reduced; });
  if (rows == 1 && len > 2 * kReduceBlock) {  // one long row: blocks in parallel
    const int64_t blocks = (len + kReduceBlock - 1) / kReduceBlock;
    std::vector<Acc> part(blocks);
    parallelFor(blocks, 2, [&](int64_t b, int64_t e) {
      auto cur = src.cursor();
      for (int64_t k = b; k < e; ++k)
        part[k] = reduceRow(cur, k * kReduceBlock, std::min(kReduceBlock, len - k * kReduceBlock), chunk, red, step);
    });
    for (int64_t k = 1; k < blocks; ++k) red.combine(part[0], part[k]);
    fin(0, part[0]);
    return;
  }
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / len);
  if (!more) {
    parallelFor(rows, grain, [&](int64_t b, int64_t e) {
      auto cur = src.cursor();
      for (int64_t o = b; o < e; ++o) fin(o, reduceRow(cur, o * len, len, chunk, red, step));
    });
    return;
  }
  std::vector<Acc> part(rows);
  parallelFor(rows, grain, [&](int64_t b, int64_t e) {
    auto cur = src.cursor();
    for (int64_t o = b; o < e; ++o) part[o] = reduceRow(cur, o * len, len, chunk, red, step);
  });
  reduceStrided(
      BufferSource<Acc>{part.data()}, g, red, [&](Acc& a, const Acc& v) { red.combine(a, v); }, fin);
}

// The reductions (Red of reduceDims).

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

}  // namespace kiln::cpu
