#include "passes/training_options.h"

namespace kiln {
namespace {

template <typename E, size_t N>
std::optional<E> parseName(std::string_view s, const std::string_view (&names)[N]) {
  for (size_t i = 0; i < N; ++i)
    if (names[i] == s) return static_cast<E>(i);
  return std::nullopt;
}

constexpr std::string_view kLossNames[] = {"cross_entropy", "mse", "model", "l1", "smooth_l1", "huber", "bce", "kl_div"};
constexpr std::string_view kOptimizerNames[] = {"sgd", "adam", "adamw", "muon"};

}  // namespace

std::optional<LossKind> parseLossKind(std::string_view s) { return parseName<LossKind>(s, kLossNames); }
std::optional<OptimizerKind> parseOptimizerKind(std::string_view s) {
  return parseName<OptimizerKind>(s, kOptimizerNames);
}
std::string_view lossKindName(LossKind k) { return kLossNames[static_cast<size_t>(k)]; }
std::string_view optimizerKindName(OptimizerKind k) { return kOptimizerNames[static_cast<size_t>(k)]; }

}  // namespace kiln
