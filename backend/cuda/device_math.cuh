// The device math of the elementwise ops, in one place for both compilers:
// nvcc includes it in the one-op kernels (kernels_elementwise.cu,
// kernels_unary.cu), and the NVRTC codegen of fused kernels embeds its text
// at build time (CMake writes it into device_math_source.h), so a fused
// chain computes exactly what the same chain of one-op kernels computes.
//
// The formulas are the CPU reference's (backend/cpu/unary_ops.h,
// cpu_math.h, kernels_elementwise_grad.cpp) in the CPU's order of
// operations; exp and tanh in float use the CPU's own polynomials. Written
// for NVRTC too: no include directive, no standard library (overloads for float and
// double instead of type traits), an include guard rather than #pragma once
// (NVRTC sees it as the main file).
#ifndef KILN_DEVICE_MATH_CUH
#define KILN_DEVICE_MATH_CUH

namespace kiln_device {

// ---- device math -------------------------------------------------------------
__device__ __forceinline__ float mExp(float x) {
  return expf(x);
}
__device__ __forceinline__ double mExp(double x) {
  return exp(x);
}
__device__ __forceinline__ float mLog(float x) {
  return logf(x);
}
__device__ __forceinline__ double mLog(double x) {
  return log(x);
}
__device__ __forceinline__ float mLog1p(float x) {
  return log1pf(x);
}
__device__ __forceinline__ double mLog1p(double x) {
  return log1p(x);
}
__device__ __forceinline__ float mSqrt(float x) {
  return sqrtf(x);
}
__device__ __forceinline__ double mSqrt(double x) {
  return sqrt(x);
}
__device__ __forceinline__ float mSin(float x) {
  return sinf(x);
}
__device__ __forceinline__ double mSin(double x) {
  return sin(x);
}
__device__ __forceinline__ float mCos(float x) {
  return cosf(x);
}
__device__ __forceinline__ double mCos(double x) {
  return cos(x);
}
__device__ __forceinline__ float mTanh(float x) {
  return tanhf(x);
}
__device__ __forceinline__ double mTanh(double x) {
  return tanh(x);
}
__device__ __forceinline__ float mErf(float x) {
  return erff(x);
}
__device__ __forceinline__ double mErf(double x) {
  return erf(x);
}
__device__ __forceinline__ float mFabs(float x) {
  return fabsf(x);
}
__device__ __forceinline__ double mFabs(double x) {
  return fabs(x);
}
__device__ __forceinline__ float mExpm1(float x) {
  return expm1f(x);
}
__device__ __forceinline__ double mExpm1(double x) {
  return expm1(x);
}
__device__ __forceinline__ float mAtan2(float a, float b) {
  return atan2f(a, b);
}
__device__ __forceinline__ double mAtan2(double a, double b) {
  return atan2(a, b);
}
__device__ __forceinline__ float mFloor(float x) {
  return floorf(x);
}
__device__ __forceinline__ double mFloor(double x) {
  return floor(x);
}
__device__ __forceinline__ float mCeil(float x) {
  return ceilf(x);
}
__device__ __forceinline__ double mCeil(double x) {
  return ceil(x);
}
__device__ __forceinline__ float mRint(float x) {
  return rintf(x);
}  // half to even, as std::nearbyint
__device__ __forceinline__ double mRint(double x) {
  return rint(x);
}
__device__ __forceinline__ float mFmod(float a, float b) {
  return fmodf(a, b);
}
__device__ __forceinline__ double mFmod(double a, double b) {
  return fmod(a, b);
}
__device__ __forceinline__ float mPow(float a, float b) {
  return powf(a, b);
}
__device__ __forceinline__ double mPow(double a, double b) {
  return pow(a, b);
}
__device__ __forceinline__ float mCopysign(float a, float b) {
  return copysignf(a, b);
}
__device__ __forceinline__ double mCopysign(double a, double b) {
  return copysign(a, b);
}

// a * b, a + b, a - b rounded separately: never contracted into an FMA, so a
// product feeding a sum rounds twice as on the CPU (-ffp-contract=off).
// (Not fmul/fadd/fsub: C23's <math.h> has those.)
__device__ __forceinline__ float kmul(float a, float b) {
  return __fmul_rn(a, b);
}
__device__ __forceinline__ double kmul(double a, double b) {
  return __dmul_rn(a, b);
}
__device__ __forceinline__ float kadd(float a, float b) {
  return __fadd_rn(a, b);
}
__device__ __forceinline__ double kadd(double a, double b) {
  return __dadd_rn(a, b);
}
__device__ __forceinline__ float ksub(float a, float b) {
  return __fsub_rn(a, b);
}
__device__ __forceinline__ double ksub(double a, double b) {
  return __dsub_rn(a, b);
}

// cpu_math.h's expVec, operation for operation (Cephes' polynomial).
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

// cpu_math.h's tanhVec (Cephes' tanhf), operation for operation.
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

__device__ __forceinline__ float expAny(float x) {
  return expVec(x);
}
__device__ __forceinline__ double expAny(double x) {
  return exp(x);
}
__device__ __forceinline__ float tanhAny(float x) {
  return tanhVec(x);
}
__device__ __forceinline__ double tanhAny(double x) {
  return tanh(x);
}

// cpu_math.h's clampSelect: lo first (lo > hi gives hi), NaN stays NaN.
template <class C>
__device__ __forceinline__ C clampSel(C x, C lo, C hi) {
  const C t = x < lo ? lo : x;
  return t > hi ? hi : t;
}

// The <cmath> constants the CPU formulas use, spelled out (same doubles).
#define KILN_SQRT2 1.41421356237309504880
#define KILN_2_SQRTPI 1.12837916709551257390
#define KILN_SQRT1_2 0.70710678118654752440

// ---- the unary ops (the CPU's unary_ops.h) ----------------------------------
template <class C>
__device__ __forceinline__ C op_neg(C x) {
  return -x;
}
template <class C>
__device__ __forceinline__ C op_abs(C x) {
  return mFabs(x);
}
template <class C>
__device__ __forceinline__ C op_relu(C x) {
  return x < C(0) ? C(0) : x;
}
template <class C>
__device__ __forceinline__ C op_exp(C x) {
  return expAny(x);
}
template <class C>
__device__ __forceinline__ C op_log(C x) {
  return mLog(x);
}
template <class C>
__device__ __forceinline__ C op_sqrt(C x) {
  return mSqrt(x);
}
template <class C>
__device__ __forceinline__ C op_rsqrt(C x) {
  return C(1) / mSqrt(x);
}
template <class C>
__device__ __forceinline__ C op_reciprocal(C x) {
  return C(1) / x;
}
template <class C>
__device__ __forceinline__ C op_tanh(C x) {
  return tanhAny(x);
}
template <class C>
__device__ __forceinline__ C op_sigmoid(C x) {
  return C(1) / (C(1) + expAny(-x));
}
template <class C>
__device__ __forceinline__ C op_erf(C x) {
  return mErf(x);
}
template <class C>
__device__ __forceinline__ C op_silu(C x) {
  return x / (C(1) + expAny(-x));
}
template <class C>
__device__ __forceinline__ C op_hardswish(C x) {
  return x * clampSel(x + C(3), C(0), C(6)) / C(6);
}
template <class C>
__device__ __forceinline__ C op_hardsigmoid(C x) {
  return clampSel(x + C(3), C(0), C(6)) / C(6);
}
template <class C>
__device__ __forceinline__ C op_gelu_tanh(C x) {
  const C beta = C(KILN_SQRT2 * KILN_2_SQRTPI * 0.5), kappa = C(0.044715);
  const C inner = beta * kadd(x, kmul(kappa, x * x * x));
  return C(0.5) * x * (C(1) + tanhAny(inner));
}
template <class C>
__device__ __forceinline__ C op_gelu_none(C x) {
  return x * C(0.5) * (C(1) + mErf(x * C(KILN_SQRT1_2)));
}
// clamp and hardtanh: NaN stays NaN; min > max gives max.
template <class C>
__device__ __forceinline__ C op_clamp(C x, double lo, double hi) {
  return clampSel(x, C(lo), C(hi));
}
template <class C>
__device__ __forceinline__ C op_leaky_relu(C x, double slope) {
  return x > C(0) ? x : x * C(slope);
}

template <class C>
__device__ __forceinline__ C op_expm1(C x) {
  return mExpm1(x);
}
template <class C>
__device__ __forceinline__ C op_log1p(C x) {
  return mLog1p(x);
}
template <class C>
__device__ __forceinline__ C op_sin(C x) {
  return mSin(x);
}
template <class C>
__device__ __forceinline__ C op_cos(C x) {
  return mCos(x);
}
template <class C>
__device__ __forceinline__ C op_floor(C x) {
  return mFloor(x);
}
template <class C>
__device__ __forceinline__ C op_ceil(C x) {
  return mCeil(x);
}
template <class C>
__device__ __forceinline__ C op_round(C x) {
  return mRint(x);
}
template <class C>
__device__ __forceinline__ C op_mish(C x) {
  return x * mTanh(mLog1p(mExp(x)));
}
template <class C>
__device__ __forceinline__ C op_elu(C x, double alpha) {
  return x <= C(0) ? mExpm1(x) * C(alpha) : x;
}
template <class C>
__device__ __forceinline__ C op_softplus(C x, double beta, double threshold) {
  return x * C(beta) > C(threshold) ? x : mLog1p(mExp(x * C(beta))) / C(beta);
}

// ---- unary_backward (the CPU's kernels_elementwise_grad.cpp) ----------------
// g: the incoming gradient; v: the forward input x, or its output y for
// expm1, sqrt, rsqrt, reciprocal, tanh and sigmoid.
template <class C>
__device__ __forceinline__ C grad_abs(C g, C v) {
  return g * C((C(0) < v) - (v < C(0)));
}
template <class C>
__device__ __forceinline__ C grad_expm1(C g, C v) {  // v = y
  return g * (v + C(1));
}
template <class C>
__device__ __forceinline__ C grad_log1p(C g, C v) {
  return g / (v + C(1));
}
template <class C>
__device__ __forceinline__ C grad_sqrt(C g, C v) {
  return g / (C(2) * v);
}
template <class C>
__device__ __forceinline__ C grad_rsqrt(C g, C v) {
  return C(-0.5) * g * (v * v * v);
}
template <class C>
__device__ __forceinline__ C grad_reciprocal(C g, C v) {
  return -g * (v * v);
}
template <class C>
__device__ __forceinline__ C grad_sin(C g, C v) {
  return g * mCos(v);
}
template <class C>
__device__ __forceinline__ C grad_cos(C g, C v) {
  return g * -mSin(v);
}
template <class C>
__device__ __forceinline__ C grad_tanh(C g, C v) {
  return g * ksub(C(1), kmul(v, v));
}
template <class C>
__device__ __forceinline__ C grad_sigmoid(C g, C v) {
  return g * ((C(1) - v) * v);
}
template <class C>
__device__ __forceinline__ C grad_erf(C g, C v) {
  return C(KILN_2_SQRTPI) * expAny(-(v * v)) * g;
}
template <class C>
__device__ __forceinline__ C grad_silu(C g, C v) {
  const C s = C(1) / (C(1) + expAny(-v));
  return g * s * kadd(C(1), kmul(v, C(1) - s));
}
template <class C>
__device__ __forceinline__ C grad_mish(C g, C v) {
  const C s = C(1) / (C(1) + mExp(-v));
  const C t = mTanh(mLog1p(mExp(v)));
  return g * kadd(t, kmul(v * s, ksub(C(1), kmul(t, t))));
}
template <class C>
__device__ __forceinline__ C grad_hardswish(C g, C v) {
  return v < C(-3) ? C(0) : (v <= C(3) ? g * (v / C(3) + C(0.5)) : g);
}
// PyTorch multiplies by the float constant 1.0f / 6.0f in every dtype.
template <class C>
__device__ __forceinline__ C grad_hardsigmoid(C g, C v) {
  return (v > C(-3)) & (v < C(3)) ? g * C(1.0f / 6.0f) : C(0);
}
// clamp passes the gradient on min <= x <= max; hardtanh only strictly inside.
template <class C>
__device__ __forceinline__ C grad_clamp(C g, C v, double lo, double hi) {
  return (v >= C(lo)) & (v <= C(hi)) ? g : C(0);
}
template <class C>
__device__ __forceinline__ C grad_hardtanh(C g, C v, double lo, double hi) {
  return (v <= C(lo)) | (v >= C(hi)) ? C(0) : g;
}
template <class C>
__device__ __forceinline__ C grad_gelu_tanh(C g, C x) {
  const C beta = C(KILN_SQRT2 * KILN_2_SQRTPI * 0.5), kappa = C(0.044715);
  const C x_sq = x * x, inner = beta * kadd(x, kmul(kappa, x_sq * x)), t = tanhAny(inner);
  const C left = C(0.5) * x, right = C(1) + t;
  const C right_derivative = left * ksub(C(1), kmul(t, t)) * (beta * kadd(C(1), kmul(C(3) * kappa, x_sq)));
  return g * kadd(kmul(C(0.5), right), right_derivative);
}
template <class C>
__device__ __forceinline__ C grad_gelu_none(C g, C x) {
  const C cdf = C(0.5) * (C(1) + mErf(x * C(KILN_SQRT1_2)));
  const C pdf = C(KILN_2_SQRTPI * KILN_SQRT1_2 * 0.5) * expAny(x * x * C(-0.5));
  return g * kadd(cdf, kmul(x, pdf));
}
template <class C>
__device__ __forceinline__ C grad_leaky_relu(C g, C x, double slope) {
  return x > C(0) ? g : g * C(slope);
}
template <class C>
__device__ __forceinline__ C grad_elu(C g, C x, double alpha) {
  return x <= C(0) ? g * C(alpha) * expAny(x) : g;
}
template <class C>
__device__ __forceinline__ C grad_softplus(C g, C x, double beta, double threshold) {
  const C z = expAny(x * C(beta));
  return x * C(beta) > C(threshold) ? g : g * z / (z + C(1));
}

}  // namespace kiln_device

#endif  // KILN_DEVICE_MATH_CUH
