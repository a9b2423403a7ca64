#include "backend/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kiln {

double LrSchedule::at(double base, int64_t step) const {
  if (step < warmup_steps) return base * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (kind == Kind::Constant) return base;
  double span = static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
  double t = std::clamp(static_cast<double>(step - warmup_steps) / span, 0.0, 1.0);
  return min_lr + (base - min_lr) * 0.5 * (1 + std::cos(std::numbers::pi * t));
}

std::optional<LrSchedule::Kind> parseLrScheduleKind(std::string_view s) {
  if (s == "constant") return LrSchedule::Kind::Constant;
  if (s == "warmup_cosine" || s == "cosine") return LrSchedule::Kind::WarmupCosine;
  return std::nullopt;
}

}  // namespace kiln
