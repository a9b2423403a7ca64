// CUDA kernels of the elementwise family (core/ops/elementwise.cpp): binary
// arithmetic, comparisons and logical ops with broadcasting, `where`,
// `logical_not` and `cast`; and the source/mask ops full, arange, tril and
// triu (core/ops/shape.cpp). The unary math, activations and the *_backward
// ops are kernels_unary.cu's; the launch machinery both share is
// elementwise_launch.cuh's, the math device_math.cuh's. Results match the
// CPU bit for bit except where CUDA's libm differs from glibc's (pow: an ulp
// or two).
#include "backend/cuda/elementwise_launch.cuh"

namespace kiln::cuda {
namespace {

using namespace elementwise;

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

/// atan2 (integers arrive as floats: the op's result type is floating).
struct Atan2Op {
  static constexpr bool kIntDiv = false;
  template <class C>
  __device__ static C apply(C a, C b) {
    if constexpr (std::is_floating_point_v<C>)
      return mAtan2(a, b);
    else
      return static_cast<C>(mAtan2(static_cast<double>(a), static_cast<double>(b)));
  }
};

/// torch.xlogy: a * log(b), 0 where a == 0 unless b is NaN (integers arrive
/// as floats: the op's result type is floating).
struct XlogyOp {
  static constexpr bool kIntDiv = false;
  template <class C>
  __device__ static C apply(C a, C b) {
    if constexpr (std::is_floating_point_v<C>) {
      if (b != b) return b;
      return a == C(0) ? C(0) : a * mLog(b);
    } else {
      return static_cast<C>(apply(static_cast<double>(a), static_cast<double>(b)));
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
  add(r, "atan2", arithmeticKernel<Atan2Op>, broadcastFits, operandWorkspace);
  add(r, "xlogy", arithmeticKernel<XlogyOp>, broadcastFits, operandWorkspace);
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
  add(r, "logical_not", logicalNotKernel);
  add(r, "cast", castKernel);
  add(r, "full", fullKernel, nullptr, nullptr, false);
  add(r, "arange", arangeKernelFn, nullptr, nullptr, false);
  add(r, "tril", triangularKernelFn<false>, nullptr, nullptr, false);
  add(r, "triu", triangularKernelFn<true>, nullptr, nullptr, false);
}

}  // namespace kiln::cuda
