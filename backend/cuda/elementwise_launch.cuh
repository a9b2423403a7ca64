// What every elementwise CUDA kernel file shares (kernels_elementwise.cu:
// arithmetic, comparisons, logical ops, where, cast and the source ops;
// kernels_unary.cu: unary math and activations, unary_backward,
// binary_backward): the arithmetic type, the one templated kernel pair every
// op runs on, operand conversion into workspace, and registration.
//
// Semantics are the CPU reference kernels' (backend/cpu/kernels_elementwise*.cpp,
// unary_ops.h, cpu_math.h, cpu_loops.h): operands are first converted to the
// computation dtype exactly as cpu::asDType/convert do (into workspace when
// their dtype differs: a 0-d f32 scalar against bf16, mixed integer widths),
// integers and bool compute in their own types (bool arithmetic in int64),
// f16/bf16 in f32 rounded once on store, f64 in f64. The math itself is
// device_math.cuh's (shared with the NVRTC fused kernels).
//
// One templated kernel pair serves every op: a contiguous kernel (operands of
// the output's size or scalars, 128-bit vector loads and stores when every
// pointer is aligned) and a broadcasting kernel (per-operand strides of up to
// kMaxDims coalesced dims, passed by value). Both are grid-stride loops.
// Only .cu files include this.
#pragma once

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
#include "backend/cuda/device_math.cuh"
#include "core/ops/op_helpers.h"

namespace kiln::cuda::elementwise {

using namespace kiln_device;

using Ins = std::span<const DeviceTensor>;
using Outs = std::span<const DeviceTensor>;

constexpr int kThreads = 256;
constexpr int kMaxDims = 8;
constexpr size_t kAlign = 256;  ///< workspace sub-buffers start on this boundary

// ---- arithmetic type (cpu_loops.h's rules; ld, st, conv: cuda_dtype.cuh) ----

/// Arithmetic type: bool computes in int64 (true + true is true).
template <class T>
using arith_t = std::conditional_t<std::is_same_v<T, bool>, int64_t, ld_t<T>>;

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

inline bool aligned(const void* p, size_t bytes) {
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
inline void convertInto(const DeviceTensor& src, void* dst, DType to, CudaContext& ctx) {
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

inline bool isCompare(const std::string& op) {
  return op == "eq" || op == "ne" || op == "lt" || op == "le" || op == "gt" || op == "ge";
}
inline bool isLogical(const std::string& op) {
  return op == "logical_and" || op == "logical_or" || op == "logical_xor";
}

/// The dtype the kernel reads operand i in (what the CPU kernel converts it to).
inline DType operandDType(const Node& n, size_t i) {
  const std::string& op = n.op();
  if (op == "where") return i == 0 ? DType::Bool : n.output()->dtype();
  if (isLogical(op)) return DType::Bool;
  if (isCompare(op)) {
    const Value *a = n.input(0), *b = n.input(1);
    return promoteOperands(a->dtype(), a->shape().empty(), b->dtype(), b->shape().empty());
  }
  return n.output()->dtype();
}

/// Workspace of the ops whose operands may need a conversion first.
inline size_t operandWorkspace(const Node& n) {
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
inline const void* operandAs(const DeviceTensor& t, DType want, Scratch& scratch, CudaContext& ctx) {
  if (t.dtype() == want) return t.data;
  void* dst = scratch.take(static_cast<size_t>(t.numel()) * dtypeSize(want));
  convertInto(t, dst, want, ctx);
  return dst;
}

/// Broadcasting ops: the geometry holds kMaxDims dims (the contiguous path, all
/// operands of the output's size or scalars, has no limit).
inline bool broadcastFits(const Node& n) {
  const TensorType& o = n.output()->type();
  if (o.rank() <= kMaxDims) return true;
  for (const Value* v : n.inputs()) {
    const int64_t m = v->type().numel();
    if (m != o.numel() && m != 1) return false;
  }
  return true;
}

inline void add(CudaKernelRegistry& r, const char* op, CudaKernelFn fn, KernelPredicate supports = nullptr,
                WorkspaceFn workspace = nullptr, bool elementwise = true) {
  CudaKernelDef k = ownCudaKernel(op, fn, workspace, supports);
  // Each loop reads index i of every operand before it writes index i (the
  // converted operands live in the workspace), so output 0 may be an input's buffer.
  k.writes_over_input = elementwise;
  r.add(std::move(k));
}

}  // namespace kiln::cuda::elementwise
