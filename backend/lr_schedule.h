// Learning-rate schedules, evaluated on the host from the step number (the
// host always knows it, so this needs no sync) and fed to the step graph's
// `lr` input.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kiln {

struct LrSchedule {
  enum class Kind { Constant, WarmupCosine };
  Kind kind = Kind::Constant;
  int64_t warmup_steps = 0;  ///< linear warm-up from lr/warmup to lr (both kinds)
  int64_t total_steps = 0;   ///< cosine decay ends here (at min_lr)
  double min_lr = 0;

  /// Learning rate for step `step` (0-based) given the base rate: first
  /// base * (step + 1) / warmup for step < warmup (both kinds), then
  ///  constant: base (transformers' get_constant_schedule_with_warmup);
  ///  warmup_cosine: min_lr + (base - min_lr) * (1 + cos(pi * t)) / 2 with
  ///  t = (step - warmup) / max(1, total - warmup), clamped to [0, 1].
  double at(double base, int64_t step) const;
};

std::optional<LrSchedule::Kind> parseLrScheduleKind(std::string_view s);

}  // namespace kiln
