// Test helpers: a value for every graph input of a step (normal floats,
// integer class indices below 10, optimizer state at zero as before the
// first step), and a model from text IR with random parameters; both drawn
// from a seed.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/ir.h"
#include "core/model.h"
#include "core/tensor.h"
#include "core/text_ir.h"

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

/// A model from text IR with normal(0, `stddev`) parameters drawn from
/// `seed`; EXPECTs the text to parse.
inline Model modelFromText(const char* ir, const std::string& name, uint64_t seed, double stddev) {
  Model m;
  auto g = parseGraph(ir, name);
  EXPECT_TRUE(g.ok()) << g.error().message;
  m.graph = std::move(*g);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0, stddev);
  for (const Value* v : m.graph.inputs()) {
    if (v->role() != ValueRole::Param) continue;
    Tensor t(v->type());
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, d(rng));
    m.weights[v->name()] = t;
  }
  m.source = name;
  return m;
}

}  // namespace kiln::test
