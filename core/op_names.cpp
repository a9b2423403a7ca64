// Op symbols <-> names (see op_names.h).
#include "core/op_names.h"

#include <algorithm>
#include <array>

namespace kiln {
namespace {

constexpr std::array<std::string_view, kOpCount> kNames = {
#define KILN_OP_NAME(name) #name,
    KILN_OP_LIST(KILN_OP_NAME)
#undef KILN_OP_NAME
};

static_assert(std::is_sorted(kNames.begin(), kNames.end()), "keep KILN_OP_LIST sorted by name");

}  // namespace

std::string_view opName(Op op) {
  return kNames[static_cast<size_t>(op)];
}

std::optional<Op> opByName(std::string_view name) {
  auto it = std::lower_bound(kNames.begin(), kNames.end(), name);
  if (it == kNames.end() || *it != name) return std::nullopt;
  return static_cast<Op>(it - kNames.begin());
}

}  // namespace kiln
