// CUDA kernels of the elementwise family (core/ops/elementwise.cpp,
// core/ops/elementwise_grad.cpp): binary arithmetic, comparisons and logical
// ops with broadcasting, `where`, `cast`, the unary math and activations,
// unary_backward and binary_backward; and the source/mask ops full, arange,
// tril and triu (core/ops/shape.cpp).
//
// Semantics are the CPU reference kernels' (backend/cpu/kernels_elementwise*.cpp,
// unary_ops.h, cpu_math.h, cpu_loops.h): operands are first converted to the
// computation dtype exactly as cpu::asDType/convert do (into workspace when
// their dtype differs: a 0-d f32 scalar against bf16, mixed integer widths),
// integers and bool compute in their own types (bool arithmetic in int64),
// f16/bf16 in f32 rounded once on store, f64 in f64. exp and tanh use the
// CPU's own polynomials (cpu_math.h's expVec/tanhVec) and the formulas keep
// the CPU's order of operations with the multiply-adds the CPU rounds twice
// (it builds with -ffp-contract=off) written with __fmul_rn/__fadd_rn, which
// nvcc never contracts into an FMA; results then match the CPU bit for bit
// except where CUDA's libm differs from glibc's (log, log1p, expm1, sin, cos,
// erf, pow and the double-precision tanh: an ulp or two).
//
// One templated kernel pair serves every op: a contiguous kernel (operands of
// the output's size or scalars, 128-bit vector loads and stores when every
// pointer is aligned) and a broadcasting kernel (per-operand strides of up to
// kMaxDims coalesced dims, passed by value). Both are grid-stride loops.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_dtype.cuh"
#include "backend/cuda/cuda_kernel.h"
#include "core/ops/op_helpers.h"

namespace kiln::cuda {
namespace {

using Ins = std::span<const DeviceTensor>;
using Outs = std::span<const DeviceTensor>;

constexpr int kThreads = 256;
constexpr int kMaxDims = 8;
constexpr size_t kAlign = 256;  ///< workspace sub-buffers start on this boundary

// ---- arithmetic type (cpu_loops.h's rules; ld, st, conv: cuda_dtype.cuh) ----

/// Arithmetic type: bool computes in int64 (true + true is true).
template <class T>
using arith_t = std::conditional_t<std::is_same_v<T, bool>, int64_t, ld_t<T>>;

// ---- device math ------------------------------------------------------------

#define KILN_MATH1(NAME, FF, DF)            \
  template <class C>                        \
  __device__ __forceinline__ C NAME(C x) {  \
    if constexpr (std::is_same_v<C, float>) \
      return FF(x);                         \
    else                                    \
      return DF(x);                         \
  }
KILN_MATH1(mExp, expf, exp)
KILN_MATH1(mLog, logf, log)
KILN_MATH1(mLog1p, log1pf, log1p)
KILN_MATH1(mExpm1, expm1f, expm1)
KILN_MATH1(mSqrt, sqrtf, sqrt)
KILN_MATH1(mSin, sinf, sin)
KILN_MATH1(mCos, cosf, cos)
KILN_MATH1(mTanh, tanhf, tanh)
KILN_MATH1(mErf, erff, erf)
KILN_MATH1(mFabs, fabsf, fabs)
KILN_MATH1(mFloor, floorf, floor)
KILN_MATH1(mCeil, ceilf, ceil)
KILN_MATH1(mRint, rintf, rint)  // half to even, as std::nearbyint
#undef KILN_MATH1

template <class C>
__device__ __forceinline__ C mFmod(C a, C b) {
  if constexpr (std::is_same_v<C, float>)
    return fmodf(a, b);
  else
    return fmod(a, b);
}
template <class C>
__device__ __forceinline__ C mPow(C a, C b) {
  if constexpr (std::is_same_v<C, float>)
    return powf(a, b);
  else
    return pow(a, b);
}
template <class C>
__device__ __forceinline__ C mCopysign(C a, C b) {
  if constexpr (std::is_same_v<C, float>)
    return copysignf(a, b);
  else
    return copysign(a, b);
}

/// a * b, a + b, a - b rounded separately: never contracted into an FMA, so
/// a product feeding a sum rounds twice as on the CPU (-ffp-contract=off).
template <class C>
__device__ __forceinline__ C fmul(C a, C b) {
  if constexpr (std::is_same_v<C, float>)
    return __fmul_rn(a, b);
  else
    return __dmul_rn(a, b);
}
template <class C>
__device__ __forceinline__ C fadd(C a, C b) {
  if constexpr (std::is_same_v<C, float>)
    return __fadd_rn(a, b);
  else
    return __dadd_rn(a, b);
}
template <class C>
__device__ __forceinline__ C fsub(C a, C b) {
  if constexpr (std::is_same_v<C, float>)
    return __fsub_rn(a, b);
  else
    return __dsub_rn(a, b);
}

/// cpu_math.h's expVec, operation for operation (Cephes' polynomial).
__device__ __forceinline__ float expVec(float x) {
  const float xc = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);
  const float fn = __fsub_rn(__fadd_rn(__fmul_rn(xc, 1.44269504088896341f), 12582912.0f), 12582912.0f);
  float r = __fsub_rn(xc, __fmul_rn(fn, 0.693359375f));
  r = __fsub_rn(r, __fmul_rn(fn, -2.12194440e-4f));
  float p = 1.9875691500e-4f;
  p = __fadd_rn(__fmul_rn(p, r), 1.3981999507e-3f);
  p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
  p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
  p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
  p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
  p = __fadd_rn(__fadd_rn(__fmul_rn(__fmul_rn(p, r), r), r), 1.0f);
  const int n = static_cast<int>(fn), n1 = n >> 1, n2 = n - n1;
  const float y = __fmul_rn(__fmul_rn(p, __int_as_float((n1 + 127) << 23)), __int_as_float((n2 + 127) << 23));
  return x != x ? x : y;
}

/// cpu_math.h's tanhVec (Cephes' tanhf), operation for operation.
__device__ __forceinline__ float tanhVec(float x) {
  const float a = fabsf(x);
  const float z = __fmul_rn(x, x);
  float p = -5.70498872745e-3f;
  p = __fadd_rn(__fmul_rn(p, z), 2.06390887954e-2f);
  p = __fsub_rn(__fmul_rn(p, z), 5.37397155531e-2f);
  p = __fadd_rn(__fmul_rn(p, z), 1.33314422036e-1f);
  p = __fsub_rn(__fmul_rn(p, z), 3.33332819422e-1f);
  const float small = __fadd_rn(__fmul_rn(__fmul_rn(p, z), x), x);
  const float big = __fsub_rn(1.0f, __fdiv_rn(2.0f, __fadd_rn(expVec(__fmul_rn(2.0f, a)), 1.0f)));
  const float r = copysignf(a < 0.625f ? small : big, x);
  return x != x ? x : r;
}

template <class C>
__device__ __forceinline__ C expAny(C x) {
  if constexpr (std::is_same_v<C, float>)
    return expVec(x);
  else
    return exp(x);
}
template <class C>
__device__ __forceinline__ C tanhAny(C x) {
  if constexpr (std::is_same_v<C, float>)
    return tanhVec(x);
  else
    return tanh(x);
}

/// cpu_math.h's clampSelect: lo first (lo > hi gives hi), NaN stays NaN.
template <class C>
__device__ __forceinline__ C clampSel(C x, C lo, C hi) {
  const C t = x < lo ? lo : x;
  return t > hi ? hi : t;
}

// The <cmath> constants the CPU formulas use, spelled out (same doubles).
constexpr double kSqrt2 = 1.41421356237309504880;
constexpr double k2SqrtPi = 1.12837916709551257390;
constexpr double kSqrt1_2 = 0.70710678118654752440;

// ---- the two kernels every elementwise op runs on ---------------------------

template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

/// Elements per thread step of the vector path: 16 bytes of the widest operand.
template <int N, class R, class A, class B, class C>
constexpr int vecWidth() {
  size_t m = std::max(sizeof(R), sizeof(A));
  if constexpr (N >= 2) m = std::max(m, sizeof(B));
  if constexpr (N >= 3) m = std::max(m, sizeof(C));
  return static_cast<int>(16 / m);
}

/// Operand pack p (V elements), or V copies of element 0 for a broadcast scalar.
template <int V, class A>
__device__ __forceinline__ Pack<A, V> loadPack(const A* a, bool scalar, int64_t p) {
  if (!scalar) return reinterpret_cast<const Pack<A, V>*>(a)[p];
  Pack<A, V> r;
  const A v = a[0];
#pragma unroll
  for (int k = 0; k < V; ++k) r.v[k] = v;
  return r;
}

/// Every operand has the output's element count (same layout) or is a scalar
/// (bit k of `scalar_mask`). With `vec`, whole packs of V elements move as
/// 128-bit loads and stores and the tail runs element by element.
template <int N, class F, class R, class A, class B, class C>
__global__ void __launch_bounds__(kThreads)
    contiguousKernel(F f, R* out, const A* a, const B* b, const C* c, unsigned scalar_mask, int64_t n, bool vec) {
  constexpr int V = vecWidth<N, R, A, B, C>();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool sa = scalar_mask & 1u, sb = scalar_mask & 2u, sc = scalar_mask & 4u;
  int64_t done = 0;
  if (vec) {
    const int64_t packs = n / V;
    for (int64_t p = first; p < packs; p += stride) {
      const Pack<A, V> pa = loadPack<V>(a, sa, p);
      Pack<R, V> po;
      if constexpr (N == 1) {
#pragma unroll
        for (int k = 0; k < V; ++k) po.v[k] = f(pa.v[k]);
      } else if constexpr (N == 2) {
        const Pack<B, V> pb = loadPack<V>(b, sb, p);
#pragma unroll
        for (int k = 0; k < V; ++k) po.v[k] = f(pa.v[k], pb.v[k]);
      } else {
        const Pack<B, V> pb = loadPack<V>(b, sb, p);
        const Pack<C, V> pc = loadPack<V>(c, sc, p);
#pragma unroll
        for (int k = 0; k < V; ++k) po.v[k] = f(pa.v[k], pb.v[k], pc.v[k]);
      }
      reinterpret_cast<Pack<R, V>*>(out)[p] = po;
    }
    done = packs * V;
  }
  for (int64_t i = done + first; i < n; i += stride) {
    if constexpr (N == 1)
      out[i] = f(a[sa ? 0 : i]);
    else if constexpr (N == 2)
      out[i] = f(a[sa ? 0 : i], b[sb ? 0 : i]);
    else
      out[i] = f(a[sa ? 0 : i], b[sb ? 0 : i], c[sc ? 0 : i]);
  }
}

/// Broadcast geometry: the output's coalesced dims and each operand's strides
/// along them (0 where it is broadcast). The output is contiguous.
template <int N>
struct Geometry {
  int rank = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride[N][kMaxDims] = {};
};

/// Operand offsets of output element i; I is the index type of the division
/// (32-bit whenever the output fits, which is much cheaper).
template <class I, int N>
__device__ __forceinline__ void offsetsOf(const Geometry<N>& g, I i, int64_t (&off)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] = 0;
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {
    if (d >= g.rank) continue;
    const I sz = static_cast<I>(g.size[d]);
    const I coord = i % sz;
    i /= sz;
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] += static_cast<int64_t>(coord) * g.stride[k][d];
  }
}

template <int N, class F, class R, class A, class B, class C>
__global__ void __launch_bounds__(kThreads)
    broadcastKernel(F f, R* out, const A* a, const B* b, const C* c, Geometry<N> g, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool narrow = n <= INT32_MAX;
  for (int64_t i = first; i < n; i += stride) {
    int64_t off[N];
    if (narrow)
      offsetsOf<uint32_t, N>(g, static_cast<uint32_t>(i), off);
    else
      offsetsOf<uint64_t, N>(g, static_cast<uint64_t>(i), off);
    if constexpr (N == 1)
      out[i] = f(a[off[0]]);
    else if constexpr (N == 2)
      out[i] = f(a[off[0]], b[off[1]]);
    else
      out[i] = f(a[off[0]], b[off[1]], c[off[2]]);
  }
}

/// Broadcast strides of each operand against `out`, size-1 dims dropped and
/// dims every operand walks contiguously merged (cpu::detail::coalesce).
template <int N>
Geometry<N> broadcastGeometry(const Shape& out, const std::array<const Shape*, 3>& in, const Node* node) {
  const size_t r = out.size();
  std::vector<std::array<int64_t, N>> st(r);
  for (int k = 0; k < N; ++k) {
    const Shape& s = *in[k];
    const Shape contig = contiguousStrides(s);
    const size_t off = r - s.size();
    for (size_t d = 0; d < r; ++d) st[d][k] = d < off || s[d - off] == 1 ? 0 : contig[d - off];
  }
  std::vector<int64_t> sizes;
  std::vector<std::array<int64_t, N>> strides;
  for (size_t d = 0; d < r; ++d) {
    if (out[d] == 1) continue;
    bool merge = !sizes.empty();
    for (int k = 0; k < N && merge; ++k) merge = strides.back()[k] == st[d][k] * out[d];
    if (merge) {
      sizes.back() *= out[d];
      strides.back() = st[d];
    } else {
      sizes.push_back(out[d]);
      strides.push_back(st[d]);
    }
  }
  if (sizes.empty()) {
    sizes.push_back(1);
    strides.push_back({});
  }
  if (sizes.size() > static_cast<size_t>(kMaxDims))
    fail((node ? node->describe() + ": " : std::string()) + "broadcast over more than " + std::to_string(kMaxDims) +
         " non-mergeable dims is not supported by the CUDA kernels");
  Geometry<N> g;
  g.rank = static_cast<int>(sizes.size());
  for (int d = 0; d < g.rank; ++d) {
    g.size[d] = sizes[d];
    for (int k = 0; k < N; ++k) g.stride[k][d] = strides[d][k];
  }
  return g;
}

bool aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

/// out = f(operands...) over the output shape `os`, the operands broadcast.
/// R: output storage type, A/B/C: operand storage types (N of them used).
template <int N, class F, class R, class A, class B = char, class C = char>
void launch(const F& f, void* out, const Shape& os, std::array<const void*, 3> p, std::array<const Shape*, 3> s,
            CudaContext& ctx, const char* what) {
  const int64_t n = numelOf(os);
  if (n == 0) return;
  bool simple = true;
  unsigned scalar_mask = 0;
  for (int k = 0; k < N; ++k) {
    const int64_t m = numelOf(*s[k]);
    if (m == n) continue;
    if (m == 1) {
      scalar_mask |= 1u << k;
      continue;
    }
    simple = false;
  }
  R* o = static_cast<R*>(out);
  const A* pa = static_cast<const A*>(p[0]);
  const B* pb = static_cast<const B*>(p[1]);
  const C* pc = static_cast<const C*>(p[2]);
  if constexpr (N > 1) {
    if (!simple) {
      const Geometry<N> g = broadcastGeometry<N>(os, s, ctx.node);
      broadcastKernel<N, F, R, A, B, C><<<gridFor(n, kThreads), kThreads, 0, ctx.stream>>>(f, o, pa, pb, pc, g, n);
      checkLaunch(what, ctx.node);
      return;
    }
  }
  {
    // Operands of the output's size or scalars (always so with one operand).
    constexpr int V = vecWidth<N, R, A, B, C>();
    bool vec = V > 1 && n >= V && aligned(o, sizeof(R) * V);
    if (!(scalar_mask & 1u)) vec = vec && aligned(pa, sizeof(A) * V);
    if (N >= 2 && !(scalar_mask & 2u)) vec = vec && aligned(pb, sizeof(B) * V);
    if (N >= 3 && !(scalar_mask & 4u)) vec = vec && aligned(pc, sizeof(C) * V);
    contiguousKernel<N, F, R, A, B, C>
        <<<gridFor(vec ? n / V : n, kThreads), kThreads, 0, ctx.stream>>>(f, o, pa, pb, pc, scalar_mask, n, vec);
  }
  checkLaunch(what, ctx.node);
}

// ---- conversion (cast, and operands of another dtype) ------------------------

template <class From, class To>
struct ConvertF {
  __device__ To operator()(From x) const { return conv<To>(x); }
};

/// Converts `src` elementwise into `dst` (src's shape, dtype `to`).
void convertInto(const DeviceTensor& src, void* dst, DType to, CudaContext& ctx) {
  if (src.numel() == 0) return;
  if (src.dtype() == to) {  // a same-dtype cast may have been given its input's buffer (writes_over_input)
    if (dst != src.data)
      check(cudaMemcpyAsync(dst, src.data, src.bytes(), cudaMemcpyDeviceToDevice, ctx.stream), "cast copy", ctx.node);
    return;
  }
  dispatchAll(src.dtype(), "cast", [&](auto from_tag) {
    using From = decltype(from_tag);
    dispatchAll(to, "cast", [&](auto to_tag) {
      using To = decltype(to_tag);
      if constexpr (!std::is_same_v<From, To>)
        launch<1, ConvertF<From, To>, To, From>(ConvertF<From, To>{}, dst, src.shape(), {src.data}, {&src.shape()}, ctx,
                                                "cuda.cast");
    });
  });
}

bool isCompare(const std::string& op) {
  return op == "eq" || op == "ne" || op == "lt" || op == "le" || op == "gt" || op == "ge";
}
bool isLogical(const std::string& op) {
  return op == "logical_and" || op == "logical_or" || op == "logical_xor";
}

/// The dtype the kernel reads operand i in (what the CPU kernel converts it to).
DType operandDType(const Node& n, size_t i) {
  const std::string& op = n.op();
  if (op == "where") return i == 0 ? DType::Bool : n.output()->dtype();
  if (isLogical(op)) return DType::Bool;
  if (isCompare(op)) {
    const Value *a = n.input(0), *b = n.input(1);
    return promoteOperands(a->dtype(), a->shape().empty(), b->dtype(), b->shape().empty());
  }
  return n.output()->dtype();
}

size_t alignUp(size_t bytes) {
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

/// Workspace of the ops whose operands may need a conversion first.
size_t operandWorkspace(const Node& n) {
  size_t total = 0;
  for (size_t i = 0; i < n.numInputs(); ++i) {
    const DType want = operandDType(n, i);
    if (n.input(i)->dtype() != want)
      total += alignUp(static_cast<size_t>(n.input(i)->type().numel()) * dtypeSize(want));
  }
  return total ? total + kAlign : 0;
}

/// Hands out aligned pieces of ctx.workspace.
class Scratch {
 public:
  explicit Scratch(CudaContext& ctx) : ctx_(ctx) {
    const auto base = reinterpret_cast<uintptr_t>(ctx.workspace);
    next_ = (base + kAlign - 1) / kAlign * kAlign;
    end_ = base + ctx.workspace_bytes;
  }
  void* take(size_t bytes) {
    const uintptr_t p = next_;
    next_ += alignUp(bytes);
    if (!ctx_.workspace || next_ > end_)
      fail((ctx_.node ? ctx_.node->describe() + ": " : std::string()) + "CUDA workspace too small");
    return reinterpret_cast<void*>(p);
  }

 private:
  CudaContext& ctx_;
  uintptr_t next_ = 0, end_ = 0;
};

/// Operand `t` in dtype `want`: itself, or a converted copy in the workspace.
const void* operandAs(const DeviceTensor& t, DType want, Scratch& scratch, CudaContext& ctx) {
  if (t.dtype() == want) return t.data;
  void* dst = scratch.take(static_cast<size_t>(t.numel()) * dtypeSize(want));
  convertInto(t, dst, want, ctx);
  return dst;
}

// ---- binary arithmetic --------------------------------------------------------

struct AddOp {
  static constexpr bool kIntDiv = false;
  template <class C>
  __device__ static C apply(C a, C b) {
    return a + b;
  }
};
struct SubOp {
  static constexpr bool kIntDiv = false;
  template <class C>
  __device__ static C apply(C a, C b) {
    return a - b;
  }
};
struct MulOp {
  static constexpr bool kIntDiv = false;
  template <class C>
  __device__ static C apply(C a, C b) {
    return a * b;
  }
};
struct DivOp {
  static constexpr bool kIntDiv = false;
  template <class C>
  __device__ static C apply(C a, C b) {
    return a / b;
  }
};

/// Python floor division; floats as PyTorch's div_floor_floating.
struct FloorDivOp {
  static constexpr bool kIntDiv = true;
  template <class C>
  __device__ static C apply(C a, C b) {
    if constexpr (std::is_floating_point_v<C>) {
      if (b == 0) return a / b;
      const C mod = mFmod(a, b);
      C div = (a - mod) / b;
      if (mod != 0 && (b < 0) != (mod < 0)) div -= C(1);
      if (div == 0) return mCopysign(C(0), a / b);
      C fl = mFloor(div);
      if (div - fl > C(0.5)) fl += C(1);
      return fl;
    } else {
      C q = a / b;
      if constexpr (std::is_signed_v<C>)
        if ((a < 0) != (b < 0) && q * b != a) --q;
      return q;
    }
  }
};

/// Python modulo: the result takes the divisor's sign.
struct RemainderOp {
  static constexpr bool kIntDiv = true;
  template <class C>
  __device__ static C apply(C a, C b) {
    if constexpr (std::is_floating_point_v<C>) {
      C mod = mFmod(a, b);
      if (mod != 0 && (b < 0) != (mod < 0)) mod += b;
      return mod;
    } else {
      C r = a % b;
      if constexpr (std::is_signed_v<C>)
        if (r != 0 && (r < 0) != (b < 0)) r += b;
      return r;
    }
  }
};

/// Floats: pow. Integers: exponentiation by squaring; negative exponents give
/// 0 except for bases 1 and -1 (PyTorch's powi).
struct PowOp {
  static constexpr bool kIntDiv = false;
  template <class C>
  __device__ static C apply(C a, C b) {
    if constexpr (std::is_floating_point_v<C>) {
      return mPow(a, b);
    } else {
      if constexpr (std::is_signed_v<C>) {
        if (b < 0) {
          if (a == 1) return C(1);
          if (a == -1) return (b & 1) ? C(-1) : C(1);
          return C(0);
        }
      }
      C result = 1;
      while (b) {
        if (b & 1) result = static_cast<C>(result * a);
        a = static_cast<C>(a * a);
        b = static_cast<C>(b >> 1);
      }
      return result;
    }
  }
};

/// NaN from either side wins (torch.maximum / minimum).
struct MaximumOp {
  static constexpr bool kIntDiv = false;
  template <class C>
  __device__ static C apply(C a, C b) {
    if constexpr (std::is_floating_point_v<C>)
      return (a > b) | (a != a) ? a : b;
    else
      return a > b ? a : b;
  }
};
struct MinimumOp {
  static constexpr bool kIntDiv = false;
  template <class C>
  __device__ static C apply(C a, C b) {
    if constexpr (std::is_floating_point_v<C>)
      return (a < b) | (a != a) ? a : b;
    else
      return a < b ? a : b;
  }
};

template <class Op, class T>
struct ArithF {
  int* flag;
  uint64_t node;
  __device__ T operator()(T x, T y) const {
    using C = arith_t<T>;
    if constexpr (Op::kIntDiv && !kIsFloat<T>) {
      if (y == T(0)) {  // the CPU throws ZeroDivisionError: flag it, write 0
        raiseError(flag, node);
        return T(0);
      }
    }
    return conv<T>(Op::template apply<C>(static_cast<C>(ld(x)), static_cast<C>(ld(y))));
  }
};

template <class Op>
void arithmeticKernel(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const DeviceTensor& o = out[0];
  Scratch scratch(ctx);
  const void* a = operandAs(in[0], o.dtype(), scratch, ctx);
  const void* b = operandAs(in[1], o.dtype(), scratch, ctx);
  dispatchAll(o.dtype(), n.op().c_str(), [&](auto tag) {
    using T = decltype(tag);
    launch<2, ArithF<Op, T>, T, T, T>(ArithF<Op, T>{ctx.error_flag, ctx.node_index}, o.data, o.shape(), {a, b},
                                      {&in[0].shape(), &in[1].shape()}, ctx, "cuda.arithmetic");
  });
}

// ---- comparisons, logical ops, where -------------------------------------------

enum CompareCode : int { kEq, kNe, kLt, kLe, kGt, kGe };

template <class T>
struct CompareF {
  int code;
  __device__ bool operator()(T x, T y) const {
    const ld_t<T> a = ld(x), b = ld(y);
    switch (code) {
      case kEq:
        return a == b;
      case kNe:
        return a != b;
      case kLt:
        return a < b;
      case kLe:
        return a <= b;
      case kGt:
        return a > b;
      default:
        return a >= b;
    }
  }
};

/// Comparisons run in the promoted dtype of the two inputs.
template <int kCode>
void compareKernel(const Node&, Ins in, Outs out, CudaContext& ctx) {
  const DeviceTensor& o = out[0];
  const DType t = promoteOperands(in[0].dtype(), in[0].shape().empty(), in[1].dtype(), in[1].shape().empty());
  Scratch scratch(ctx);
  const void* a = operandAs(in[0], t, scratch, ctx);
  const void* b = operandAs(in[1], t, scratch, ctx);
  dispatchAll(t, "comparison", [&](auto tag) {
    using T = decltype(tag);
    launch<2, CompareF<T>, bool, T, T>(CompareF<T>{kCode}, o.data, o.shape(), {a, b}, {&in[0].shape(), &in[1].shape()},
                                       ctx, "cuda.compare");
  });
}

enum LogicalCode : int { kAnd, kOr, kXor };

struct LogicalF {
  int code;
  __device__ bool operator()(bool a, bool b) const { return code == kAnd ? a && b : code == kOr ? a || b : a != b; }
};

/// Logical ops look at each input's truthiness: both are converted to bool first.
template <int kCode>
void logicalKernel(const Node&, Ins in, Outs out, CudaContext& ctx) {
  Scratch scratch(ctx);
  const void* a = operandAs(in[0], DType::Bool, scratch, ctx);
  const void* b = operandAs(in[1], DType::Bool, scratch, ctx);
  launch<2, LogicalF, bool, bool, bool>(LogicalF{kCode}, out[0].data, out[0].shape(), {a, b},
                                        {&in[0].shape(), &in[1].shape()}, ctx, "cuda.logical");
}

template <class T>
struct WhereF {
  __device__ T operator()(bool c, T a, T b) const { return c ? a : b; }
};

void whereKernel(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const DeviceTensor& o = out[0];
  Scratch scratch(ctx);
  const void* c = operandAs(in[0], DType::Bool, scratch, ctx);
  const void* a = operandAs(in[1], o.dtype(), scratch, ctx);
  const void* b = operandAs(in[2], o.dtype(), scratch, ctx);
  dispatchAll(o.dtype(), n.op().c_str(), [&](auto tag) {
    using T = decltype(tag);
    launch<3, WhereF<T>, T, bool, T, T>(WhereF<T>{}, o.data, o.shape(), {c, a, b},
                                        {&in[0].shape(), &in[1].shape(), &in[2].shape()}, ctx, "cuda.where");
  });
}

template <class T>
struct LogicalNotF {
  __device__ bool operator()(T x) const { return !conv<bool>(x); }
};

void logicalNotKernel(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  dispatchAll(in[0].dtype(), n.op().c_str(), [&](auto tag) {
    using T = decltype(tag);
    launch<1, LogicalNotF<T>, bool, T>(LogicalNotF<T>{}, out[0].data, out[0].shape(), {in[0].data}, {&in[0].shape()},
                                       ctx, "cuda.logical_not");
  });
}

void castKernel(const Node&, Ins in, Outs out, CudaContext& ctx) {
  convertInto(in[0], out[0].data, out[0].dtype(), ctx);
}

// ---- unary ops: math functors operator()(C x) on the compute type ---------------

#define KILN_UNARY(NAME, ...)            \
  struct NAME {                          \
    explicit NAME(const Node&) {}        \
    template <class C>                   \
    __device__ C operator()(C x) const { \
      return __VA_ARGS__;                \
    }                                    \
  };

KILN_UNARY(ExpM, expAny(x))
KILN_UNARY(LogM, mLog(x))
KILN_UNARY(Log1pM, mLog1p(x))
KILN_UNARY(SqrtM, mSqrt(x))
KILN_UNARY(RsqrtM, C(1) / mSqrt(x))
KILN_UNARY(ReciprocalM, C(1) / x)
KILN_UNARY(SinM, mSin(x))
KILN_UNARY(CosM, mCos(x))
KILN_UNARY(TanhM, tanhAny(x))
KILN_UNARY(SigmoidM, C(1) / (C(1) + expAny(-x)))
KILN_UNARY(ErfM, mErf(x))
KILN_UNARY(FloorM, mFloor(x))
KILN_UNARY(CeilM, mCeil(x))
KILN_UNARY(RoundM, mRint(x))
KILN_UNARY(SiluM, x / (C(1) + expAny(-x)))
KILN_UNARY(MishM, x* mTanh(mLog1p(mExp(x))))
KILN_UNARY(HardswishM, x* clampSel(x + C(3), C(0), C(6)) / C(6))
KILN_UNARY(HardsigmoidM, clampSel(x + C(3), C(0), C(6)) / C(6))
#undef KILN_UNARY

/// gelu's `approximate` ("none" or "tanh"; anything else fails, as on the CPU).
bool geluTanh(const Node& n) {
  const std::string& a = n.s("approximate");
  if (a != "none" && a != "tanh") opFail(n, "approximate must be \"none\" or \"tanh\", got \"" + a + "\"");
  return a == "tanh";
}

template <bool kTanh>
struct GeluM {
  explicit GeluM(const Node&) {}
  template <class C>
  __device__ C operator()(C x) const {
    if constexpr (kTanh) {
      const C beta = C(kSqrt2 * k2SqrtPi * 0.5), kappa = C(0.044715);
      const C inner = beta * fadd(x, fmul(kappa, x * x * x));
      return C(0.5) * x * (C(1) + tanhAny(inner));
    } else {
      return x * C(0.5) * (C(1) + mErf(x * C(kSqrt1_2)));
    }
  }
};

/// clamp and hardtanh on floating types: NaN stays NaN; min > max gives max.
struct ClampM {
  double lo, hi;
  explicit ClampM(const Node& n)
      : lo(n.f(n.op() == "hardtanh" ? "min_val" : "min")), hi(n.f(n.op() == "hardtanh" ? "max_val" : "max")) {}
  template <class C>
  __device__ C operator()(C x) const {
    return clampSel(x, C(lo), C(hi));
  }
};

/// Integer clamp bound: rounded inwards and saturated to C's range (unary_ops.h).
template <class C>
C clampBound(double v, bool up) {
  constexpr double kMin = static_cast<double>(std::numeric_limits<C>::lowest());
  constexpr double kMax = static_cast<double>(std::numeric_limits<C>::max());
  v = up ? std::ceil(v) : std::floor(v);
  if (v <= kMin) return std::numeric_limits<C>::lowest();
  if (v >= kMax) return std::numeric_limits<C>::max();
  return static_cast<C>(v);
}

template <class C>
struct ClampIntM {
  C lo, hi;
  __device__ C operator()(C x) const {
    const C m = x < lo ? lo : x;  // std::max(x, lo)
    return hi < m ? hi : m;       // std::min(m, hi)
  }
};

struct LeakyReluM {
  double slope;
  explicit LeakyReluM(const Node& n) : slope(n.f("negative_slope")) {}
  template <class C>
  __device__ C operator()(C x) const {
    return x > C(0) ? x : x * C(slope);
  }
};

struct EluM {
  double alpha;
  explicit EluM(const Node& n) : alpha(n.f("alpha")) {}
  template <class C>
  __device__ C operator()(C x) const {
    return x <= C(0) ? mExpm1(x) * C(alpha) : x;
  }
};

struct SoftplusM {
  double beta, threshold;
  explicit SoftplusM(const Node& n) : beta(n.f("beta")), threshold(n.f("threshold")) {}
  template <class C>
  __device__ C operator()(C x) const {
    return x * C(beta) > C(threshold) ? x : mLog1p(mExp(x * C(beta))) / C(beta);
  }
};

// Unary ops on every dtype.
struct NegM {
  explicit NegM(const Node&) {}
  template <class C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_same_v<C, bool>)
      return x;
    else
      return static_cast<C>(-x);
  }
};
struct AbsM {
  explicit AbsM(const Node&) {}
  template <class C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>)
      return mFabs(x);
    else if constexpr (std::is_signed_v<C>)
      return static_cast<C>(x < 0 ? -x : x);
    else
      return x;
  }
};
struct ReluM {  // x < 0 ? 0 : x keeps NaN
  explicit ReluM(const Node&) {}
  template <class C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_same_v<C, bool> || std::is_unsigned_v<C>)
      return x;
    else
      return x < C(0) ? C(0) : x;
  }
};
struct SignM {  // (0 < x) - (x < 0): sign(NaN) is 0
  explicit SignM(const Node&) {}
  template <class C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_same_v<C, bool> || std::is_unsigned_v<C>)
      return static_cast<C>(x != 0);
    else
      return static_cast<C>((C(0) < x) - (x < C(0)));
  }
};

template <class T, class M>
struct UnaryF {
  M m;
  __device__ T operator()(T x) const { return st<T>(m(ld(x))); }
};

template <class T, class M>
void unaryLaunch(const M& m, Ins in, Outs out, CudaContext& ctx) {
  launch<1, UnaryF<T, M>, T, T>(UnaryF<T, M>{m}, out[0].data, out[0].shape(), {in[0].data}, {&in[0].shape()}, ctx,
                                "cuda.unary");
}

template <class M, bool kFloatOnly>
void unaryKernel(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const M m(n);
  auto body = [&](auto tag) { unaryLaunch<decltype(tag)>(m, in, out, ctx); };
  if constexpr (kFloatOnly)
    dispatchFloating(in[0].dtype(), n.op().c_str(), body);
  else
    dispatchAll(in[0].dtype(), n.op().c_str(), body);
}

void geluKernel(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  if (geluTanh(n))
    unaryKernel<GeluM<true>, true>(n, in, out, ctx);
  else
    unaryKernel<GeluM<false>, true>(n, in, out, ctx);
}

/// clamp: floating types clamp in their compute type, integers and bool to
/// the bounds rounded inwards and saturated (unary_ops.h's ClampOp).
void clampKernel(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  dispatchAll(in[0].dtype(), "clamp", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kIsFloat<T>) {
      unaryLaunch<T>(ClampM(n), in, out, ctx);
    } else {
      const ClampIntM<T> m{clampBound<T>(n.f("min"), true), clampBound<T>(n.f("max"), false)};
      unaryLaunch<T>(m, in, out, ctx);
    }
  });
}

// ---- unary_backward: operator()(C g, C v), v = x (or y, see elementwise_grad.cpp)

#define KILN_UNARY_GRAD(NAME, ...)            \
  struct NAME {                               \
    template <class C>                        \
    __device__ C operator()(C g, C v) const { \
      __VA_ARGS__                             \
    }                                         \
  };

KILN_UNARY_GRAD(AbsG, return g * C((C(0) < v) - (v < C(0)));)
KILN_UNARY_GRAD(Log1pG, return g / (v + C(1));)
KILN_UNARY_GRAD(SqrtG, return g / (C(2) * v);)
KILN_UNARY_GRAD(RsqrtG, return C(-0.5) * g * (v * v * v);)
KILN_UNARY_GRAD(ReciprocalG, return -g * (v * v);)
KILN_UNARY_GRAD(SinG, return g * mCos(v);)
KILN_UNARY_GRAD(CosG, return g * -mSin(v);)
KILN_UNARY_GRAD(TanhG, return g * fsub(C(1), fmul(v, v));)
KILN_UNARY_GRAD(SigmoidG, return g * ((C(1) - v) * v);)
KILN_UNARY_GRAD(ErfG, return C(k2SqrtPi) * expAny(-(v * v)) * g;)
KILN_UNARY_GRAD(SiluG, const C s = C(1) / (C(1) + expAny(-v)); return g * s * fadd(C(1), fmul(v, C(1) - s));)
KILN_UNARY_GRAD(MishG, const C s = C(1) / (C(1) + mExp(-v)); const C t = mTanh(mLog1p(mExp(v)));
                return g * fadd(t, fmul(v* s, fsub(C(1), fmul(t, t))));)
KILN_UNARY_GRAD(HardswishG, return v < C(-3) ? C(0) : (v <= C(3) ? g * (v / C(3) + C(0.5)) : g);)
// PyTorch multiplies by the float constant 1.0f / 6.0f in every dtype (as the CPU kernel).
KILN_UNARY_GRAD(HardsigmoidG, return (v > C(-3)) & (v < C(3)) ? g * C(1.0f / 6.0f) : C(0);)
#undef KILN_UNARY_GRAD

/// clamp passes the gradient on min <= x <= max; hardtanh only strictly inside.
struct ClampG {
  double lo, hi;
  bool strict;
  explicit ClampG(const Node& n)
      : lo(n.f(n.s("fn") == "hardtanh" ? "min_val" : "min")),
        hi(n.f(n.s("fn") == "hardtanh" ? "max_val" : "max")),
        strict(n.s("fn") == "hardtanh") {}
  template <class C>
  __device__ C operator()(C g, C v) const {
    if (strict) return (v <= C(lo)) | (v >= C(hi)) ? C(0) : g;
    return (v >= C(lo)) & (v <= C(hi)) ? g : C(0);
  }
};

template <bool kTanh>
struct GeluG {
  template <class C>
  __device__ C operator()(C g, C x) const {
    if constexpr (kTanh) {
      const C beta = C(kSqrt2 * k2SqrtPi * 0.5), kappa = C(0.044715);
      const C x_sq = x * x, inner = beta * fadd(x, fmul(kappa, x_sq * x)), t = tanhAny(inner);
      const C left = C(0.5) * x, right = C(1) + t;
      const C right_derivative = left * fsub(C(1), fmul(t, t)) * (beta * fadd(C(1), fmul(C(3) * kappa, x_sq)));
      return g * fadd(fmul(C(0.5), right), right_derivative);
    } else {
      const C cdf = C(0.5) * (C(1) + mErf(x * C(kSqrt1_2)));
      const C pdf = C(k2SqrtPi * kSqrt1_2 * 0.5) * expAny(x * x * C(-0.5));
      return g * fadd(cdf, fmul(x, pdf));
    }
  }
};

struct LeakyReluG {
  double slope;
  template <class C>
  __device__ C operator()(C g, C x) const {
    return x > C(0) ? g : g * C(slope);
  }
};

struct EluG {
  double alpha;
  template <class C>
  __device__ C operator()(C g, C x) const {
    return x <= C(0) ? g * C(alpha) * expAny(x) : g;
  }
};

struct SoftplusG {
  double beta, threshold;
  template <class C>
  __device__ C operator()(C g, C x) const {
    const C z = expAny(x * C(beta));
    return x * C(beta) > C(threshold) ? g : g * z / (z + C(1));
  }
};

template <class T, class G>
struct UnaryGradF {
  G grad;
  __device__ T operator()(T g, T v) const { return st<T>(grad(ld(g), ld(v))); }
};

template <class G>
void unaryGradLaunch(const G& grad, Ins in, Outs out, CudaContext& ctx) {
  const DeviceTensor& o = out[0];
  Scratch scratch(ctx);
  const void* g = operandAs(in[0], o.dtype(), scratch, ctx);
  const void* v = operandAs(in[1], o.dtype(), scratch, ctx);
  dispatchFloating(o.dtype(), "unary_backward", [&](auto tag) {
    using T = decltype(tag);
    launch<2, UnaryGradF<T, G>, T, T, T>(UnaryGradF<T, G>{grad}, o.data, o.shape(), {g, v},
                                         {&in[0].shape(), &in[1].shape()}, ctx, "cuda.unary_backward");
  });
}

void unaryBackwardKernel(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const std::string& fn = n.s("fn");
  if (fn == "abs") return unaryGradLaunch(AbsG{}, in, out, ctx);
  if (fn == "clamp" || fn == "hardtanh") return unaryGradLaunch(ClampG(n), in, out, ctx);
  if (fn == "log1p") return unaryGradLaunch(Log1pG{}, in, out, ctx);
  if (fn == "sqrt") return unaryGradLaunch(SqrtG{}, in, out, ctx);
  if (fn == "rsqrt") return unaryGradLaunch(RsqrtG{}, in, out, ctx);
  if (fn == "reciprocal") return unaryGradLaunch(ReciprocalG{}, in, out, ctx);
  if (fn == "sin") return unaryGradLaunch(SinG{}, in, out, ctx);
  if (fn == "cos") return unaryGradLaunch(CosG{}, in, out, ctx);
  if (fn == "tanh") return unaryGradLaunch(TanhG{}, in, out, ctx);
  if (fn == "sigmoid") return unaryGradLaunch(SigmoidG{}, in, out, ctx);
  if (fn == "erf") return unaryGradLaunch(ErfG{}, in, out, ctx);
  if (fn == "silu") return unaryGradLaunch(SiluG{}, in, out, ctx);
  if (fn == "mish") return unaryGradLaunch(MishG{}, in, out, ctx);
  if (fn == "hardswish") return unaryGradLaunch(HardswishG{}, in, out, ctx);
  if (fn == "hardsigmoid") return unaryGradLaunch(HardsigmoidG{}, in, out, ctx);
  if (fn == "gelu") {
    if (geluTanh(n)) return unaryGradLaunch(GeluG<true>{}, in, out, ctx);
    return unaryGradLaunch(GeluG<false>{}, in, out, ctx);
  }
  if (fn == "leaky_relu") return unaryGradLaunch(LeakyReluG{n.f("negative_slope")}, in, out, ctx);
  if (fn == "elu") return unaryGradLaunch(EluG{n.f("alpha")}, in, out, ctx);
  if (fn == "softplus") return unaryGradLaunch(SoftplusG{n.f("beta"), n.f("threshold")}, in, out, ctx);
  opFail(n, "no CUDA kernel for fn \"" + fn + "\"");
}

// ---- binary_backward: operator()(C g, C a, C b) for the input `input` -----------

struct DivG {
  int64_t input;
  template <class C>
  __device__ C operator()(C g, C a, C b) const {
    return input == 0 ? g / b : -g * ((a / b) / b);
  }
};

/// d/da = b a^(b-1) (0 where b == 0); d/db = a^b log(a) (0 where a == 0 and b >= 0).
struct PowG {
  int64_t input;
  template <class C>
  __device__ C operator()(C g, C a, C b) const {
    if (input == 0) return b == C(0) ? C(0) : g * (b * mPow(a, b - C(1)));
    return g * ((a == C(0)) & (b >= C(0)) ? C(0) : mPow(a, b) * mLog(a));
  }
};

/// Ties split the gradient in half; a NaN on either side gives both the full g.
struct MaximumG {
  int64_t input;
  template <class C>
  __device__ C operator()(C g, C a, C b) const {
    const C r = a == b ? g / C(2) : g;
    return (input == 0 ? a < b : a > b) ? C(0) : r;
  }
};
struct MinimumG {
  int64_t input;
  template <class C>
  __device__ C operator()(C g, C a, C b) const {
    const C r = a == b ? g / C(2) : g;
    return (input == 0 ? a > b : a < b) ? C(0) : r;
  }
};

template <class T, class G>
struct BinaryGradF {
  G grad;
  __device__ T operator()(T g, T a, T b) const { return st<T>(grad(ld(g), ld(a), ld(b))); }
};

template <class G>
void binaryGradLaunch(const G& grad, Ins in, Outs out, CudaContext& ctx) {
  const DeviceTensor& o = out[0];
  Scratch scratch(ctx);
  const void* g = operandAs(in[0], o.dtype(), scratch, ctx);
  const void* a = operandAs(in[1], o.dtype(), scratch, ctx);
  const void* b = operandAs(in[2], o.dtype(), scratch, ctx);
  dispatchFloating(o.dtype(), "binary_backward", [&](auto tag) {
    using T = decltype(tag);
    launch<3, BinaryGradF<T, G>, T, T, T, T>(BinaryGradF<T, G>{grad}, o.data, o.shape(), {g, a, b},
                                             {&in[0].shape(), &in[1].shape(), &in[2].shape()}, ctx,
                                             "cuda.binary_backward");
  });
}

void binaryBackwardKernel(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const std::string& fn = n.s("fn");
  const int64_t input = n.i("input");
  if (fn == "div") return binaryGradLaunch(DivG{input}, in, out, ctx);
  if (fn == "pow") return binaryGradLaunch(PowG{input}, in, out, ctx);
  if (fn == "maximum") return binaryGradLaunch(MaximumG{input}, in, out, ctx);
  if (fn == "minimum") return binaryGradLaunch(MinimumG{input}, in, out, ctx);
  opFail(n, "no CUDA kernel for fn \"" + fn + "\"");
}

// ---- full, arange, tril, triu ------------------------------------------------------

template <class E>
__global__ void __launch_bounds__(kThreads) fillKernel(E* out, E value, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = value;
}

/// The value converted to the dtype (truncated for integers; bool is value != 0).
void fullKernel(const Node& n, Ins, Outs out, CudaContext& ctx) {
  const DeviceTensor& o = out[0];
  const int64_t count = o.numel();
  if (count == 0) return;
  uint64_t bits = 0;
  const size_t es = dtypeSize(o.dtype());
  dispatchAll(o.dtype(), "full", [&](auto tag) {
    using T = decltype(tag);
    const T v = conv<T>(n.f("value"));
    std::memcpy(&bits, &v, sizeof(T));
  });
  // A value whose bytes are all equal (0, -1, any byte-sized type) is a memset.
  bool uniform = true;
  const auto* b = reinterpret_cast<const unsigned char*>(&bits);
  for (size_t k = 1; k < es; ++k) uniform = uniform && b[k] == b[0];
  if (uniform) {
    check(cudaMemsetAsync(o.data, b[0], o.bytes(), ctx.stream), "full: cudaMemsetAsync", ctx.node);
    return;
  }
  dispatchBySize(es, &n, [&](auto etag) {
    using E = decltype(etag);
    E v;
    std::memcpy(&v, &bits, sizeof(E));
    fillKernel<E><<<gridFor(count, kThreads), kThreads, 0, ctx.stream>>>(static_cast<E*>(o.data), v, count);
  });
  checkLaunch("cuda.full", ctx.node);
}

/// Element i is start + i * step in double (rounded as the CPU's, no FMA), then converted.
template <class T>
__global__ void __launch_bounds__(kThreads) arangeKernel(T* out, double start, double step, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = conv<T>(__dadd_rn(start, __dmul_rn(static_cast<double>(i), step)));
}

void arangeKernelFn(const Node& n, Ins, Outs out, CudaContext& ctx) {
  const DeviceTensor& o = out[0];
  const int64_t count = o.numel();
  if (count == 0) return;
  dispatchAll(o.dtype(), "arange", [&](auto tag) {
    using T = decltype(tag);
    arangeKernel<T><<<gridFor(count, kThreads), kThreads, 0, ctx.stream>>>(static_cast<T*>(o.data), n.f("start"),
                                                                           n.f("step"), count);
  });
  checkLaunch("cuda.arange", ctx.node);
}

/// triu keeps j - i >= diagonal, tril keeps j - i <= diagonal, over the last
/// two dims; the rest is 0 (all-zero bits: 0 in every dtype).
template <class E>
__global__ void __launch_bounds__(kThreads)
    triangularKernel(E* out, const E* in, int64_t rows, int64_t cols, int64_t diagonal, bool upper, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += stride) {
    const int64_t j = t % cols, i = (t / cols) % rows;
    const bool keep = upper ? j >= i + diagonal : j <= i + diagonal;
    out[t] = keep ? in[t] : E(0);
  }
}

template <bool kUpper>
void triangularKernelFn(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const DeviceTensor& o = out[0];
  const int64_t count = o.numel();
  if (count == 0) return;
  const Shape& s = o.shape();
  const int64_t rows = s[s.size() - 2], cols = s[s.size() - 1];
  dispatchBySize(dtypeSize(o.dtype()), &n, [&](auto etag) {
    using E = decltype(etag);
    triangularKernel<E><<<gridFor(count, kThreads), kThreads, 0, ctx.stream>>>(
        static_cast<E*>(o.data), static_cast<const E*>(in[0].data), rows, cols, n.i("diagonal"), kUpper, count);
  });
  checkLaunch(kUpper ? "cuda.triu" : "cuda.tril", ctx.node);
}

// ---- registration ----------------------------------------------------------------

/// Broadcasting ops: the geometry holds kMaxDims dims (the contiguous path, all
/// operands of the output's size or scalars, has no limit).
bool broadcastFits(const Node& n) {
  const TensorType& o = n.output()->type();
  if (o.rank() <= kMaxDims) return true;
  for (const Value* v : n.inputs()) {
    const int64_t m = v->type().numel();
    if (m != o.numel() && m != 1) return false;
  }
  return true;
}

void add(CudaKernelRegistry& r, const char* op, CudaKernelFn fn, KernelPredicate supports = nullptr,
         WorkspaceFn workspace = nullptr, bool elementwise = true) {
  CudaKernelDef k;
  k.op = op;
  k.dialect = "cuda";
  k.name = std::string("cuda.") + op;
  k.priority = 0;
  k.supports = supports;
  k.fn = fn;
  k.workspace = workspace;
  // Each loop reads index i of every operand before it writes index i (the
  // converted operands live in the workspace), so output 0 may be an input's buffer.
  k.writes_over_input = elementwise;
  r.add(std::move(k));
}

}  // namespace

void registerCudaElementwiseKernels(CudaKernelRegistry& r) {
  add(r, "add", arithmeticKernel<AddOp>, broadcastFits, operandWorkspace);
  add(r, "sub", arithmeticKernel<SubOp>, broadcastFits, operandWorkspace);
  add(r, "mul", arithmeticKernel<MulOp>, broadcastFits, operandWorkspace);
  add(r, "div", arithmeticKernel<DivOp>, broadcastFits, operandWorkspace);
  add(r, "floor_div", arithmeticKernel<FloorDivOp>, broadcastFits, operandWorkspace);
  add(r, "remainder", arithmeticKernel<RemainderOp>, broadcastFits, operandWorkspace);
  add(r, "pow", arithmeticKernel<PowOp>, broadcastFits, operandWorkspace);
  add(r, "maximum", arithmeticKernel<MaximumOp>, broadcastFits, operandWorkspace);
  add(r, "minimum", arithmeticKernel<MinimumOp>, broadcastFits, operandWorkspace);
  add(r, "eq", compareKernel<kEq>, broadcastFits, operandWorkspace);
  add(r, "ne", compareKernel<kNe>, broadcastFits, operandWorkspace);
  add(r, "lt", compareKernel<kLt>, broadcastFits, operandWorkspace);
  add(r, "le", compareKernel<kLe>, broadcastFits, operandWorkspace);
  add(r, "gt", compareKernel<kGt>, broadcastFits, operandWorkspace);
  add(r, "ge", compareKernel<kGe>, broadcastFits, operandWorkspace);
  add(r, "logical_and", logicalKernel<kAnd>, broadcastFits, operandWorkspace);
  add(r, "logical_or", logicalKernel<kOr>, broadcastFits, operandWorkspace);
  add(r, "logical_xor", logicalKernel<kXor>, broadcastFits, operandWorkspace);
  add(r, "where", whereKernel, broadcastFits, operandWorkspace);

  add(r, "neg", unaryKernel<NegM, false>);
  add(r, "abs", unaryKernel<AbsM, false>);
  add(r, "relu", unaryKernel<ReluM, false>);
  add(r, "sign", unaryKernel<SignM, false>);
  add(r, "clamp", clampKernel);
  add(r, "logical_not", logicalNotKernel);
  add(r, "cast", castKernel);

  add(r, "exp", unaryKernel<ExpM, true>);
  add(r, "log", unaryKernel<LogM, true>);
  add(r, "log1p", unaryKernel<Log1pM, true>);
  add(r, "sqrt", unaryKernel<SqrtM, true>);
  add(r, "rsqrt", unaryKernel<RsqrtM, true>);
  add(r, "reciprocal", unaryKernel<ReciprocalM, true>);
  add(r, "sin", unaryKernel<SinM, true>);
  add(r, "cos", unaryKernel<CosM, true>);
  add(r, "tanh", unaryKernel<TanhM, true>);
  add(r, "sigmoid", unaryKernel<SigmoidM, true>);
  add(r, "erf", unaryKernel<ErfM, true>);
  add(r, "floor", unaryKernel<FloorM, true>);
  add(r, "ceil", unaryKernel<CeilM, true>);
  add(r, "round", unaryKernel<RoundM, true>);
  add(r, "silu", unaryKernel<SiluM, true>);
  add(r, "mish", unaryKernel<MishM, true>);
  add(r, "hardswish", unaryKernel<HardswishM, true>);
  add(r, "hardsigmoid", unaryKernel<HardsigmoidM, true>);
  add(r, "gelu", geluKernel);
  add(r, "hardtanh", unaryKernel<ClampM, true>);
  add(r, "leaky_relu", unaryKernel<LeakyReluM, true>);
  add(r, "elu", unaryKernel<EluM, true>);
  add(r, "softplus", unaryKernel<SoftplusM, true>);

  add(r, "unary_backward", unaryBackwardKernel, nullptr, operandWorkspace);
  add(r, "binary_backward", binaryBackwardKernel, broadcastFits, operandWorkspace);

  add(r, "full", fullKernel, nullptr, nullptr, false);
  add(r, "arange", arangeKernelFn, nullptr, nullptr, false);
  add(r, "tril", triangularKernelFn<false>, nullptr, nullptr, false);
  add(r, "triu", triangularKernelFn<true>, nullptr, nullptr, false);
}

}  // namespace kiln::cuda
