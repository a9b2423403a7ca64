// Options of automatic mixed precision (passes/amp.h): which low-precision
// dtype, and the dynamic loss scaling of fp16 (torch.cuda.amp.GradScaler's
// defaults).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/dtype.h"

namespace kiln {

/// --amp: none (everything in the model's dtype), bf16 or fp16.
enum class AmpMode { None, Bf16, Fp16 };

/// Parse "none", "bf16" or "fp16"; nullopt otherwise.
inline std::optional<AmpMode> parseAmpMode(std::string_view s) {
  if (s == "none") return AmpMode::None;
  if (s == "bf16") return AmpMode::Bf16;
  if (s == "fp16") return AmpMode::Fp16;
  return std::nullopt;
}

inline std::string_view ampModeName(AmpMode m) {
  return m == AmpMode::Bf16 ? "bf16" : m == AmpMode::Fp16 ? "fp16" : "none";
}

/// The dtype low-precision ops run in (F32 for None).
inline DType ampDType(AmpMode m) {
  return m == AmpMode::Bf16 ? DType::BF16 : m == AmpMode::Fp16 ? DType::F16 : DType::F32;
}

struct AmpOptions {
  AmpMode mode = AmpMode::None;
  /// fp16 only: dynamic loss scaling. The training step wants it; a graph
  /// that only computes gradients (kiln grad) has no optimizer to unscale
  /// them, so the CLI turns it off there. bf16 never scales (its range is f32's).
  bool loss_scaling = true;
  /// GradScaler(init_scale=2**16, growth_factor=2, backoff_factor=0.5, growth_interval=2000).
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;

  bool scalesLoss() const { return mode == AmpMode::Fp16 && loss_scaling; }
};

}  // namespace kiln
