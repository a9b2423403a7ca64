// The fused attention kernels on packed AVX-512 tiles (f32, and bf16 with
// AVX512_BF16); kernels_attention.cpp falls back to its BLAS tiles.
#pragma once

#include <span>

#include "core/ir.h"
#include "core/tensor.h"

namespace kiln::cpu {

/// attention / attention_backward for f32 or bf16 q, k, v on this CPU's
/// packed tiles; false (nothing written) when the CPU lacks the
/// instructions for the dtype.
bool attentionPacked(const Node& n, std::span<const Tensor> in, std::span<Tensor> out);
bool attentionBackwardPacked(const Node& n, std::span<const Tensor> in, std::span<Tensor> out);

}  // namespace kiln::cpu
