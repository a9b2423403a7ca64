// A 0-d constant node, as the passes that emit scalar arithmetic (the
// optimizer's, amp's loss scaling, the weight average) write it.
#pragma once

#include <string>
#include <vector>

#include "core/ir.h"

namespace kiln {

inline Value* scalarConstant(Graph& g, double v, DType dt, const std::string& scope) {
  return g.add("full", {}, {{"shape", std::vector<int64_t>{}}, {"value", v}, {"dtype", dt}}, scope);
}

}  // namespace kiln
