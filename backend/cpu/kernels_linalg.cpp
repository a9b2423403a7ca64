// CPU kernels for the linalg family: `matmul` (torch.matmul semantics) and
// `linear` (x W^T + b). f32/f64 go through OpenBLAS GEMM ("blas"); a
// "cpu" kernel computes any floating dtype in float/double with plain
// loops. Batch dims broadcast with stride 0; when the right operand has no
// batch of its own, the left operand's batch folds into GEMM's M so the whole
// product is one call.
#include <algorithm>
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

/// Plain-loop GEMM for the reference kernels (c = a b or a b^T, plus beta c).
template <typename T>
void refGemm(bool trans_b, int64_t m, int64_t p, int64_t k, const T* a, const T* b, T* c, T beta) {
#pragma omp parallel for if (m * p * k > 32768)
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < p; ++j) {
      double acc = 0;
      for (int64_t q = 0; q < k; ++q) acc += double(a[i * k + q]) * double(trans_b ? b[j * k + q] : b[q * p + j]);
      c[i * p + j] = static_cast<T>(acc + (beta != T(0) ? double(beta) * double(c[i * p + j]) : 0.0));
    }
}

template <typename T, bool kBlas>
void matmulImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Shape& as = in[0].shape();
  const Shape& bs = in[1].shape();
  Shape batch = matmulBatch(as, bs);
  MatmulPlan plan = planMatmul(as, bs, batch);
  Tensor& y = allocAs(n, out, 0, in[0].dtype());
  const T* a = in[0].data<T>();
  const T* b = in[1].data<T>();
  T* c = y.data<T>();
  if (plan.k == 0) return;  // empty inner dim: zeros (already zero-filled)
  auto run = [&](int64_t m, const T* pa, const T* pb, T* pc) {
    if constexpr (kBlas)
      gemm(false, m, plan.p, plan.k, pa, pb, pc, T(0));
    else
      refGemm(false, m, plan.p, plan.k, pa, pb, pc, T(0));
  };
  const int64_t count = static_cast<int64_t>(plan.a_off.size());
  // B shared by every batch entry and A laid out contiguously batch after
  // batch: one GEMM with M = batch * m.
  bool b_shared = std::all_of(plan.b_off.begin(), plan.b_off.end(), [](int64_t o) { return o == 0; });
  bool a_dense = true;
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
  dispatchFloat(in[0].dtype(), [&](auto t) { matmulImpl<decltype(t), kBlas>(n, in, out); });
}

/// linear: y = bias + x @ W^T, then the activation epilogue. With an
/// epilogue the GEMM runs in row panels of about 256 KiB of output, each
/// activated right after it is computed, while it is still in cache.
template <typename T, bool kBlas>
void linearImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const int64_t k = in[1].shape()[1], p = in[1].shape()[0];
  const int64_t m = k ? in[0].numel() / k : numelOf(Shape(in[0].shape().begin(), in[0].shape().end() - 1));
  Tensor& y = allocAs(n, out, 0, in[0].dtype());
  T* c = y.data<T>();
  T beta = T(0);
  if (in.size() == 3) {
    // Pre-fill every row with the bias and let GEMM accumulate onto it (as
    // addmm with beta = 1).
    const T* bias = in[2].data<T>();
#pragma omp parallel for if (m * p > 65536)
    for (int64_t i = 0; i < m; ++i) std::copy(bias, bias + p, c + i * p);
    beta = T(1);
  }
  const bool relu = n.s("activation") == "relu";
  if (m == 0 || p == 0) return;
  const int64_t panel = relu ? std::max<int64_t>(16, (int64_t(256) << 10) / static_cast<int64_t>(sizeof(T) * p)) : m;
  const T* x = in[0].data<T>();
  for (int64_t r0 = 0; r0 < m; r0 += panel) {
    const int64_t rows = std::min(panel, m - r0);
    T* cp = c + r0 * p;
    if (k > 0) {
      if constexpr (kBlas)
        gemm(true, rows, p, k, x + r0 * k, in[1].data<T>(), cp, beta);
      else
        refGemm(true, rows, p, k, x + r0 * k, in[1].data<T>(), cp, beta);
    }
    if (relu) {
      const cpu::ReluOp op(n);
      cpu::parallelFor(rows * p, cpu::kParallelGrain,
                       [=](int64_t b, int64_t e) { cpu::unaryRun(cp + b, cp + b, e - b, op); });
    }
  }
}

template <bool kBlas>
void linearKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { linearImpl<decltype(t), kBlas>(n, in, out); });
}

/// BLAS takes int dimensions; larger problems go to the reference kernel.
bool fitsBlas(const Node& n) {
  if (!cpu::input0IsF32OrF64(n)) return false;
  for (Value* v : n.inputs())
    for (int64_t d : v->shape())
      if (d > INT32_MAX / 2) return false;
  return true;
}

/// amp's bf16/f16 GEMMs: through f32 SGEMM (see cpu::floatInputsLowp).
bool fitsBlasLowp(const Node& n) {
  if (!cpu::floatInputsLowp(n)) return false;
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
  r.add({"linear", "blas", "blas.linear_lowp", 20, fitsBlasLowp, cpu::viaComputeType<linearKernel<true>>});
  cpu::registerCpuDnnlLinalgKernels(r);
}

}  // namespace kiln
