// channels_last convolutions (passes/channels_last.cpp) for kernels that
// read NCHW only: the reference im2col + GEMM loops. `viaNchw<F>` runs F on
// NCHW copies of the node's NHWC activations and writes its result back in
// NHWC, so every dialect can run the node (`--dialects blas,cpu` included),
// at the price of the transposes oneDNN avoids.
#pragma once

#include <cstring>
#include <span>
#include <vector>

#include "backend/kernel.h"
#include "core/ops/op_helpers.h"

namespace kiln::cpu {

/// src [a, b, c, d] -> dst [a, perm...]: dst = src permuted by NHWC<->NCHW,
/// element by element (any dtype).
inline Tensor transposeLayout(const Tensor& src, bool to_nchw) {
  const Shape& s = src.shape();
  const Shape out_shape = to_nchw ? nchwFromNhwc(s) : nhwcFromNchw(s);
  Tensor dst = Tensor::empty({src.dtype(), out_shape});
  const size_t es = dtypeSize(src.dtype());
  const auto* in = static_cast<const char*>(src.raw());
  auto* out = static_cast<char*>(dst.raw());
  // Walk the NCHW index (n, c, h, w); NHWC holds it at ((n*H + h)*W + w)*C + c.
  const Shape nchw = to_nchw ? out_shape : s;
  const int64_t N = nchw[0], C = nchw[1], H = nchw[2], W = nchw[3];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) {
          const int64_t a = ((n * C + c) * H + h) * W + w, b = ((n * H + h) * W + w) * C + c;
          std::memcpy(out + (to_nchw ? a : b) * es, in + (to_nchw ? b : a) * es, es);
        }
  return dst;
}

/// Runs kernel F on NCHW copies when the node is channels_last: inputs
/// `activations` are transposed in, and a 4-D activation output back out
/// (a weight gradient, OIHW either way, is written directly).
template <void (*F)(const Node&, std::span<const Tensor>, std::span<Tensor>, KernelContext&)>
void viaNchw(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext& ctx) {
  if (!channelsLast(n)) return F(n, in, out, ctx);
  const bool weight_grad = n.op() == "conv2d_weight_backward";
  std::vector<Tensor> nchw(in.begin(), in.end());
  nchw[0] = transposeLayout(in[0], true);
  if (weight_grad) nchw[1] = transposeLayout(in[1], true);
  if (weight_grad) return F(n, nchw, out, ctx);
  std::vector<Tensor> tmp(1);
  F(n, nchw, tmp, ctx);  // NCHW data in a tensor of the node's (NHWC) type
  const Shape& y = n.output()->shape();
  Tensor t = tmp[0];
  Tensor nchw_y = Tensor::empty({t.dtype(), nchwFromNhwc(y)});
  std::memcpy(nchw_y.raw(), t.raw(), t.bytes());
  Tensor back = transposeLayout(nchw_y, false);
  Tensor& o = allocOutput(n, out, 0);
  std::memcpy(o.raw(), back.raw(), back.bytes());
}

}  // namespace kiln::cpu
