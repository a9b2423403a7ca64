// CPU kernels for the linalg family: `matmul` (torch.matmul semantics),
// `gemm` (matmul of matrices stored plain or transposed, BLAS's flags) and
// `linear` (x W^T + b). f32/f64 go through OpenBLAS GEMM ("blas"); a
// "cpu" kernel computes any floating dtype in float/double with plain
// loops. Batch dims broadcast with stride 0; when the right operand has no
// batch of its own, the left operand's batch folds into GEMM's M so the whole
// product is one call.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "backend/cpu/float_kernel.h"
#include "backend/cpu/unary_ops.h"

namespace kiln {
namespace {

using cpu::allocAs;
using cpu::computeDType;
using cpu::dispatchFloat;
using cpu::gemm;

/// A matmul reduced to a batch of [m,k] x [k,p] products, with each batch
/// entry's element offset into A and B (broadcast batch dims repeat offsets).
struct MatmulPlan {
  int64_t m = 1, k = 1, p = 1;
  std::vector<int64_t> a_off, b_off;  ///< one entry per output batch element
};

MatmulPlan planMatmul(const Shape& a_in, const Shape& b_in, const Shape& out_batch) {
  Shape a = a_in, b = b_in;
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  MatmulPlan plan;
  plan.m = a[a.size() - 2];
  plan.k = a.back();
  plan.p = b.back();
  // Batch strides (in matrices) of each operand, aligned right against the
  // output batch; broadcast dims get stride 0.
  const size_t r = out_batch.size();
  auto batchStrides = [&](const Shape& s) {
    std::vector<int64_t> st(r, 0);
    size_t nb = s.size() - 2, off = r - nb;
    int64_t acc = s[s.size() - 2] * s.back();
    for (size_t i = nb; i-- > 0;) {
      if (s[i] != 1) st[off + i] = acc;
      acc *= s[i];
    }
    return st;
  };
  std::vector<int64_t> sa = batchStrides(a), sb = batchStrides(b);
  int64_t count = numelOf(out_batch);
  plan.a_off.resize(static_cast<size_t>(count));
  plan.b_off.resize(static_cast<size_t>(count));
  std::vector<int64_t> idx(r, 0);
  for (int64_t e = 0; e < count; ++e) {
    int64_t oa = 0, ob = 0;
    for (size_t d = 0; d < r; ++d) {
      oa += idx[d] * sa[d];
      ob += idx[d] * sb[d];
    }
    plan.a_off[static_cast<size_t>(e)] = oa;
    plan.b_off[static_cast<size_t>(e)] = ob;
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < out_batch[d]) break;
      idx[d] = 0;
    }
  }
  return plan;
}

/// Output batch shape of a matmul node (the broadcast of both batch parts).
Shape matmulBatch(const Shape& a, const Shape& b) {
  Shape ba = a.size() > 2 ? Shape(a.begin(), a.end() - 2) : Shape{};
  Shape bb = b.size() > 2 ? Shape(b.begin(), b.end() - 2) : Shape{};
  size_t r = std::max(ba.size(), bb.size());
  Shape out(r, 1);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - ba.size() ? 1 : ba[i - (r - ba.size())];
    int64_t db = i < r - bb.size() ? 1 : bb[i - (r - bb.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

/// Plain-loop GEMM for the reference kernels: c[m,p] = op(a) op(b) + beta c,
/// a stored [m,k] (or [k,m] when trans_a), b [k,p] (or [p,k] when trans_b).
template <typename T>
void refGemm(bool trans_a, bool trans_b, int64_t m, int64_t p, int64_t k, const T* a, const T* b, T* c, T beta) {
#pragma omp parallel for if (m * p * k > 32768)
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < p; ++j) {
      double acc = 0;
      for (int64_t q = 0; q < k; ++q)
        acc += double(trans_a ? a[q * m + i] : a[i * k + q]) * double(trans_b ? b[j * k + q] : b[q * p + j]);
      c[i * p + j] = static_cast<T>(acc + (beta != T(0) ? double(beta) * double(c[i * p + j]) : 0.0));
    }
}

/// BLAS's c[m,p] = op(a) op(b) (row-major, beta 0), flags as refGemm's.
inline void blasGemm(bool ta, bool tb, int64_t m, int64_t p, int64_t k, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(p), static_cast<int>(k), 1.0f, a, static_cast<int>(ta ? m : k), b,
              static_cast<int>(tb ? k : p), 0.0f, c, static_cast<int>(p));
}
inline void blasGemm(bool ta, bool tb, int64_t m, int64_t p, int64_t k, const double* a, const double* b, double* c) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(p), static_cast<int>(k), 1.0, a, static_cast<int>(ta ? m : k), b,
              static_cast<int>(tb ? k : p), 0.0, c, static_cast<int>(p));
}

/// The batched product of matmul (flags 0) and gemm: one GEMM per output
/// batch entry, or a single one with the batch folded into M when B is shared
/// and A's matrices follow each other untransposed.
template <typename T, bool kBlas>
void productImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, bool ta, bool tb) {
  const Shape& as = in[0].shape();
  const Shape& bs = in[1].shape();
  Shape batch = matmulBatch(as, bs);
  MatmulPlan plan = planMatmul(as, bs, batch);  // offsets hold for stored-transposed matrices too
  if (ta) std::swap(plan.m, plan.k);
  if (tb) plan.p = bs[bs.size() - 2];
  Tensor& y = allocAs(n, out, 0, in[0].dtype());
  const T* a = in[0].data<T>();
  const T* b = in[1].data<T>();
  T* c = y.data<T>();
  if (plan.k == 0) {  // an empty sum: zeros (the executor's arena slot holds old data)
    std::fill(c, c + y.numel(), T(0));
    return;
  }
  if (plan.m == 0 || plan.p == 0) return;
  auto run = [&](int64_t m, const T* pa, const T* pb, T* pc) {
    if constexpr (kBlas)
      blasGemm(ta, tb, m, plan.p, plan.k, pa, pb, pc);
    else
      refGemm(ta, tb, m, plan.p, plan.k, pa, pb, pc, T(0));
  };
  const int64_t count = static_cast<int64_t>(plan.a_off.size());
  bool b_shared = std::all_of(plan.b_off.begin(), plan.b_off.end(), [](int64_t o) { return o == 0; });
  bool a_dense = !ta;
  for (int64_t e = 0; e < count && a_dense; ++e) a_dense = plan.a_off[static_cast<size_t>(e)] == e * plan.m * plan.k;
  if (b_shared && a_dense && count * plan.m <= INT32_MAX) {
    run(count * plan.m, a, b, c);
    return;
  }
  for (int64_t e = 0; e < count; ++e)
    run(plan.m, a + plan.a_off[static_cast<size_t>(e)], b + plan.b_off[static_cast<size_t>(e)],
        c + e * plan.m * plan.p);
}

template <bool kBlas>
void matmulKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { productImpl<decltype(t), kBlas>(n, in, out, false, false); });
}

template <bool kBlas>
void gemmKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  const bool ta = n.i("trans_a") != 0, tb = n.i("trans_b") != 0;
  dispatchFloat(in[0].dtype(), [&](auto t) { productImpl<decltype(t), kBlas>(n, in, out, ta, tb); });
}

/// `v` rounded to dtype `d`'s precision (bf16/f16 results computed in f32).
template <typename T>
inline T roundedTo(T v, DType d) {
  if constexpr (std::is_same_v<T, float>) {
    if (d == DType::BF16) return bf16ToFloat(floatToBf16(v));
    if (d == DType::F16) return halfToFloat(floatToHalf(v));
  }
  return v;
}

/// linear: y = bias + x @ W^T, then the activation and residual epilogues,
/// applied in one pass over the GEMM's output, chunk by chunk (each chunk
/// activated and added while in cache). The GEMM itself runs whole: cut
/// into row panels, OpenBLAS repacks W for every panel (a 4096x768x768 f32
/// linear took 3.8x as long). The residual add is the separate add's
/// arithmetic: the GEMM's result rounded to the node's own dtype first (a
/// bf16 GEMM under viaComputeType computes in f32 here), then added in the
/// compute type.
template <typename T, bool kBlas>
void linearImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const int64_t k = in[1].shape()[1], p = in[1].shape()[0];
  const int64_t m = k ? in[0].numel() / k : numelOf(Shape(in[0].shape().begin(), in[0].shape().end() - 1));
  Tensor& y = allocAs(n, out, 0, in[0].dtype());
  T* c = y.data<T>();
  T beta = T(0);
  if (linearBias(n)) {
    // Pre-fill every row with the bias and let GEMM accumulate onto it (as
    // addmm with beta = 1).
    const T* bias = in[2].data<T>();
#pragma omp parallel for if (m * p > 65536)
    for (int64_t i = 0; i < m; ++i) std::copy(bias, bias + p, c + i * p);
    beta = T(1);
  } else if (k == 0) {
    std::fill(c, c + m * p, T(0));  // an empty sum (the executor's arena slot holds old data)
  }
  if (m == 0 || p == 0) return;
  if (k > 0) {
    if constexpr (kBlas)
      gemm(true, m, p, k, in[0].data<T>(), in[1].data<T>(), c, beta);
    else
      refGemm(false, true, m, p, k, in[0].data<T>(), in[1].data<T>(), c, beta);
  }
  const bool relu = n.s("activation") == "relu";
  const T* r = linearResidual(n) ? in[in.size() - 1].data<T>() : nullptr;
  if (!relu && !r) return;
  const DType gemm_dtype = n.input(0)->dtype();  // where the unfused linear rounded its output
  const cpu::ReluOp op(n);
  cpu::parallelFor(m * p, cpu::kParallelGrain, [=](int64_t b, int64_t e) {
    if (relu) cpu::unaryRun(c + b, c + b, e - b, op);
    if (r)
      for (int64_t i = b; i < e; ++i) c[i] = roundedTo(c[i], gemm_dtype) + r[i];
  });
}

template <bool kBlas>
void linearKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { linearImpl<decltype(t), kBlas>(n, in, out); });
}

/// amp's bf16/f16 linear, its residual (f32 or its own dtype) aside.
bool linearInputsLowp(const Node& n) {
  const Value* r = linearResidual(n);
  for (Value* v : n.inputs())
    if (v != r && v->dtype() != DType::BF16 && v->dtype() != DType::F16) return false;
  return true;
}

/// BLAS takes int dimensions; larger problems go to the reference kernel.
bool fitsBlas(const Node& n) {
  if (!cpu::input0IsF32OrF64(n)) return false;
  for (Value* v : n.inputs())
    for (int64_t d : v->shape())
      if (d > INT32_MAX / 2) return false;
  return true;
}

/// amp's bf16/f16 GEMMs: through f32 SGEMM (see cpu::floatInputsLowp; a
/// linear's residual may be f32).
bool fitsBlasLowp(const Node& n) {
  if (n.is(Op::linear) ? !linearInputsLowp(n) : !cpu::floatInputsLowp(n)) return false;
  for (Value* v : n.inputs())
    for (int64_t d : v->shape())
      if (d > INT32_MAX / 2) return false;
  return true;
}

}  // namespace

void registerCpuLinalgKernels(KernelRegistry& r) {
  r.add({"matmul", "blas", "blas.matmul", 20, fitsBlas, matmulKernel<true>});
  r.add({"matmul", "cpu", "cpu.matmul", 0, nullptr, cpu::viaComputeType<matmulKernel<false>>});
  r.add({"linear", "blas", "blas.linear", 20, fitsBlas, linearKernel<true>});
  r.add({"linear", "cpu", "cpu.linear", 0, nullptr, cpu::viaComputeType<linearKernel<false>>});
  r.add({"matmul", "blas", "blas.matmul_lowp", 20, fitsBlasLowp, cpu::viaComputeType<matmulKernel<true>>});
  r.add({"gemm", "blas", "blas.gemm", 20, fitsBlas, gemmKernel<true>});
  r.add({"gemm", "cpu", "cpu.gemm", 0, nullptr, cpu::viaComputeType<gemmKernel<false>>});
  r.add({"gemm", "blas", "blas.gemm_lowp", 20, fitsBlasLowp, cpu::viaComputeType<gemmKernel<true>>});
  r.add({"linear", "blas", "blas.linear_lowp", 20, fitsBlasLowp, cpu::viaComputeType<linearKernel<true>>});
  cpu::registerCpuDnnlLinalgKernels(r);
}

}  // namespace kiln
