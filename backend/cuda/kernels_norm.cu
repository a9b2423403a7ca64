// CUDA kernels of normalization (core/ops/nn.cpp, norm_grad.cpp):
//   layer_norm, layer_norm_backward {normalized_shape, eps}
//   batch_norm {training, momentum, eps}, batch_norm_backward {training, eps}
//   group_norm, group_norm_backward {num_groups, eps}
// Formulas are the CPU reference's (backend/cpu/kernels_norm.cpp,
// kernels_norm_grad.cpp, kernels_nn.cpp), computed in fp32 for
// f32/f16/bf16 (fp64 for f64).
//
// layer_norm runs a warp per row when the row fits in registers (up to 1024
// elements: one read, exact two-pass statistics), else a 256-thread block
// per row accumulating shifted sums (x - K and its square, K a sampled
// shift) so a large mean does not cancel the variance. Statistics over
// several dims (batch_norm's per-channel sums, group_norm's per-group sums,
// the weight/bias gradients of every norm) run norm_common.cuh's
// deterministic reduction engine; per-slice statistics are sums shifted by
// the mean of 8 elements spread across the slice, so mean and variance come
// out of one read.
//
// Parameters (weight, bias, running stats) have x's dtype, or f32 when x is
// f16/bf16 (mixed precision); other mixes have no CUDA kernel.
#include "backend/cuda/norm_common.cuh"

namespace kiln::cuda {
namespace {

using namespace norm;

// ---- layer_norm ----------------------------------------------------------------

struct RowSplit {
  int64_t rows = 0, n = 0;
};
RowSplit layerRows(const Node& n, int64_t numel) {
  RowSplit r;
  r.n = numelOf(n.is("normalized_shape"));
  r.rows = r.n ? numel / r.n : 0;
  return r;
}

template <class T, class P, int kPer>
__global__ void __launch_bounds__(kThreads)
    layerNormWarpKernel(const T* __restrict__ x, const P* __restrict__ w, const P* __restrict__ b, T* __restrict__ y,
                        int64_t rows, int n, double eps) {
  using C = Cmp<T>;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const T* src = x + row * n;
  C v[kPer];
  C s = C(0);
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int k = q * 32 + lane;
    v[q] = k < n ? load<C>(src[k]) : C(0);
    s += v[q];
  }
  const C mean = warpAll(s, AddOne{}) / C(n);
  C sq = C(0);
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const C d = q * 32 + lane < n ? v[q] - mean : C(0);
    sq += d * d;
  }
  const C var = warpAll(sq, AddOne{}) / C(n);
  const C rstd = C(1) / sqrtC(var + C(eps));
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int k = q * 32 + lane;
    if (k < n) y[row * n + k] = store<T>((v[q] - mean) * rstd * load<C>(w[k]) + load<C>(b[k]));
  }
}

/// The shift of a long row's sums: the mean of 8 elements spread across it.
template <class T>
__device__ __forceinline__ Cmp<T> rowShift(const T* row, int64_t n) {
  using C = Cmp<T>;
  C sum = C(0);
#pragma unroll
  for (int j = 0; j < kShiftSamples; ++j) sum += load<C>(row[j * n / kShiftSamples]);
  return sum / C(kShiftSamples);
}

/// Mean and biased variance from sums of d = x - K and d^2 over n values.
template <class C>
__device__ __forceinline__ void shiftedMoments(C K, C s1, C s2, int64_t n, C& mean, C& var) {
  const C m1 = s1 / C(n);
  mean = K + m1;
  var = s2 / C(n) - m1 * m1;
  if (var < C(0)) var = C(0);
}

template <class T, class P>
__global__ void __launch_bounds__(kThreads)
    layerNormBlockKernel(const T* __restrict__ x, const P* __restrict__ w, const P* __restrict__ b, T* __restrict__ y,
                         int64_t rows, int64_t n, double eps) {
  using C = Cmp<T>;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* src = x + row * n;
    const C K = rowShift(src, n);
    Pair<C> a{C(0), C(0)};
    walkRow<T, 1, false>({src}, nullptr, n, [&](int64_t, const C(&v)[1]) {
      const C d = v[0] - K;
      a.a += d;
      a.b += d * d;
    });
    a = blockAll(a, AddPair{});
    C mean, var;
    shiftedMoments(K, a.a, a.b, n, mean, var);
    const C rstd = C(1) / sqrtC(var + C(eps));
    walkRow<T, 1, true>({src}, y + row * n, n, [&](int64_t k, const C(&v)[1]) {
      return (v[0] - mean) * rstd * load<C>(w[k]) + load<C>(b[k]);
    });
  }
}

bool layerNormSupports(const Node& n) {
  return paramsOk(n, 0, {1, 2});
}

void layerNormKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                     CudaContext& ctx) {
  const RowSplit r = layerRows(n, in[0].numel());
  if (r.rows == 0) return;
  const double eps = n.f("eps");
  dispatchNorm(n, 0, {1, 2}, [&](auto t, auto pt) {
    using T = decltype(t);
    using P = decltype(pt);
    const T* x = in[0].as<T>();
    const P* w = in[1].as<P>();
    const P* b = in[2].as<P>();
    T* y = out[0].as<T>();
    if (const int per = warpPer(r.n)) {
      withPer(per, [&](auto k) {
        layerNormWarpKernel<T, P, decltype(k)::value><<<rowGrid(r.rows, kWarpsPerBlock), kThreads, 0, ctx.stream>>>(
            x, w, b, y, r.rows, static_cast<int>(r.n), eps);
      });
      checkLaunch("layerNormWarpKernel", ctx.node);
    } else {
      layerNormBlockKernel<T, P><<<rowGrid(r.rows, 1), kThreads, 0, ctx.stream>>>(x, w, b, y, r.rows, r.n, eps);
      checkLaunch("layerNormBlockKernel", ctx.node);
    }
  });
}

// ---- layer_norm_backward (g, x, w) -> (gx, gw, gb) -----------------------------
// Per row: gx = rstd * (g*w - mean(g*w) - xhat * mean(g*w*xhat)); the row's
// mean and rstd go to the workspace for the column sums
// gw = sum_rows g * xhat, gb = sum_rows g (the reduction engine).

template <class T, class P, int kPer>
__global__ void __launch_bounds__(kThreads)
    layerNormBackwardWarpKernel(const T* __restrict__ g, const T* __restrict__ x, const P* __restrict__ w,
                                T* __restrict__ gx, Cmp<T>* __restrict__ stats, int64_t rows, int n, double eps) {
  using C = Cmp<T>;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  C xv[kPer], gw[kPer];
  C s = C(0);
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int k = q * 32 + lane;
    xv[q] = k < n ? load<C>(x[row * n + k]) : C(0);
    gw[q] = k < n ? load<C>(g[row * n + k]) * load<C>(w[k]) : C(0);
    s += xv[q];
  }
  const C mean = warpAll(s, AddOne{}) / C(n);
  C sq = C(0);
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const C d = q * 32 + lane < n ? xv[q] - mean : C(0);
    sq += d * d;
  }
  const C var = warpAll(sq, AddOne{}) / C(n);
  const C rstd = C(1) / sqrtC(var + C(eps));
  Pair<C> a{C(0), C(0)};  // sum(gh), sum(gh * xhat)
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    a.a += gw[q];
    a.b += gw[q] * ((xv[q] - mean) * rstd);
  }
  a = warpAll(a, AddPair{});
  const C m1 = a.a / C(n), m2 = a.b / C(n);
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int k = q * 32 + lane;
    if (k < n) gx[row * n + k] = store<T>(rstd * (gw[q] - m1 - (xv[q] - mean) * rstd * m2));
  }
  if (lane == 0) {
    stats[2 * row] = mean;
    stats[2 * row + 1] = rstd;
  }
}

template <class T, class P>
__global__ void __launch_bounds__(kThreads)
    layerNormBackwardBlockKernel(const T* __restrict__ g, const T* __restrict__ x, const P* __restrict__ w,
                                 T* __restrict__ gx, Cmp<T>* __restrict__ stats, int64_t rows, int64_t n, double eps) {
  using C = Cmp<T>;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* gr = g + row * n;
    const T* xr = x + row * n;
    const C K = rowShift(xr, n);
    Quad<C> a{C(0), C(0), C(0), C(0)};  // sum d, sum d^2, sum gh, sum gh * d (d = x - K)
    walkRow<T, 2, false>({gr, xr}, nullptr, n, [&](int64_t k, const C(&v)[2]) {
      const C d = v[1] - K, gh = v[0] * load<C>(w[k]);
      a.a += d;
      a.b += d * d;
      a.c += gh;
      a.d += gh * d;
    });
    a = blockAll(a, AddQuad{});
    C mean, var;
    shiftedMoments(K, a.a, a.b, n, mean, var);
    const C rstd = C(1) / sqrtC(var + C(eps));
    const C m1 = a.c / C(n), m2 = rstd * (a.d - (mean - K) * a.c) / C(n);
    walkRow<T, 2, true>({gr, xr}, gx + row * n, n, [&](int64_t k, const C(&v)[2]) {
      return rstd * (v[0] * load<C>(w[k]) - m1 - (v[1] - mean) * rstd * m2);
    });
    if (threadIdx.x == 0) {
      stats[2 * row] = mean;
      stats[2 * row + 1] = rstd;
    }
  }
}

/// Column sums of layer_norm_backward: gw[i] = sum_r g * (x - mean_r) * rstd_r, gb[i] = sum_r g.
template <class T, class P>
struct LayerNormParamOp {
  using C = Cmp<T>;
  using Acc = Pair<C>;
  struct Ctx {};
  static constexpr bool kShifted = false;
  const T* g;
  const T* x;
  const C* stats;
  P* gw;
  P* gb;
  int64_t cols;
  __device__ Acc init() const { return {C(0), C(0)}; }
  __device__ Ctx ctx(int64_t) const { return {}; }
  __device__ void step(Acc& a, const Ctx&, int64_t off) const {
    const int64_t r = off / cols;
    const C gv = load<C>(g[off]);
    a.a += gv * ((load<C>(x[off]) - stats[2 * r]) * stats[2 * r + 1]);
    a.b += gv;
  }
  __device__ void combine(Acc& a, const Acc& b) const {
    a.a += b.a;
    a.b += b.b;
  }
  __device__ void finish(const Acc& a, const Ctx&, int64_t o) const {
    gw[o] = store<P>(a.a);
    gb[o] = store<P>(a.b);
  }
};

Plan layerParamPlan(const RowSplit& r) {
  return makePlan({r.rows, r.n}, {0});
}

size_t layerNormBackwardWorkspace(const Node& n) {
  const RowSplit r = layerRows(n, n.input(1)->type().numel());
  return alignUp(static_cast<size_t>(r.rows) * 2 * sizeof(double)) +
         partialBytes(layerParamPlan(r), 2 * sizeof(double));
}

bool layerNormBackwardSupports(const Node& n) {
  return paramsOk(n, 1, {2});
}

void layerNormBackwardKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                             CudaContext& ctx) {
  const RowSplit r = layerRows(n, in[1].numel());
  const double eps = n.f("eps");
  auto* ws = static_cast<unsigned char*>(requireWorkspace(ctx, layerNormBackwardWorkspace(n)));
  dispatchNorm(n, 1, {2}, [&](auto t, auto pt) {
    using T = decltype(t);
    using P = decltype(pt);
    using C = Cmp<T>;
    const T* g = in[0].as<T>();
    const T* x = in[1].as<T>();
    const P* w = in[2].as<P>();
    T* gx = out[0].as<T>();
    C* stats = reinterpret_cast<C*>(ws);
    if (r.rows > 0) {
      if (const int per = warpPer(r.n)) {
        withPer(per, [&](auto k) {
          layerNormBackwardWarpKernel<T, P, decltype(k)::value>
              <<<rowGrid(r.rows, kWarpsPerBlock), kThreads, 0, ctx.stream>>>(g, x, w, gx, stats, r.rows,
                                                                             static_cast<int>(r.n), eps);
        });
        checkLaunch("layerNormBackwardWarpKernel", ctx.node);
      } else {
        layerNormBackwardBlockKernel<T, P>
            <<<rowGrid(r.rows, 1), kThreads, 0, ctx.stream>>>(g, x, w, gx, stats, r.rows, r.n, eps);
        checkLaunch("layerNormBackwardBlockKernel", ctx.node);
      }
    }
    // With no rows the column sums are zero: the engine still writes them.
    const Plan p = layerParamPlan(r);
    void* partial = ws + alignUp(static_cast<size_t>(r.rows) * 2 * sizeof(double));
    runReduce(LayerNormParamOp<T, P>{g, x, stats, out[1].as<P>(), out[2].as<P>(), r.n}, partial, p, ctx);
  });
}

// ---- batch_norm ----------------------------------------------------------------
// x is [N, C, inner...]; channel statistics reduce [N, C, inner] over {0, 2}.

struct ChannelSplit {
  int64_t batch = 0, channels = 0, inner = 1;
};
ChannelSplit channelSplit(const Shape& s) {
  ChannelSplit c;
  c.batch = s[0];
  c.channels = s[1];
  for (size_t d = 2; d < s.size(); ++d) c.inner *= s[d];
  return c;
}
Plan channelPlan(const ChannelSplit& c) {
  return makePlan({c.batch, c.channels, c.inner}, {0, 2});
}

/// The forward statistics of batch_norm and group_norm: per slice, the sums
/// of d = x - K and d^2 (K: the slice's sampled shift). An op derives from
/// it and adds finish().
template <class T>
struct ShiftedSumsOp {
  using C = Cmp<T>;
  using Acc = Pair<C>;
  using Ctx = C;
  static constexpr bool kShifted = true;
  const T* x;
  __device__ Acc init() const { return {C(0), C(0)}; }
  __device__ C sample(int64_t off) const { return load<C>(x[off]); }
  __device__ void step(Acc& a, const Ctx& K, int64_t off) const {
    const C d = load<C>(x[off]) - K;
    a.a += d;
    a.b += d * d;
  }
  __device__ void combine(Acc& a, const Acc& o) const {
    a.a += o.a;
    a.b += o.b;
  }
};

/// Training statistics: sums of d = x - K (K: the channel's sampled shift),
/// finished into the new running stats and the (scale, shift) of y = x * scale + shift.
template <class T, class P>
struct BatchNormStatsOp : ShiftedSumsOp<T> {
  using C = Cmp<T>;
  using Acc = Pair<C>;
  using Ctx = C;
  const P* w;
  const P* b;
  const P* rmean;
  const P* rvar;
  P* new_mean;
  P* new_var;
  C* coef;  // [C][2]: scale, shift
  int64_t count;
  double momentum, eps;
  __device__ void finish(const Acc& a, const Ctx& K, int64_t c) const {
    C mean = C(0), var = std::numeric_limits<C>::quiet_NaN();
    if (count > 0) shiftedMoments(K, a.a, a.b, count, mean, var);
    const C unbiased = var * C(count) / C(count - 1);
    const C mom = C(momentum);
    new_mean[c] = store<P>((C(1) - mom) * load<C>(rmean[c]) + mom * mean);
    new_var[c] = store<P>((C(1) - mom) * load<C>(rvar[c]) + mom * unbiased);
    const C inv = C(1) / sqrtC(var + C(eps)), wc = load<C>(w[c]);
    coef[2 * c] = inv * wc;
    coef[2 * c + 1] = load<C>(b[c]) - mean * inv * wc;
  }
};

/// Eval: (scale, shift) from the running stats.
template <class T, class P>
__global__ void batchNormEvalCoefKernel(const P* __restrict__ w, const P* __restrict__ b, const P* __restrict__ rmean,
                                        const P* __restrict__ rvar, Cmp<T>* __restrict__ coef, int64_t channels,
                                        double eps) {
  using C = Cmp<T>;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < channels;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const C inv = C(1) / sqrtC(load<C>(rvar[c]) + C(eps)), wc = load<C>(w[c]);
    coef[2 * c] = inv * wc;
    coef[2 * c + 1] = load<C>(b[c]) - load<C>(rmean[c]) * inv * wc;
  }
}

template <class T>
struct BatchNormApply {
  using C = Cmp<T>;
  const T* x;
  T* y;
  const C* coef;
  int64_t channels;
  __device__ void operator()(int64_t seg, int64_t i) const {
    const int64_t c = seg % channels;
    y[i] = store<T>(load<C>(x[i]) * coef[2 * c] + coef[2 * c + 1]);
  }
};

bool batchNormSupports(const Node& n) {
  return paramsOk(n, 0, {1, 2, 3, 4});
}

size_t batchNormWorkspace(const Node& n) {
  const ChannelSplit c = channelSplit(n.input(0)->shape());
  size_t bytes = alignUp(static_cast<size_t>(c.channels) * 2 * sizeof(double));
  if (n.i("training")) bytes += partialBytes(channelPlan(c), 2 * sizeof(double));
  return bytes;
}

void batchNormKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                     CudaContext& ctx) {
  const ChannelSplit cs = channelSplit(in[0].shape());
  const bool training = n.i("training") != 0;
  const double eps = n.f("eps"), momentum = n.f("momentum");
  auto* ws = static_cast<unsigned char*>(requireWorkspace(ctx, batchNormWorkspace(n)));
  dispatchNorm(n, 0, {1, 2, 3, 4}, [&](auto t, auto pt) {
    using T = decltype(t);
    using P = decltype(pt);
    using C = Cmp<T>;
    C* coef = reinterpret_cast<C*>(ws);
    const P* w = in[1].as<P>();
    const P* b = in[2].as<P>();
    const P* rm = in[3].as<P>();
    const P* rv = in[4].as<P>();
    if (training) {
      const Plan p = channelPlan(cs);
      void* partial = ws + alignUp(static_cast<size_t>(cs.channels) * 2 * sizeof(double));
      const ShiftedSumsOp<T> sums{in[0].as<T>()};
      BatchNormStatsOp<T, P> op{sums,     w,  b, rm, rv, out[1].as<P>(), out[2].as<P>(), coef, cs.batch * cs.inner,
                                momentum, eps};
      runReduce(op, partial, p, ctx);
    } else if (cs.channels > 0) {
      batchNormEvalCoefKernel<T, P>
          <<<gridFor(cs.channels), kThreads, 0, ctx.stream>>>(w, b, rm, rv, coef, cs.channels, eps);
      checkLaunch("batchNormEvalCoefKernel", ctx.node);
    }
    mapSegments(BatchNormApply<T>{in[0].as<T>(), out[0].as<T>(), coef, cs.channels}, cs.batch * cs.channels, cs.inner,
                ctx);
  });
}

// ---- batch_norm_backward (g, x, w[, running_mean, running_var]) ----------------
// Per channel: sums of d = x - K (K: the channel's sampled shift), g and
// g * d; finished into
// gw = sum(g * (x - mean)) * invstd, gb = sum(g) and the coefficients of
//   gx = (g - grad_mean - (x - mean) * k) * scale.

/// The backward statistics of batch_norm and group_norm: per slice, the
/// sums of d = x - K, d^2 (K: the slice's sampled shift), a gradient term gh
/// and gh * d. An op derives from it and adds step() (which passes d and gh
/// to add()) and finish().
template <class T, class P>
struct ShiftedGradSumsOp {
  using C = Cmp<T>;
  using Acc = Quad<C>;
  using Ctx = C;
  static constexpr bool kShifted = true;
  const T* g;
  const T* x;
  const P* w;
  __device__ Acc init() const { return {C(0), C(0), C(0), C(0)}; }
  __device__ C sample(int64_t off) const { return load<C>(x[off]); }
  __device__ static void add(Acc& a, C d, C gh) {
    a.a += d;
    a.b += d * d;
    a.c += gh;
    a.d += gh * d;
  }
  __device__ void combine(Acc& a, const Acc& o) const {
    a.a += o.a;
    a.b += o.b;
    a.c += o.c;
    a.d += o.d;
  }
};

template <class T, class P>
struct BatchNormGradOp : ShiftedGradSumsOp<T, P> {
  using C = Cmp<T>;
  using Acc = Quad<C>;
  using Ctx = C;
  using Sums = ShiftedGradSumsOp<T, P>;
  using Sums::g, Sums::x, Sums::w;
  const P* rmean;
  const P* rvar;
  P* gw;
  P* gb;
  C* coef;  // [C][4]: mean, k, grad_mean, scale
  int64_t count;
  bool training;
  double eps;
  __device__ void step(Acc& a, const Ctx& K, int64_t off) const {
    const C d = load<C>(x[off]) - K, gv = load<C>(g[off]);
    this->add(a, d, gv);
  }
  __device__ void finish(const Acc& a, const Ctx& K, int64_t c) const {
    C mean, invstd;
    if (training) {
      C var = std::numeric_limits<C>::quiet_NaN();
      mean = C(0);
      if (count > 0) shiftedMoments(K, a.a, a.b, count, mean, var);
      invstd = C(1) / sqrtC(var + C(eps));
    } else {
      mean = load<C>(rmean[c]);
      invstd = C(1) / sqrtC(load<C>(rvar[c]) + C(eps));
    }
    // sum(g * (x - mean)) from the shifted sums.
    const C dotp = count > 0 ? a.d - (mean - K) * a.c : C(0);
    gw[c] = store<P>(count > 0 ? dotp * invstd : C(0));
    gb[c] = store<P>(a.c);
    const bool batch_stats = training && count > 0;
    coef[4 * c] = mean;
    coef[4 * c + 1] = batch_stats ? dotp * invstd * invstd / C(count) : C(0);
    coef[4 * c + 2] = batch_stats ? a.c / C(count) : C(0);
    coef[4 * c + 3] = invstd * load<C>(w[c]);
  }
};

/// gx may be g's or x's buffer (writes_over_input): each element reads g and
/// x at its index before writing there, so no pointer here is __restrict__.
template <class T>
struct BatchNormGradApply {
  using C = Cmp<T>;
  const T* g;
  const T* x;
  T* gx;
  const C* coef;
  int64_t channels;
  __device__ void operator()(int64_t seg, int64_t i) const {
    const C* k = coef + 4 * (seg % channels);
    const C gv = load<C>(g[i]), xv = load<C>(x[i]);
    gx[i] = store<T>((gv - k[2] - (xv - k[0]) * k[1]) * k[3]);
  }
};

bool batchNormBackwardSupports(const Node& n) {
  return paramsOk(n, 1, {2, 3, 4});
}

size_t batchNormBackwardWorkspace(const Node& n) {
  const ChannelSplit c = channelSplit(n.input(1)->shape());
  return alignUp(static_cast<size_t>(c.channels) * 4 * sizeof(double)) +
         partialBytes(channelPlan(c), 4 * sizeof(double));
}

void batchNormBackwardKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                             CudaContext& ctx) {
  const ChannelSplit cs = channelSplit(in[1].shape());
  const bool training = n.i("training") != 0;
  const double eps = n.f("eps");
  auto* ws = static_cast<unsigned char*>(requireWorkspace(ctx, batchNormBackwardWorkspace(n)));
  dispatchNorm(n, 1, {2, 3, 4}, [&](auto t, auto pt) {
    using T = decltype(t);
    using P = decltype(pt);
    using C = Cmp<T>;
    C* coef = reinterpret_cast<C*>(ws);
    void* partial = ws + alignUp(static_cast<size_t>(cs.channels) * 4 * sizeof(double));
    const P* rm = training ? nullptr : in[3].as<P>();
    const P* rv = training ? nullptr : in[4].as<P>();
    const ShiftedGradSumsOp<T, P> sums{in[0].as<T>(), in[1].as<T>(), in[2].as<P>()};
    BatchNormGradOp<T, P> op{sums, rm, rv, out[1].as<P>(), out[2].as<P>(), coef, cs.batch * cs.inner, training, eps};
    runReduce(op, partial, channelPlan(cs), ctx);
    mapSegments(BatchNormGradApply<T>{in[0].as<T>(), in[1].as<T>(), out[0].as<T>(), coef, cs.channels},
                cs.batch * cs.channels, cs.inner, ctx);
  });
}

// ---- group_norm ----------------------------------------------------------------
// A (sample, group) is one contiguous run of size = (C / G) * inner: its
// statistics reduce [N * G, size] over the run.

struct GroupSplit {
  int64_t batch = 0, channels = 0, inner = 1, groups = 1, per_group = 0, size = 0;
};
GroupSplit groupSplit(const Node& n, const Shape& s) {
  GroupSplit g;
  g.batch = s[0];
  g.channels = s[1];
  for (size_t d = 2; d < s.size(); ++d) g.inner *= s[d];
  g.groups = n.i("num_groups");
  g.per_group = g.channels / g.groups;
  g.size = g.per_group * g.inner;
  return g;
}
Plan groupPlan(const GroupSplit& g) {
  return makePlan({g.batch * g.groups, g.size}, {1});
}

template <class T>
struct GroupNormStatsOp : ShiftedSumsOp<T> {
  using C = Cmp<T>;
  using Acc = Pair<C>;
  using Ctx = C;
  C* rec;  // [N * G][2]: mean, rstd
  int64_t size;
  double eps;
  __device__ void finish(const Acc& a, const Ctx& K, int64_t o) const {
    C mean = C(0), var = std::numeric_limits<C>::quiet_NaN();
    if (size > 0) shiftedMoments(K, a.a, a.b, size, mean, var);
    rec[2 * o] = mean;
    rec[2 * o + 1] = C(1) / sqrtC(var + C(eps));
  }
};

template <class T, class P>
struct GroupNormApply {
  using C = Cmp<T>;
  const T* x;
  const P* w;
  const P* b;
  T* y;
  const C* rec;
  int64_t channels, groups, per_group;
  __device__ void operator()(int64_t seg, int64_t i) const {
    const int64_t c = seg % channels, ng = (seg / channels) * groups + c / per_group;
    const C mean = rec[2 * ng], rstd = rec[2 * ng + 1], wc = load<C>(w[c]);
    const C scale = rstd * wc, shift = load<C>(b[c]) - mean * rstd * wc;
    y[i] = store<T>(load<C>(x[i]) * scale + shift);
  }
};

// NCHW only: passes/channels_last.cpp, which makes channels-last group norms, is CPU-only.
bool groupNormSupports(const Node& n) {
  return !channelsLast(n) && paramsOk(n, 0, {1, 2});
}

size_t groupNormWorkspace(const Node& n) {
  const GroupSplit g = groupSplit(n, n.input(0)->shape());
  return alignUp(static_cast<size_t>(g.batch * g.groups) * 2 * sizeof(double)) +
         partialBytes(groupPlan(g), 2 * sizeof(double));
}

void groupNormKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                     CudaContext& ctx) {
  const GroupSplit gs = groupSplit(n, in[0].shape());
  const double eps = n.f("eps");
  auto* ws = static_cast<unsigned char*>(requireWorkspace(ctx, groupNormWorkspace(n)));
  dispatchNorm(n, 0, {1, 2}, [&](auto t, auto pt) {
    using T = decltype(t);
    using P = decltype(pt);
    using C = Cmp<T>;
    C* rec = reinterpret_cast<C*>(ws);
    void* partial = ws + alignUp(static_cast<size_t>(gs.batch * gs.groups) * 2 * sizeof(double));
    runReduce(GroupNormStatsOp<T>{{in[0].as<T>()}, rec, gs.size, eps}, partial, groupPlan(gs), ctx);
    mapSegments(GroupNormApply<T, P>{in[0].as<T>(), in[1].as<P>(), in[2].as<P>(), out[0].as<T>(), rec, gs.channels,
                                     gs.groups, gs.per_group},
                gs.batch * gs.channels, gs.inner, ctx);
  });
}

// ---- group_norm_backward (g, x, w) -> (gx, gw, gb) -----------------------------
// Per (sample, group): sums of d = x - K, d^2, gh = g * w[c] and gh * d give
// mean, rstd, m1 = mean(gh), m2 = mean(gh * xhat); then
//   gx = rstd * (g * w - m1 - xhat * m2)
// and per channel gw = sum g * xhat, gb = sum g over (N, inner).

template <class T, class P>
struct GroupNormGradStatsOp : ShiftedGradSumsOp<T, P> {
  using C = Cmp<T>;
  using Acc = Quad<C>;
  using Ctx = C;
  using Sums = ShiftedGradSumsOp<T, P>;
  using Sums::g, Sums::x, Sums::w;
  C* rec;  // [N * G][4]: mean, rstd, m1, m2
  int64_t size, inner, channels;
  double eps;
  __device__ void step(Acc& a, const Ctx& K, int64_t off) const {
    const C d = load<C>(x[off]) - K;
    const C gh = load<C>(g[off]) * load<C>(w[(off / inner) % channels]);
    this->add(a, d, gh);
  }
  __device__ void finish(const Acc& a, const Ctx& K, int64_t o) const {
    C mean = C(0), var = C(0);
    if (size > 0) shiftedMoments(K, a.a, a.b, size, mean, var);
    const C rstd = C(1) / sqrtC(var + C(eps));
    rec[4 * o] = mean;
    rec[4 * o + 1] = rstd;
    rec[4 * o + 2] = size > 0 ? a.c / C(size) : C(0);
    rec[4 * o + 3] = size > 0 ? rstd * (a.d - (mean - K) * a.c) / C(size) : C(0);
  }
};

template <class T, class P>
struct GroupNormParamOp {
  using C = Cmp<T>;
  using Acc = Pair<C>;
  using Ctx = int64_t;  // the channel's group
  static constexpr bool kShifted = false;
  const T* g;
  const T* x;
  const C* rec;
  P* gw;
  P* gb;
  int64_t channels, inner, groups, per_group;
  __device__ Acc init() const { return {C(0), C(0)}; }
  __device__ Ctx ctx(int64_t c) const { return c / per_group; }
  __device__ void step(Acc& a, const Ctx& grp, int64_t off) const {
    const C* r = rec + 4 * ((off / (channels * inner)) * groups + grp);
    const C gv = load<C>(g[off]);
    a.a += gv * ((load<C>(x[off]) - r[0]) * r[1]);
    a.b += gv;
  }
  __device__ void combine(Acc& a, const Acc& o) const {
    a.a += o.a;
    a.b += o.b;
  }
  __device__ void finish(const Acc& a, const Ctx&, int64_t c) const {
    gw[c] = store<P>(a.a);
    gb[c] = store<P>(a.b);
  }
};

template <class T, class P>
struct GroupNormGradApply {
  using C = Cmp<T>;
  const T* g;
  const T* x;
  const P* w;
  T* gx;
  const C* rec;
  int64_t channels, groups, per_group;
  __device__ void operator()(int64_t seg, int64_t i) const {
    const int64_t c = seg % channels;
    const C* r = rec + 4 * ((seg / channels) * groups + c / per_group);
    const C rstd = r[1];
    gx[i] = store<T>(rstd * (load<C>(g[i]) * load<C>(w[c]) - r[2] - (load<C>(x[i]) - r[0]) * rstd * r[3]));
  }
};

bool groupNormBackwardSupports(const Node& n) {
  return !channelsLast(n) && paramsOk(n, 1, {2});
}

size_t groupNormBackwardWorkspace(const Node& n) {
  const GroupSplit g = groupSplit(n, n.input(1)->shape());
  const ChannelSplit c = channelSplit(n.input(1)->shape());
  return alignUp(static_cast<size_t>(g.batch * g.groups) * 4 * sizeof(double)) +
         partialBytes(groupPlan(g), 4 * sizeof(double)) + partialBytes(channelPlan(c), 2 * sizeof(double));
}

void groupNormBackwardKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                             CudaContext& ctx) {
  const GroupSplit gs = groupSplit(n, in[1].shape());
  const ChannelSplit cs = channelSplit(in[1].shape());
  const double eps = n.f("eps");
  auto* ws = static_cast<unsigned char*>(requireWorkspace(ctx, groupNormBackwardWorkspace(n)));
  dispatchNorm(n, 1, {2}, [&](auto t, auto pt) {
    using T = decltype(t);
    using P = decltype(pt);
    using C = Cmp<T>;
    const Plan stats_plan = groupPlan(gs), param_plan = channelPlan(cs);
    C* rec = reinterpret_cast<C*>(ws);
    unsigned char* partial1 = ws + alignUp(static_cast<size_t>(gs.batch * gs.groups) * 4 * sizeof(double));
    unsigned char* partial2 = partial1 + partialBytes(stats_plan, 4 * sizeof(double));
    const T* g = in[0].as<T>();
    const T* x = in[1].as<T>();
    const P* w = in[2].as<P>();
    runReduce(GroupNormGradStatsOp<T, P>{{g, x, w}, rec, gs.size, gs.inner, gs.channels, eps}, partial1, stats_plan,
              ctx);
    runReduce(GroupNormParamOp<T, P>{g, x, rec, out[1].as<P>(), out[2].as<P>(), gs.channels, gs.inner, gs.groups,
                                     gs.per_group},
              partial2, param_plan, ctx);
    mapSegments(GroupNormGradApply<T, P>{g, x, w, out[0].as<T>(), rec, gs.channels, gs.groups, gs.per_group},
                gs.batch * gs.channels, gs.inner, ctx);
  });
}

}  // namespace

void registerCudaNormKernels(CudaKernelRegistry& r) {
  add(r, "layer_norm", layerNormKernel, nullptr, layerNormSupports);
  add(r, "layer_norm_backward", layerNormBackwardKernel, layerNormBackwardWorkspace, layerNormBackwardSupports);
  add(r, "batch_norm", batchNormKernel, batchNormWorkspace, batchNormSupports);
  // grad_x is written by an elementwise pass after every channel's sums are
  // taken, each element after reading g and x at its index: it may overwrite
  // g or x (the op's kOutput0OverInput trait), as the CPU kernel does.
  add(r, "batch_norm_backward", batchNormBackwardKernel, batchNormBackwardWorkspace, batchNormBackwardSupports, true);
  add(r, "group_norm", groupNormKernel, groupNormWorkspace, groupNormSupports);
  add(r, "group_norm_backward", groupNormBackwardKernel, groupNormBackwardWorkspace, groupNormBackwardSupports);
}

}  // namespace kiln::cuda
