// CPU features detected at run time that change what a kernel can do fast.
#pragma once

namespace kiln::cpu {

/// True when the CPU has bf16 dot-product instructions (AVX512_BF16, or
/// AMX-BF16), so oneDNN's bf16 GEMMs and convolutions run at about twice
/// the f32 rate; elsewhere oneDNN emulates bf16 (or has no bf16 kernel) and
/// --amp bf16 only rounds like bf16.
bool cpuHasNativeBf16();

/// True when the CPU has AVX-512 (AVX512F), where oneDNN's kernels use
/// 16-wide vectors and blocked layouts.
bool cpuHasAvx512();

}  // namespace kiln::cpu
