// CUDA kernels of the reduction family (core/ops/reduction.cpp,
// reduction_grad.cpp): sum, mean, prod, amax, amin, var over a set of dims,
// argmax/argmin along one dim, and prod_backward. (cumsum, a scan, lives
// with the index kernels in kernels_shape.cu.)
// Semantics are the CPU reference's (backend/cpu/kernels_reduction.cpp,
// reduce_loops.h): integer and bool sums/products give int64, amax/amin let
// a NaN win, argmax/argmin return the first index of the extreme (the first
// NaN when there is one), var divides m2 by max(0, count - correction).
//
// Every reduction over dims runs one plan (reduce_plan.h's, which
// kernels_norm.cu's statistics run too): the input's dims are merged into
// alternating kept/reduced runs (size-1 dims dropped, as the CPU does), then
//   - row mode (the innermost run is reduced): a group of W threads (a
//     sub-warp, a warp or the whole 256-thread block) reduces each output;
//     long rows with few outputs are split over several blocks;
//   - column mode (the innermost run is kept): a 2-D block whose x threads
//     walk adjacent outputs (coalesced) and whose y threads split the reduced
//     extent, combined through shared memory; again split over blocks when
//     there are few outputs.
// Splits write one partial accumulator per (output, split) into the
// workspace and a second kernel combines them, a warp per output, in a fixed
// order: results are deterministic (no atomics), and depend only on the
// shape. Accumulation is fp32 for f32/f16/bf16 inputs (fp64 for f64, int64
// for integers and bool); the CPU sums floats in double, so f32 sums differ
// from it by rounding (summation order and precision), never by more.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_dtype.cuh"
#include "backend/cuda/cuda_kernel.h"
#include "backend/cuda/cuda_reduce.cuh"
#include "core/ops/op_helpers.h"

namespace kiln::cuda {
namespace {

// ---- types ---------------------------------------------------------------------

/// The accumulation type of a storage type: double for f64, float for the
/// other floating types, int64 for integers and bool.
template <class T>
using AccumT = std::conditional_t<std::is_same_v<T, double>, double, std::conditional_t<kIsFloat<T>, float, long long>>;

template <class C>
__device__ __forceinline__ bool isNaN(C v) {
  if constexpr (std::is_floating_point_v<C>)
    return v != v;
  else
    return false;
}

// ---- the reductions (Op) -------------------------------------------------------
// Op: In (storage type read), Acc, Out; init(), step(Acc&, In, index along
// the reduced extent), combine(Acc&, const Acc&), finish(const Acc&, count).

template <class T>
struct SumOp {
  using In = T;
  using Acc = AccumT<T>;
  using Out = std::conditional_t<kIsFloat<T>, T, int64_t>;
  __device__ Acc init() const { return Acc(0); }
  __device__ void step(Acc& a, In v, int64_t) const { a += load<Acc>(v); }
  __device__ void combine(Acc& a, const Acc& b) const { a += b; }
  __device__ Out finish(const Acc& a, int64_t) const { return store<Out>(a); }
};

template <class T>
struct MeanOp : SumOp<T> {
  using Out = T;
  __device__ Out finish(const typename SumOp<T>::Acc& a, int64_t count) const {
    return store<T>(a / static_cast<typename SumOp<T>::Acc>(count));
  }
};

template <class T>
struct ProdOp {
  using In = T;
  using Acc = AccumT<T>;
  using Out = std::conditional_t<kIsFloat<T>, T, int64_t>;
  __device__ Acc init() const { return Acc(1); }
  __device__ void step(Acc& a, In v, int64_t) const { a *= load<Acc>(v); }
  __device__ void combine(Acc& a, const Acc& b) const { a *= b; }
  __device__ Out finish(const Acc& a, int64_t) const { return store<Out>(a); }
};

/// amax / amin: a NaN, once in, stays (torch.amax).
template <class T, bool kMax>
struct ExtremeOp {
  using In = T;
  using Acc = AccumT<T>;
  using Out = T;
  __device__ Acc init() const {
    if constexpr (std::is_floating_point_v<Acc>)
      return kMax ? -std::numeric_limits<Acc>::infinity() : std::numeric_limits<Acc>::infinity();
    else
      return kMax ? std::numeric_limits<Acc>::lowest() : std::numeric_limits<Acc>::max();
  }
  __device__ void step(Acc& a, In v, int64_t) const { combine(a, load<Acc>(v)); }
  __device__ void combine(Acc& a, const Acc& b) const {
    if ((kMax ? b > a : b < a) || isNaN(b)) a = b;
  }
  __device__ Out finish(const Acc& a, int64_t) const { return store<Out>(a); }
};

/// Welford's running moments, merged with Chan's formula.
template <class A>
struct Welford {
  A n, mean, m2;
};

template <class T>
struct VarOp {
  using In = T;
  using A = AccumT<T>;
  using Acc = Welford<A>;
  using Out = T;
  A correction;
  __device__ Acc init() const { return {A(0), A(0), A(0)}; }
  __device__ void step(Acc& a, In v, int64_t) const {
    const A x = load<A>(v), d = x - a.mean;
    a.n += A(1);
    a.mean += d / a.n;
    a.m2 += d * (x - a.mean);
  }
  __device__ void combine(Acc& a, const Acc& b) const {
    if (b.n == A(0)) return;
    if (a.n == A(0)) {
      a = b;
      return;
    }
    const A n = a.n + b.n, d = b.mean - a.mean;
    a.mean += d * (b.n / n);
    a.m2 += b.m2 + d * d * (a.n * (b.n / n));
    a.n = n;
  }
  __device__ Out finish(const Acc& a, int64_t count) const {
    const A div = static_cast<A>(count) - correction;
    return store<Out>(a.m2 / (div > A(0) ? div : A(0)));
  }
};

template <class C>
struct ArgAcc {
  C v;
  long long i;  // -1: no element yet
};

/// argmax / argmin: the first index of the extreme, the first NaN winning.
/// The combine is associative and commutative, so any split order gives
/// the CPU's answer exactly.
template <class T, bool kMax>
struct ArgOp {
  using In = T;
  using C = AccumT<T>;
  using Acc = ArgAcc<C>;
  using Out = int64_t;
  __device__ Acc init() const { return {C(0), -1}; }
  __device__ void step(Acc& a, In v, int64_t k) const { combine(a, Acc{load<C>(v), static_cast<long long>(k)}); }
  __device__ void combine(Acc& a, const Acc& b) const {
    if (b.i < 0) return;
    if (a.i < 0) {
      a = b;
      return;
    }
    const bool an = isNaN(a.v), bn = isNaN(b.v);
    bool take;
    if (an || bn)
      take = an && bn ? b.i < a.i : bn;
    else if (a.v == b.v)
      take = b.i < a.i;
    else
      take = kMax ? b.v > a.v : b.v < a.v;
    if (take) a = b;
  }
  __device__ Out finish(const Acc& a, int64_t) const { return a.i < 0 ? 0 : a.i; }
};

/// prod_backward's per-slice statistics: zeros counted, the others multiplied.
template <class A>
struct ProdStats {
  A prod;
  long long zeros;
};

template <class T>
struct ProdStatsOp {
  using In = T;
  using A = AccumT<T>;
  using Acc = ProdStats<A>;
  using Out = Acc;
  __device__ Acc init() const { return {A(1), 0}; }
  __device__ void step(Acc& a, In v, int64_t) const {
    const A x = load<A>(v);
    if (x == A(0))
      ++a.zeros;
    else
      a.prod *= x;
  }
  __device__ void combine(Acc& a, const Acc& b) const {
    a.prod *= b.prod;
    a.zeros += b.zeros;
  }
  __device__ Out finish(const Acc& a, int64_t) const { return a; }
};

// ---- the kernels (over a reduce_plan.h Plan) ------------------------------------

constexpr int kThreads = kPlanThreads;

template <class Op, bool kMulti>
__global__ void __launch_bounds__(kThreads)
    rowReduceKernel(Op op, const typename Op::In* __restrict__ x, typename Op::Out* __restrict__ y,
                    typename Op::Acc* __restrict__ partial, Plan p) {
  using Acc = typename Op::Acc;
  __shared__ __align__(16) unsigned char raw[32 * sizeof(Acc)];
  const int W = p.W, tx = threadIdx.x;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * p.H + threadIdx.y;
  const int64_t items = p.outputs * p.splits;
  Acc a = op.init();
  if (item < items) {
    const int64_t o = item / p.splits, s = item % p.splits;
    const int64_t base = p.kept.offset(o);
    const int64_t begin = s * p.chunk, end = p.count < begin + p.chunk ? p.count : begin + p.chunk;
    auto at = [&](int64_t t) { return p.rowOffset<kMulti>(base, t); };
    int64_t t = begin + tx;
    for (; t + 3 * W < end; t += 4 * W) {
      const typename Op::In v0 = x[at(t)], v1 = x[at(t + W)], v2 = x[at(t + 2 * W)], v3 = x[at(t + 3 * W)];
      op.step(a, v0, t);
      op.step(a, v1, t + W);
      op.step(a, v2, t + 2 * W);
      op.step(a, v3, t + 3 * W);
    }
    for (; t < end; t += W) op.step(a, x[at(t)], t);
  }
  a = reduceAcrossX(op, a, W, raw);
  if (tx == 0 && item < items) {
    if (p.splits == 1)
      y[item] = op.finish(a, p.count);
    else
      partial[item] = a;
  }
}

template <class Op, bool kMulti>
__global__ void __launch_bounds__(kThreads)
    colReduceKernel(Op op, const typename Op::In* __restrict__ x, typename Op::Out* __restrict__ y,
                    typename Op::Acc* __restrict__ partial, Plan p) {
  using Acc = typename Op::Acc;
  __shared__ __align__(16) unsigned char raw[kThreads * sizeof(Acc)];
  Acc* sm = reinterpret_cast<Acc*>(raw);
  const int bx = p.W, by = p.H, tx = threadIdx.x, ty = threadIdx.y;
  const int64_t b = blockIdx.x;
  const int64_t s = b % p.splits, rest = b / p.splits, xt = rest % p.xtiles, pp = rest / p.xtiles;
  const int64_t i = xt * bx + tx;
  Acc a = op.init();
  if (i < p.inner) {
    const int64_t base = p.kept.offset(pp) + i;
    const int64_t begin = s * p.chunk, end = p.count < begin + p.chunk ? p.count : begin + p.chunk;
    auto at = [&](int64_t r) { return p.colOffset<kMulti>(base, r); };
    int64_t r = begin + ty;
    for (; r + 3 * by < end; r += 4 * by) {
      const typename Op::In v0 = x[at(r)], v1 = x[at(r + by)], v2 = x[at(r + 2 * by)], v3 = x[at(r + 3 * by)];
      op.step(a, v0, r);
      op.step(a, v1, r + by);
      op.step(a, v2, r + 2 * by);
      op.step(a, v3, r + 3 * by);
    }
    for (; r < end; r += by) op.step(a, x[at(r)], r);
  }
  reduceAcrossY(op, a, sm, bx, by);
  if (ty == 0 && i < p.inner) {
    const int64_t o = pp * p.inner + i;
    if (p.splits == 1)
      y[o] = op.finish(sm[tx], p.count);
    else
      partial[o * p.splits + s] = sm[tx];
  }
}

/// One warp per output combines its splits' partials in a fixed order.
template <class Op>
__global__ void __launch_bounds__(kThreads)
    finalizeKernel(Op op, const typename Op::Acc* __restrict__ partial, typename Op::Out* __restrict__ y,
                   int64_t outputs, int64_t splits, int64_t count) {
  using Acc = typename Op::Acc;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  Acc a = op.init();
  if (o < outputs)
    for (int64_t k = lane; k < splits; k += 32) op.combine(a, partial[o * splits + k]);
  for (int off = 16; off > 0; off /= 2) op.combine(a, shflDown(a, off, 32));
  if (lane == 0 && o < outputs) y[o] = op.finish(a, count);
}

/// Enqueue the reduction of `x` by plan `p` into `y` (p.outputs values);
/// `partial` holds p.outputs * p.splits accumulators when p.splits > 1.
template <class Op>
void runReduce(const Op& op, const void* x, void* y, void* partial, const Plan& p, CudaContext& ctx) {
  using Acc = typename Op::Acc;
  using In = typename Op::In;
  using Out = typename Op::Out;
  if (p.outputs == 0) return;
  const In* xp = static_cast<const In*>(x);
  Out* yp = static_cast<Out*>(y);
  Acc* pp = static_cast<Acc*>(partial);
  if (p.row) {
    const dim3 block(p.W, p.H);
    if (p.multi)
      rowReduceKernel<Op, true><<<static_cast<unsigned>(p.blocks), block, 0, ctx.stream>>>(op, xp, yp, pp, p);
    else
      rowReduceKernel<Op, false><<<static_cast<unsigned>(p.blocks), block, 0, ctx.stream>>>(op, xp, yp, pp, p);
  } else {
    const dim3 block(p.W, p.H);
    if (p.multi)
      colReduceKernel<Op, true><<<static_cast<unsigned>(p.blocks), block, 0, ctx.stream>>>(op, xp, yp, pp, p);
    else
      colReduceKernel<Op, false><<<static_cast<unsigned>(p.blocks), block, 0, ctx.stream>>>(op, xp, yp, pp, p);
  }
  checkLaunch(p.row ? "rowReduceKernel" : "colReduceKernel", ctx.node);
  if (p.splits > 1) {
    finalizeKernel<Op><<<static_cast<unsigned>(ceilDiv(p.outputs, kThreads / 32)), kThreads, 0, ctx.stream>>>(
        op, pp, yp, p.outputs, p.splits, p.count);
    checkLaunch("finalizeKernel", ctx.node);
  }
}

/// Bytes of partial accumulators a plan needs (accumulators of `acc` bytes).
size_t partialBytes(const Plan& p, size_t acc) {
  return p.splits > 1 ? static_cast<size_t>(p.outputs * p.splits) * acc : 0;
}

/// The largest accumulator of each kind, for the workspace bound.
constexpr size_t kAccBytes = 8, kVarAccBytes = 24, kArgAccBytes = 16, kStatsBytes = 16;

// ---- sum, mean, prod, amax, amin, var ------------------------------------------

enum Kind { kSum, kMean, kProd, kAmax, kAmin, kVar };

Plan reducePlan(const Node& n) {
  const Shape& s = n.input(0)->shape();
  return makePlan(s, reductionAxes(n, n.is("dims"), static_cast<int64_t>(s.size())));
}

template <int kKind>
size_t reduceWorkspace(const Node& n) {
  return partialBytes(reducePlan(n), kKind == kVar ? kVarAccBytes : kAccBytes);
}

template <int kKind>
void reduceKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                  CudaContext& ctx) {
  const DeviceTensor& x = in[0];
  const Plan p = reducePlan(n);
  if constexpr (kKind == kAmax || kKind == kAmin)
    if (p.count == 0 && p.outputs > 0)
      fail(n.describe() + ": cannot reduce over a dimension of size 0 (amax/amin have no identity)");
  void* ws = requireWorkspace(ctx, reduceWorkspace<kKind>(n));
  auto body = [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kKind == kSum)
      runReduce(SumOp<T>{}, x.data, out[0].data, ws, p, ctx);
    else if constexpr (kKind == kProd)
      runReduce(ProdOp<T>{}, x.data, out[0].data, ws, p, ctx);
    else if constexpr (kKind == kAmax)
      runReduce(ExtremeOp<T, true>{}, x.data, out[0].data, ws, p, ctx);
    else if constexpr (kKind == kAmin)
      runReduce(ExtremeOp<T, false>{}, x.data, out[0].data, ws, p, ctx);
    else if constexpr (kKind == kMean)
      runReduce(MeanOp<T>{}, x.data, out[0].data, ws, p, ctx);
    else
      runReduce(VarOp<T>{static_cast<AccumT<T>>(n.f("correction"))}, x.data, out[0].data, ws, p, ctx);
  };
  if constexpr (kKind == kMean || kKind == kVar)
    dispatchFloating(x.dtype(), n.op().c_str(), body);
  else
    dispatchAll(x.dtype(), n.op().c_str(), body);
}

// ---- argmax / argmin -----------------------------------------------------------

Plan argPlan(const Node& n) {
  const Shape& s = n.input(0)->shape();
  const int64_t rank = static_cast<int64_t>(s.size());
  std::vector<int64_t> axes;
  if (rank > 0) axes.push_back(normalizeAxis(n.i("dim"), rank));
  return makePlan(s, axes);
}

size_t argWorkspace(const Node& n) {
  return partialBytes(argPlan(n), kArgAccBytes);
}

template <bool kMax>
void argKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out, CudaContext& ctx) {
  const Plan p = argPlan(n);
  if (p.count == 0 && p.outputs > 0) fail(n.describe() + ": cannot take the arg-extreme of an empty dimension");
  void* ws = requireWorkspace(ctx, argWorkspace(n));
  dispatchAll(in[0].dtype(), n.op().c_str(), [&](auto tag) {
    using T = decltype(tag);
    runReduce(ArgOp<T, kMax>{}, in[0].data, out[0].data, ws, p, ctx);
  });
}

// ---- prod_backward -------------------------------------------------------------
// Per slice (PyTorch's prod_backward): no zero: g * (y / x); one zero: that
// element gets g times the product of the others, the rest 0; more: all 0.

template <class T>
__global__ void prodBackwardKernel(const T* __restrict__ g, const T* __restrict__ x, const T* __restrict__ y,
                                   const ProdStats<AccumT<T>>* __restrict__ stats, T* __restrict__ out, int64_t total,
                                   Dims slot) {
  using C = AccumT<T>;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < total;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t so = slot.offset(j);
    const C v = load<C>(x[j]), gv = load<C>(g[so]);
    const ProdStats<C> st = stats[so];
    C r = C(0);
    if (st.zeros == 0)
      r = gv * (load<C>(y[so]) / v);
    else if (st.zeros == 1 && v == C(0))
      r = gv * st.prod;
    out[j] = store<T>(r);
  }
}

Plan prodBackwardPlan(const Node& n) {
  const Shape& s = n.input(1)->shape();
  return makePlan(s, reductionAxes(n, n.is("dims"), static_cast<int64_t>(s.size())));
}

size_t prodBackwardWorkspace(const Node& n) {
  const Plan p = prodBackwardPlan(n);
  return alignUp(static_cast<size_t>(p.outputs) * kStatsBytes) + partialBytes(p, kStatsBytes);
}

void prodBackwardKernelFn(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                          CudaContext& ctx) {
  const Shape& xs = in[1].shape();
  const int64_t total = in[1].numel();
  if (total == 0) return;
  const std::vector<int64_t> axes = reductionAxes(n, n.is("dims"), static_cast<int64_t>(xs.size()));
  const Plan p = makePlan(xs, axes);
  auto* ws = static_cast<unsigned char*>(requireWorkspace(ctx, prodBackwardWorkspace(n)));
  // Each x element's slot in g / y: kept dims weighted, reduced ones not.
  Dims slot{};
  {
    const std::vector<DimGroup> g = groupDims(xs, axes);
    int64_t mul = 1;
    for (size_t k = g.size(); k-- > 0;) {
      push(slot, g[k].size, g[k].reduced ? 0 : mul);
      if (!g[k].reduced) mul *= g[k].size;
    }
  }
  dispatchFloating(in[1].dtype(), "prod_backward", [&](auto tag) {
    using T = decltype(tag);
    using Stats = ProdStats<AccumT<T>>;
    auto* stats = reinterpret_cast<Stats*>(ws);
    void* partial = ws + alignUp(static_cast<size_t>(p.outputs) * kStatsBytes);
    runReduce(ProdStatsOp<T>{}, in[1].data, stats, partial, p, ctx);
    prodBackwardKernel<T><<<gridFor(total), 256, 0, ctx.stream>>>(in[0].as<T>(), in[1].as<T>(), in[2].as<T>(), stats,
                                                                  out[0].as<T>(), total, slot);
    checkLaunch("prodBackwardKernel", ctx.node);
  });
}

void add(CudaKernelRegistry& r, const char* op, CudaKernelFn fn, WorkspaceFn ws) {
  r.add(ownCudaKernel(op, fn, ws));
}

}  // namespace

void registerCudaReductionKernels(CudaKernelRegistry& r) {
  add(r, "sum", reduceKernel<kSum>, reduceWorkspace<kSum>);
  add(r, "mean", reduceKernel<kMean>, reduceWorkspace<kMean>);
  add(r, "prod", reduceKernel<kProd>, reduceWorkspace<kProd>);
  add(r, "amax", reduceKernel<kAmax>, reduceWorkspace<kAmax>);
  add(r, "amin", reduceKernel<kAmin>, reduceWorkspace<kAmin>);
  add(r, "var", reduceKernel<kVar>, reduceWorkspace<kVar>);
  add(r, "argmax", argKernel<true>, argWorkspace);
  add(r, "argmin", argKernel<false>, argWorkspace);
  add(r, "prod_backward", prodBackwardKernelFn, prodBackwardWorkspace);
}

}  // namespace kiln::cuda
