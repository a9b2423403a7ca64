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

/// Copies the elements of an [N, C, H, W] tensor between NCHW and NHWC
/// storage (`to_nchw`: src is NHWC), element by element (any dtype).
inline void transposeLayout(const void* src, void* dst, DType dt, const Shape& nchw, bool to_nchw) {
  const size_t es = dtypeSize(dt);
  const auto* in = static_cast<const char*>(src);
  auto* out = static_cast<char*>(dst);
  const int64_t N = nchw[0], C = nchw[1], H = nchw[2], W = nchw[3];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) {
          // (n, c, h, w) in NCHW storage, and in NHWC storage.
          const int64_t a = ((n * C + c) * H + h) * W + w, b = ((n * H + h) * W + w) * C + c;
          std::memcpy(out + (to_nchw ? a : b) * es, in + (to_nchw ? b : a) * es, es);
        }
}

/// An NCHW copy of the NHWC tensor t.
inline Tensor nchwCopy(const Tensor& t) {
  const Shape nchw = nchwFromNhwc(t.shape());
  Tensor out = Tensor::empty({t.dtype(), nchw});
  transposeLayout(t.raw(), out.raw(), t.dtype(), nchw, true);
  return out;
}

/// Runs kernel F on NCHW copies when the node is channels_last: its NHWC
/// activation inputs are transposed in, and an activation output back out
/// (a weight gradient, OIHW either way, is written directly).
template <void (*F)(const Node&, std::span<const Tensor>, std::span<Tensor>, KernelContext&)>
void viaNchw(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext& ctx) {
  if (!channelsLast(n)) return F(n, in, out, ctx);
  const bool weight_grad = n.is(Op::conv2d_weight_backward);
  std::vector<Tensor> nchw(in.begin(), in.end());
  nchw[0] = nchwCopy(in[0]);
  if (weight_grad) {
    nchw[1] = nchwCopy(in[1]);
    return F(n, nchw, out, ctx);
  }
  std::vector<Tensor> tmp(1);
  F(n, nchw, tmp, ctx);  // NCHW data in a tensor of the node's (NHWC) type
  Tensor& y = allocOutput(n, out, 0);
  transposeLayout(tmp[0].raw(), y.raw(), y.dtype(), nchwFromNhwc(y.shape()), false);
}

}  // namespace kiln::cpu
