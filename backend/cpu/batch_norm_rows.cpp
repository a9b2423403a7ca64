#include "backend/cpu/batch_norm_rows.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backend/cpu/cpu_loops.h"

namespace kiln::cpu {

namespace {

/// Rows per block: about 32K elements, at least 16 rows.
int64_t rowBlock(int64_t channels) {
  return std::max<int64_t>(16, 32768 / std::max<int64_t>(channels, 1));
}

/// Calls body(r0, r1, partial) for each block of rows, blocks in parallel,
/// with `partial` nsums * channels zeroed doubles of its own; returns the
/// partials added in block order.
template <class Body>
std::vector<double> sumOverRowBlocks(int64_t rows, int64_t channels, int64_t nsums, Body body) {
  const int64_t block = rowBlock(channels), width = nsums * channels;
  const int64_t blocks = (rows + block - 1) / block;
  std::vector<double> partial(static_cast<size_t>(blocks * width), 0.0);
#pragma omp parallel for if (rows * channels > kOmpMinWork)
  for (int64_t b = 0; b < blocks; ++b) body(b * block, std::min(rows, (b + 1) * block), partial.data() + b * width);
  std::vector<double> out(static_cast<size_t>(width), 0.0);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t i = 0; i < width; ++i) out[i] += partial[b * width + i];
  return out;
}

/// The type one block's sums run in: float for bf16 (a block holds at most
/// 32768 / C rows, far inside bf16's precision, and the loop stays in float
/// vectors), double otherwise; blocks always combine in double.
template <class X>
using block_acc_t = std::conditional_t<std::is_same_v<X, BFloat16>, float, double>;

template <class X>
block_acc_t<X> wide(X v) {
  return static_cast<block_acc_t<X>>(static_cast<compute_t<X>>(v));
}

// The loops over a block of rows, vectorized across channels. Free
// functions (target_clones cannot go on the lambdas above), with an
// AVX-512 clone: each channel's sum still runs down the rows in order, so
// every clone gives the same bits.

template <class X, class A>
KILN_SIMD_CLONES_512 void addRows(const X* x, int64_t r0, int64_t r1, int64_t channels, A* acc) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = 0; c < channels; ++c) acc[c] += wide(x[r * channels + c]);
}

template <class X, class A>
KILN_SIMD_CLONES_512 void addSquaredDeviations(const X* x, int64_t r0, int64_t r1, int64_t channels, const A* m,
                                               A* acc) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = 0; c < channels; ++c) {
      const A d = wide(x[r * channels + c]) - m[c];
      acc[c] += d * d;
    }
}

/// acc[0, C) += g, acc[C, 2C) += g (x - m).
template <class X, class A>
KILN_SIMD_CLONES_512 void addGradSums(const X* g, const X* x, int64_t r0, int64_t r1, int64_t channels, const A* m,
                                      A* acc) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = 0; c < channels; ++c) {
      const A gv = wide(g[r * channels + c]);
      acc[c] += gv;
      acc[channels + c] += gv * (wide(x[r * channels + c]) - m[c]);
    }
}

template <class X, class C>
KILN_SIMD_CLONES_512 void affineRow(const X* x, X* y, int64_t channels, const C* scale, const C* shift) {
  for (int64_t c = 0; c < channels; ++c) y[c] = static_cast<X>(static_cast<C>(x[c]) * scale[c] + shift[c]);
}

template <class X, class C>
KILN_SIMD_CLONES_512 void normGradRow(const X* g, const X* x, X* gx, int64_t channels, const C* grad_mean,
                                      const C* mean, const C* k, const C* scale) {
  for (int64_t c = 0; c < channels; ++c)
    gx[c] = static_cast<X>((C(g[c]) - grad_mean[c] - (C(x[c]) - mean[c]) * k[c]) * scale[c]);
}

/// Runs add(acc) on a zeroed block accumulator of `n` sums in block_acc_t<X>
/// and adds it into `out`.
template <class X, class Add>
void blockSums(int64_t n, double* out, Add add) {
  std::vector<block_acc_t<X>> acc(static_cast<size_t>(n), 0);
  add(acc.data());
  for (int64_t i = 0; i < n; ++i) out[i] += acc[i];
}

}  // namespace

template <class X>
void rowsMoments(const X* x, int64_t rows, int64_t channels, std::vector<double>& mean, std::vector<double>& var) {
  const double count = static_cast<double>(rows);
  mean = sumOverRowBlocks(rows, channels, 1, [&](int64_t r0, int64_t r1, double* out) {
    blockSums<X>(channels, out, [&](auto* acc) { addRows(x, r0, r1, channels, acc); });
  });
  for (double& m : mean) m = rows ? m / count : 0.0;
  using A = block_acc_t<X>;
  const std::vector<A> m(mean.begin(), mean.end());
  var = sumOverRowBlocks(rows, channels, 1, [&](int64_t r0, int64_t r1, double* out) {
    blockSums<X>(channels, out, [&](A* acc) { addSquaredDeviations(x, r0, r1, channels, m.data(), acc); });
  });
  // Deviations were taken from the mean rounded to A: correct for the offset.
  for (int64_t c = 0; c < channels; ++c) {
    const double off = mean[c] - static_cast<double>(m[c]);
    var[c] = rows ? std::max(0.0, var[c] / count - off * off) : std::nan("");
  }
}

template <class X, class C>
void rowsAffine(const X* x, X* y, int64_t rows, int64_t channels, const C* scale, const C* shift) {
#pragma omp parallel for if (rows * channels > kOmpMinWork)
  for (int64_t r = 0; r < rows; ++r) affineRow(x + r * channels, y + r * channels, channels, scale, shift);
}

template <class X>
void rowsGradSums(const X* g, const X* x, int64_t rows, int64_t channels, const std::vector<double>& mean,
                  std::vector<double>& sum_g, std::vector<double>& dot) {
  // One pass for both: sums [0, C) hold sum g, [C, 2C) sum g (x - mean).
  using A = block_acc_t<X>;
  const std::vector<A> m(mean.begin(), mean.end());
  std::vector<double> both = sumOverRowBlocks(rows, channels, 2, [&](int64_t r0, int64_t r1, double* out) {
    blockSums<X>(2 * channels, out, [&](A* acc) { addGradSums(g, x, r0, r1, channels, m.data(), acc); });
  });
  sum_g.assign(both.begin(), both.begin() + channels);
  dot.assign(both.begin() + channels, both.end());
  // Products were taken against the mean rounded to A: sum g (x - mean) = sum g (x - m) - (mean - m) sum g.
  for (int64_t c = 0; c < channels; ++c) dot[c] -= (mean[c] - static_cast<double>(m[c])) * sum_g[c];
}

template <class X, class C>
void rowsNormGrad(const X* g, const X* x, X* gx, int64_t rows, int64_t channels, const C* grad_mean, const C* mean,
                  const C* k, const C* scale) {
#pragma omp parallel for if (rows * channels > kOmpMinWork)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = r * channels;
    normGradRow(g + i, x + i, gx + i, channels, grad_mean, mean, k, scale);
  }
}

#define KILN_BATCH_NORM_ROWS(X)                                                                                        \
  template void rowsMoments<X>(const X*, int64_t, int64_t, std::vector<double>&, std::vector<double>&);                \
  template void rowsAffine<X, compute_t<X>>(const X*, X*, int64_t, int64_t, const compute_t<X>*, const compute_t<X>*); \
  template void rowsGradSums<X>(const X*, const X*, int64_t, int64_t, const std::vector<double>&,                      \
                                std::vector<double>&, std::vector<double>&);                                           \
  template void rowsNormGrad<X, compute_t<X>>(const X*, const X*, X*, int64_t, int64_t, const compute_t<X>*,           \
                                              const compute_t<X>*, const compute_t<X>*, const compute_t<X>*);
KILN_BATCH_NORM_ROWS(float)
KILN_BATCH_NORM_ROWS(double)
KILN_BATCH_NORM_ROWS(BFloat16)
#undef KILN_BATCH_NORM_ROWS

}  // namespace kiln::cpu
