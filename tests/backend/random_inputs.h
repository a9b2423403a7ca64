// Test helper: a value for every graph input of a step: normal floats,
// integer class indices below 10, optimizer state at zero (as before the
// first step), drawn from `seed`.
#pragma once

#include <random>

#include "core/ir.h"
#include "core/tensor.h"

namespace kiln::test {

inline TensorMap randomInputs(const Graph& g, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0, 1);
  TensorMap in;
  for (const Value* v : g.inputs()) {
    Tensor t(v->type());
    for (int64_t i = 0; i < t.numel(); ++i)
      t.set(i, v->dtype() == DType::I64 ? double(rng() % 10) : v->role() == ValueRole::OptState ? 0.0 : d(rng));
    in[v->name()] = t;
  }
  return in;
}

}  // namespace kiln::test
