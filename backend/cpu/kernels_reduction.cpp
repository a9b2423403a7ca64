// Reference CPU kernels for the reduction op family (core/ops/reduction.cpp):
// sum, mean, prod, amax, amin, var over a set of dims; argmax/argmin and
// cumsum along one dim.
//
// Every reduction is brought to the layout [outer, R, inner] (R reduced,
// contiguous in memory): reduced dims that form one block in memory are used
// in place, otherwise the input is first permuted into [kept..., reduced...].
// Floating sums accumulate in double (PyTorch's CPU accumulation type for
// cumsum/var; more accurate than its float sum), integer sums in int64.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backend/cpu/cpu_loops.h"
#include "backend/kernel.h"
#include "core/ops/op_helpers.h"

namespace kiln::cpu {
namespace {

using Inputs = std::span<const Tensor>;
using Outputs = std::span<Tensor>;

/// A reduction's input viewed as [outer, r, inner].
struct ReduceLayout {
  Tensor src;
  int64_t outer = 1, r = 1, inner = 1;
};

ReduceLayout reduceLayout(const Tensor& x, const std::vector<int64_t>& axes) {
  const Shape& s = x.shape();
  auto reduced = [&](int64_t d) { return std::find(axes.begin(), axes.end(), d) != axes.end(); };
  // Group non-trivial dims into runs of kept / reduced dims.
  std::vector<std::pair<bool, int64_t>> groups;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (s[d] == 1) continue;
    bool red = reduced(d);
    if (!groups.empty() && groups.back().first == red) groups.back().second *= s[d];
    else groups.push_back({red, s[d]});
  }
  ReduceLayout l;
  l.src = x;
  int64_t red_groups = std::count_if(groups.begin(), groups.end(), [](auto& g) { return g.first; });
  if (red_groups <= 1) {
    bool seen = false;
    for (auto& [red, size] : groups) {
      if (red) l.r = size, seen = true;
      else (seen ? l.inner : l.outer) *= size;
    }
    return l;
  }
  // Several separate reduced blocks: move them all to the end.
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < x.rank(); ++d)
    if (!reduced(d)) perm.push_back(d), l.outer *= s[d];
  for (int64_t d = 0; d < x.rank(); ++d)
    if (reduced(d)) perm.push_back(d), l.r *= s[d];
  l.src = permuteCopy(x, perm);
  return l;
}

/// Partial sums are kept per fixed-size block of R so results do not depend on
/// the thread count.
constexpr int64_t kBlock = 16384;

/// Reduce [outer, r, inner] to [outer, inner]: Red provides Acc, init(),
/// step(Acc&, C), combine(Acc&, const Acc&) and finish(const Acc&, r) -> Out.
template <class T, class Red>
void reduceLoop(const ReduceLayout& l, typename Red::Out* dst, const Red& red) {
  using C = compute_t<T>;
  using Acc = typename Red::Acc;
  const T* src = l.src.data<T>();
  const int64_t outer = l.outer, r = l.r, inner = l.inner;
  if (outer * inner == 0) return;
  if (inner == 1) {
    // Contiguous rows. Four independent accumulators break the dependency chain.
    auto row = [&](const T* p, int64_t n) {
      Acc a[4] = {red.init(), red.init(), red.init(), red.init()};
      int64_t i = 0;
      for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; ++k) red.step(a[k], C(p[i + k]));
      for (; i < n; ++i) red.step(a[0], C(p[i]));
      red.combine(a[0], a[1]);
      red.combine(a[2], a[3]);
      red.combine(a[0], a[2]);
      return a[0];
    };
    if (outer == 1 && r > 2 * kBlock) {
      const int64_t blocks = (r + kBlock - 1) / kBlock;
      std::vector<Acc> part(blocks);
      parallelFor(blocks, 2, [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) part[k] = row(src + k * kBlock, std::min(kBlock, r - k * kBlock));
      });
      for (int64_t k = 1; k < blocks; ++k) red.combine(part[0], part[k]);
      dst[0] = red.finish(part[0], r);
      return;
    }
    parallelFor(outer, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(r, 1)), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) dst[o] = red.finish(row(src + o * r, r), r);
    });
    return;
  }
  // Strided: accumulate whole rows of `inner` at once (vectorizable over i),
  // in tasks of (outer index, block of inner).
  constexpr int64_t kInnerBlock = 512;
  const int64_t iblocks = (inner + kInnerBlock - 1) / kInnerBlock;
  const int64_t work = r * std::min(inner, kInnerBlock);
  parallelFor(outer * iblocks, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(work, 1)),
              [&](int64_t b, int64_t e) {
                std::vector<Acc> acc(kInnerBlock);
                for (int64_t t = b; t < e; ++t) {
                  const int64_t o = t / iblocks, i0 = (t % iblocks) * kInnerBlock;
                  const int64_t n = std::min(kInnerBlock, inner - i0);
                  std::fill(acc.begin(), acc.begin() + n, red.init());
                  for (int64_t k = 0; k < r; ++k) {
                    const T* p = src + (o * r + k) * inner + i0;
                    for (int64_t i = 0; i < n; ++i) red.step(acc[i], C(p[i]));
                  }
                  for (int64_t i = 0; i < n; ++i) dst[o * inner + i0 + i] = red.finish(acc[i], r);
                }
              });
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
    else return kMax ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
  }
  void step(Acc& a, C x) const {
    if constexpr (std::is_floating_point_v<C>) {
      a = (kMax ? x > a : x < a) || std::isnan(x) ? x : a;  // a NaN, once in, stays
    } else {
      if (kMax ? x > a : x < a) a = x;
    }
  }
  void combine(Acc& a, const Acc& b) const { step(a, b); }
  Out finish(const Acc& a, int64_t) const { return T(a); }
};

/// sum, mean, prod, amax, amin over `dims` (empty = all).
template <int kKind>  // 0 sum, 1 mean, 2 prod, 3 amax, 4 amin
void reduceKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const Tensor& x = in[0];
  const ReduceLayout l = reduceLayout(x, reductionAxes(n, n.is("dims"), x.rank()));
  if constexpr (kKind >= 3) {
    if (l.r == 0 && o.numel() > 0)
      opFail(n, "cannot reduce over a dimension of size 0 (amax/amin have no identity)");
  }
  auto body = [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kKind == 0 || kKind == 2) {
      // Floating sums keep their dtype; integer and bool sums give int64.
      using Out = std::conditional_t<is_floating_v<T>, T, int64_t>;
      using Red = std::conditional_t<kKind == 0, SumRed<T, Out>, ProdRed<T, Out>>;
      reduceLoop<T>(l, o.data<Out>(), Red{});
    } else if constexpr (kKind == 1) {
      if constexpr (is_floating_v<T>) reduceLoop<T>(l, o.data<T>(), MeanRed<T>{});
    } else {
      reduceLoop<T>(l, o.data<T>(), ExtremeRed<T, kKind == 3>{});
    }
  };
  if constexpr (kKind == 1) dispatchFloating(x.dtype(), body);
  else dispatchAll(x.dtype(), body);
}

/// Variance with `correction` (1: Bessel's). Two passes in double: the mean,
/// then the sum of squared deviations, divided by max(0, R - correction).
void varKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const Tensor& x = in[0];
  const ReduceLayout l = reduceLayout(x, reductionAxes(n, n.is("dims"), x.rank()));
  const double denom = std::max(0.0, static_cast<double>(l.r) - n.f("correction"));
  dispatchFloating(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = l.src.data<T>();
    T* dst = o.data<T>();
    const int64_t r = l.r, inner = l.inner;
    parallelFor(l.outer * inner, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(2 * r, 1)),
                [&](int64_t b, int64_t e) {
                  for (int64_t t = b; t < e; ++t) {
                    const T* p = src + (t / inner) * r * inner + t % inner;
                    double mean = 0, ss = 0;
                    for (int64_t k = 0; k < r; ++k) mean += static_cast<double>(compute_t<T>(p[k * inner]));
                    mean /= static_cast<double>(r);
                    for (int64_t k = 0; k < r; ++k) {
                      double d = static_cast<double>(compute_t<T>(p[k * inner])) - mean;
                      ss += d * d;
                    }
                    dst[t] = convert<T>(ss / denom);
                  }
                });
  });
}

/// argmax/argmin along `dim`: the first index of the extreme; a NaN counts as
/// the extreme (the first NaN wins), as in PyTorch.
template <bool kMax>
void argKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const Tensor& x = in[0];
  const int64_t axis = normalizeAxis(n.i("dim"), x.rank());
  const ReduceLayout l = reduceLayout(x, x.rank() == 0 ? std::vector<int64_t>{} : std::vector<int64_t>{axis});
  if (l.r == 0 && o.numel() > 0) opFail(n, "cannot take the arg-extreme of an empty dimension");
  int64_t* dst = o.data<int64_t>();
  dispatchAll(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* src = l.src.data<T>();
    const int64_t r = l.r, inner = l.inner;
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
                      if constexpr (std::is_floating_point_v<C>) better = std::isnan(v) || (kMax ? v > bv : v < bv);
                      else better = kMax ? v > bv : v < bv;
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
  int64_t outer = 1, r = x.rank() == 0 ? 1 : x.shape()[axis], inner = 1;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (d < axis) outer *= x.shape()[d];
    if (d > axis) inner *= x.shape()[d];
  }
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
  add(r, "var", varKernel);
  add(r, "argmax", argKernel<true>);
  add(r, "argmin", argKernel<false>);
  add(r, "cumsum", cumsumKernel);
}

}  // namespace kiln
