// Test helper: a random DAG of elementwise ops, reshapes (views) and
// reductions over f32[64,16] inputs, for the property tests of the memory
// plan and the schedule.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "core/ir.h"

namespace kiln::test {

inline Graph randomGraph(std::mt19937& rng) {
  Graph g;
  std::vector<Value*> pool;
  for (int i = 0; i < 3; ++i) pool.push_back(g.addInput("in" + std::to_string(i), {DType::F32, {64, 16}}, ValueRole::Data));
  const int nodes = 5 + static_cast<int>(rng() % 60);
  for (int i = 0; i < nodes; ++i) {
    Value* a = pool[rng() % pool.size()];
    Value* b = pool[rng() % pool.size()];
    Node* n;
    switch (rng() % 5) {
      case 0: n = g.create("add", {a, b}); break;
      case 1: n = g.create("mul", {a, b}); break;
      case 2: n = g.create("tanh", {a}); break;
      case 3: n = g.create("reshape", {a}, {{"shape", std::vector<int64_t>{1024}}}); break;
      default: n = g.create("sum", {a}, {{"dims", std::vector<int64_t>{1}}, {"keepdim", int64_t{1}}}); break;
    }
    Value* o = n->output();
    if (o->shape() == Shape{1024}) o = g.create("reshape", {o}, {{"shape", std::vector<int64_t>{64, 16}}})->output();
    if (o->shape() == Shape{64, 1}) o = g.create("add", {o, a})->output();
    pool.push_back(o);
  }
  for (int k = 0; k < 3; ++k) g.addOutput(pool[rng() % pool.size()], "out" + std::to_string(k));
  return g;
}

}  // namespace kiln::test
