// Reference CPU kernels for the reduction op family (core/ops/reduction.cpp):
// sum, mean, prod, amax, amin, var over a set of dims; argmax/argmin and
// cumsum along one dim.
//
// Reductions over dims run the loops of reduce_loops.h on the input buffer
// (no copy); the fused kernels run the same loops on values they compute,
// so a fused sum is bit for bit the unfused one.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backend/cpu/cpu_loops.h"
#include "backend/cpu/cpu_math.h"
#include "backend/cpu/reduce_loops.h"
#include "backend/cpu/topk_ties.h"
#include "backend/kernel.h"
#include "core/ops/op_helpers.h"

namespace kiln::cpu {
namespace {

using Inputs = std::span<const Tensor>;
using Outputs = std::span<Tensor>;

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
      reduceDims(BufferSource<T>{x.data<T>()}, x.shape(), axes, o.data<Out>(), Red{});
    } else if constexpr (kKind == 1) {
      reduceDims(BufferSource<T>{x.data<T>()}, x.shape(), axes, o.data<T>(), MeanRed<T>{});
    } else if constexpr (kKind == 5) {
      reduceDims(BufferSource<T>{x.data<T>()}, x.shape(), axes, o.data<T>(), VarRed<T>{n.f("correction")});
    } else {
      reduceDims(BufferSource<T>{x.data<T>()}, x.shape(), axes, o.data<T>(), ExtremeRed<T, kKind == 3>{});
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

/// The first index of the extreme of a contiguous floating row, or of its
/// first NaN, in 16 lanes that each keep their own first extreme (a lane's
/// indices only grow), combined at the end: branch-free, so the loop
/// vectorizes (the scalar loop took 17 ms over a GPT-2 step's [1024, 32000]
/// logits). Rows of at most INT32_MAX elements.
template <bool kMax, typename T>
KILN_SIMD_CLONES int64_t rowArgExtreme(const T* p, int64_t r) {
  using C = compute_t<T>;
  constexpr int kL = 16;
  C bv[kL];
  int32_t bi[kL];
  for (int j = 0; j < kL; ++j) bv[j] = C(p[j]), bi[j] = j;
  auto take = [&](int j, int64_t k) {
    const C v = C(p[k]);
    const bool better = (kMax ? v > bv[j] : v < bv[j]) || (v != v && bv[j] == bv[j]);
    bv[j] = better ? v : bv[j];
    bi[j] = better ? static_cast<int32_t>(k) : bi[j];
  };
  int64_t k = kL;
  for (; k + kL <= r; k += kL)
    for (int j = 0; j < kL; ++j) take(j, k + j);
  for (int j = 0; k + j < r; ++j) take(j, k + j);
  int best = 0;
  for (int j = 1; j < kL; ++j) {
    const bool nan_j = bv[j] != bv[j], nan_b = bv[best] != bv[best];
    bool better;
    if (nan_j || nan_b)
      better = nan_j && (!nan_b || bi[j] < bi[best]);
    else
      better = (kMax ? bv[j] > bv[best] : bv[j] < bv[best]) || (bv[j] == bv[best] && bi[j] < bi[best]);
    if (better) best = j;
  }
  return bi[best];
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
                    if constexpr (is_floating_v<T>)
                      if (inner == 1 && r >= 16 && r <= std::numeric_limits<int32_t>::max()) {
                        dst[t] = rowArgExtreme<kMax>(src + t * r, r);
                        continue;
                      }
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

TopkTies topkTies(const Node& n) {
  const std::string& t = n.s("ties");
  if (t == "topk") return TopkTies::Topk;
  if (t == "kthvalue") return TopkTies::Kthvalue;
  return TopkTies::Stable;
}

/// topk along `dim`: the indices of the k best values, best first. Order:
/// NaN above every number (PyTorch's topk and sort), then by value, ties as
/// `ties` says (topk_ties.h).
void topkKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const Tensor& x = in[0];
  const int64_t axis = normalizeAxis(n.i("dim"), x.rank()), k = n.i("k");
  const bool largest = n.i("largest") != 0;
  const TopkTies ties = topkTies(n);
  const AxisSplit split = splitAt(x, axis);
  const int64_t r = split.size, inner = split.inner;
  int64_t* dst = o.data<int64_t>();
  if (k == 0 || o.numel() == 0) return;
  dispatchAll(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* src = x.data<T>();
    parallelFor(split.outer * inner, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(r, 1)),
                [&](int64_t b, int64_t e) {
                  std::vector<std::pair<C, int64_t>> row(static_cast<size_t>(r));
                  for (int64_t t = b; t < e; ++t) {
                    const int64_t base = (t / inner) * r * inner + t % inner;
                    for (int64_t j = 0; j < r; ++j) row[j] = {C(src[base + j * inner]), j};
                    orderTopk(row, k, largest, ties);
                    const int64_t obase = (t / inner) * k * inner + t % inner;
                    for (int64_t j = 0; j < k; ++j) dst[obase + j * inner] = row[j].second;
                  }
                });
  });
}

/// Inclusive prefix sum (cumsum) or product (cumprod) along `dim`,
/// accumulated in double / int64 and stored after every step (PyTorch's CPU
/// cumsum and cumprod do the same).
template <bool kProduct>
void cumulativeKernel(const Node& n, Inputs in, Outputs out) {
  Tensor& o = allocOutput(n, out, 0);
  const Tensor& x = in[0];
  const int64_t axis = normalizeAxis(n.i("dim"), x.rank());
  const AxisSplit split = splitAt(x, axis);  // not a structured binding: lambdas below capture these (clang 14)
  const int64_t outer = split.outer, r = split.size, inner = split.inner;
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
                    Acc acc = kProduct ? 1 : 0;
                    for (int64_t k = 0; k < r; ++k) {
                      if constexpr (kProduct)
                        acc *= static_cast<Acc>(compute_t<T>(src[base + k * inner]));
                      else
                        acc += static_cast<Acc>(compute_t<T>(src[base + k * inner]));
                      dst[base + k * inner] = convert<Out>(acc);
                    }
                  }
                });
  });
}

void add(KernelRegistry& reg, const char* op, KernelFn fn) {
  reg.add({op, "cpu", std::string("cpu.") + op, 0, nullptr, fn});
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
  add(r, "topk", topkKernel);
  add(r, "cumsum", [](const Node& n, Inputs in, Outputs out, KernelContext&) { cumulativeKernel<false>(n, in, out); });
  add(r, "cumprod", [](const Node& n, Inputs in, Outputs out, KernelContext&) { cumulativeKernel<true>(n, in, out); });
}

}  // namespace kiln
