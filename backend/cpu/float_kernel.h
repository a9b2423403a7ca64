// Private helpers for the CPU linalg, nn and loss kernels: the compute dtype
// of a floating-point node (f64 stays f64, everything else runs in f32), a
// wrapper that converts f16/bf16 (or mixed) inputs to it and the results
// back, dispatch from a DType to float/double template code, and row-major
// GEMM through OpenBLAS. (cpu_loops.h, written alongside, serves the
// elementwise/reduction/shape kernels over all ten dtypes.) Kernels
// written with these helpers allocate outputs in the compute dtype and
// leave the conversion to the node's declared dtypes to `viaComputeType`.
#pragma once

#include <cblas.h>

#include <cstdint>
#include <span>
#include <utility>

#include "backend/kernel.h"
#include "core/result.h"

namespace kiln::cpu {

/// f64 computes in f64; f32, f16 and bf16 compute in f32.
inline DType computeDType(DType t) {
  return t == DType::F64 ? DType::F64 : DType::F32;
}

/// Allocate output `i` with the node's shape but dtype `dt` (the planned
/// buffer when `dt` is the node's dtype). Write every element.
inline Tensor& allocAs(const Node& n, std::span<Tensor> outputs, size_t i, DType dt) {
  if (dt == n.output(i)->dtype()) return allocOutput(n, outputs, i);
  outputs[i] = Tensor::empty({dt, n.output(i)->shape()});
  return outputs[i];
}

/// Call `fn(T{})` with T = float or double for the compute dtype `dt`.
template <typename Fn>
decltype(auto) dispatchFloat(DType dt, Fn&& fn) {
  if (dt == DType::F64) return fn(double{});
  return fn(float{});
}

/// Run kernel `F` with every floating input converted to the compute dtype of
/// input `ref` (no copies when they already have it), then convert each
/// output to the node's declared dtype. `F` must allocate floating outputs in
/// the compute dtype (allocAs) and non-floating ones (masks) in their own.
template <KernelFn F, size_t ref = 0>
void viaComputeType(const Node& n, std::span<const Tensor> inputs, std::span<Tensor> outputs, KernelContext& ctx) {
  const DType ct = computeDType(inputs[ref].dtype());
  bool convert = false;
  for (const Tensor& t : inputs) convert |= isFloating(t.dtype()) && t.dtype() != ct;
  for (size_t i = 0; i < n.numOutputs(); ++i) convert |= isFloating(n.output(i)->dtype()) && n.output(i)->dtype() != ct;
  if (!convert) return F(n, inputs, outputs, ctx);
  std::vector<Tensor> conv(inputs.begin(), inputs.end());
  for (Tensor& t : conv)
    if (isFloating(t.dtype()) && t.dtype() != ct) t = t.to(ct);
  F(n, conv, outputs, ctx);
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i].defined() && outputs[i].dtype() != n.output(i)->dtype())
      outputs[i] = outputs[i].to(n.output(i)->dtype());
}

/// Row-major c[m,p] = a[m,k] * b (b is [k,p], or [p,k] when trans_b) + beta * c.
inline void gemm(bool trans_b, int64_t m, int64_t p, int64_t k, const float* a, const float* b, float* c, float beta) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(p), static_cast<int>(k), 1.0f, a, static_cast<int>(k), b,
              static_cast<int>(trans_b ? k : p), beta, c, static_cast<int>(p));
}
inline void gemm(bool trans_b, int64_t m, int64_t p, int64_t k, const double* a, const double* b, double* c,
                 double beta) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(p), static_cast<int>(k), 1.0, a, static_cast<int>(k), b,
              static_cast<int>(trans_b ? k : p), beta, c, static_cast<int>(p));
}

/// Predicate: input 0 is f32 (the BLAS/oneDNN fast paths).
inline bool input0IsF32(const Node& n) {
  return n.input(0)->dtype() == DType::F32;
}
/// Predicate: input 0 is f32 or f64.
inline bool input0IsF32OrF64(const Node& n) {
  DType t = n.input(0)->dtype();
  return t == DType::F32 || t == DType::F64;
}

/// Predicate: every floating input is bf16 or f16 (amp's low-precision
/// ops). Their fast paths convert to f32, run the f32 BLAS/oneDNN kernel
/// (f32 accumulation) and round the result back (viaComputeType): the op
/// boundary where a GPU's low-precision GEMM rounds too.
inline bool floatInputsLowp(const Node& n) {
  bool any = false;
  for (Value* v : n.inputs()) {
    if (!isFloating(v->dtype())) continue;
    if (v->dtype() != DType::BF16 && v->dtype() != DType::F16) return false;
    any = true;
  }
  return any;
}

// The nn family is split over several files; kernels_nn.cpp registers them all.
void registerCpuConvKernels(KernelRegistry& r);
void registerCpuPoolKernels(KernelRegistry& r);
void registerCpuNormKernels(KernelRegistry& r);
void registerCpuAttentionKernels(KernelRegistry& r);
// oneDNN's bf16 matmul and linear (kernels_linalg_dnnl.cpp); registered with the linalg family.
void registerCpuDnnlLinalgKernels(KernelRegistry& r);

}  // namespace kiln::cpu
