// For the CUDA kernel tests: a one-node graph written in text IR, inputs
// drawn from a seed, run on the CPU (the CPU registry's kernel: Kiln's
// reference, itself tested against PyTorch) and with every CUDA kernel that
// accepts the node, outputs compared by parityError (max abs deviation over
// the reference's max magnitude). Without a GPU the tests skip visibly.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_executor.h"
#include "backend/cuda/cuda_node_runner.h"
#include "core/tensor_compare.h"
#include "core/text_ir.h"

namespace kiln::cuda::test {

/// Skips the test, saying why, when no CUDA device can run kernels here.
#define KILN_REQUIRE_GPU()                                                                               \
  do {                                                                                                   \
    std::string why_no_gpu;                                                                              \
    if (!::kiln::cuda::deviceAvailable(&why_no_gpu)) GTEST_SKIP() << "needs a CUDA GPU: " << why_no_gpu; \
  } while (0)

struct CheckOptions {
  double tol = 1e-5;  ///< parityError bound (f16/bf16 outputs: use ~1e-2)
  uint32_t seed = 1;
  int64_t int_bound = 10;  ///< integer inputs are drawn from [0, int_bound)
  bool positive = false;   ///< floats drawn from (0.1, 2) instead of normal(0, 1)
  uint64_t run_seed = 7;   ///< random kernels' run seed (dropout)
};

/// Inputs for every graph input: floats normal(0,1) (or positive), integers
/// in [0, int_bound), bools alternating at random.
inline TensorMap drawInputs(const Graph& g, const CheckOptions& o) {
  std::mt19937 rng(o.seed);
  std::normal_distribution<double> normal(0, 1);
  std::uniform_real_distribution<double> pos(0.1, 2.0);
  TensorMap in;
  for (const Value* v : g.inputs()) {
    Tensor t(v->type());
    for (int64_t i = 0; i < t.numel(); ++i) {
      double x;
      if (v->dtype() == DType::Bool)
        x = rng() & 1;
      else if (!isFloating(v->dtype()))
        x = static_cast<double>(rng() % o.int_bound);
      else
        x = o.positive ? pos(rng) : normal(rng);
      t.set(i, x);
    }
    in[v->name()] = t;
  }
  return in;
}

/// Adjusts drawn inputs before a check (negative integers, nonzero
/// divisors, ties, wider ranges).
using Tweak = std::function<void(TensorMap&)>;

/// Runs the single node of `g` (parsed from `ir`) on the CPU, on copies of
/// `in` (some kernels update their inputs in place), and with each CUDA
/// kernel that accepts it on `in`; EXPECTs every output within `o.tol` and
/// no data fault. Returns how many CUDA kernels were checked (0 is a
/// failure: the op has no CUDA kernel).
inline int expectGraphMatchesCpu(const Graph& g, const std::string& ir, const TensorMap& in, const CheckOptions& o) {
  EXPECT_EQ(g.numNodes(), 1u) << "expectMatchesCpu wants a graph of one node";
  const Node& n = *g.nodes().front();
  TensorMap cpu_in;
  for (const auto& [name, t] : in) cpu_in[name] = t.clone();
  auto cpu = CpuExecutor::create(g, {.seed = o.run_seed});
  EXPECT_TRUE(cpu.ok()) << (cpu.ok() ? "" : cpu.error().message);
  if (!cpu.ok()) return 0;
  auto ref = cpu->run(cpu_in);
  EXPECT_TRUE(ref.ok()) << (ref.ok() ? "" : ref.error().message) << "\n" << ir;
  if (!ref.ok()) return 0;
  std::vector<Tensor> args;
  for (const Value* v : n.inputs()) args.push_back(in.at(v->name()));
  int checked = 0;
  // The CPU executor's first run uses seed + 0 * golden: the same run seed.
  for (const CudaKernelDef* k : CudaKernelRegistry::get().applicable(n)) {
    auto r = runNode(n, args, k, {.seed = o.run_seed});
    EXPECT_TRUE(r.ok()) << k->name << ": " << (r.ok() ? "" : r.error().message);
    if (!r.ok()) continue;
    EXPECT_EQ(r->error_flag, 0) << k->name << " raised its data-fault flag";
    for (size_t i = 0; i < r->outputs.size(); ++i) {
      // Graph outputs are in return order; a one-node graph returns its outputs in order.
      const double err = parityError(r->outputs[i], (*ref)[i]);
      EXPECT_LE(err, o.tol) << k->name << " output " << i << " of\n" << ir;
    }
    ++checked;
  }
  EXPECT_GT(checked, 0) << "no CUDA kernel accepts " << n.describe();
  return checked;
}

/// expectGraphMatchesCpu of the one-node graph `ir` on the given inputs (by
/// graph input name).
inline int expectMatchesCpuOn(const std::string& ir, const TensorMap& in, const CheckOptions& o = {}) {
  auto g = parseGraph(ir, "test");
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().message);
  if (!g.ok()) return 0;
  return expectGraphMatchesCpu(*g, ir, in, o);
}

/// expectGraphMatchesCpu of the one-node graph `ir` on inputs drawn by
/// drawInputs, adjusted by `tweak` first when there is one.
inline int expectMatchesCpuWith(const std::string& ir, const CheckOptions& o, const Tweak& tweak) {
  auto g = parseGraph(ir, "test");
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().message);
  if (!g.ok()) return 0;
  TensorMap in = drawInputs(*g, o);
  if (tweak) tweak(in);
  return expectGraphMatchesCpu(*g, ir, in, o);
}

/// Runs the single node of `ir` on the CPU and with each CUDA kernel that
/// accepts it, inputs drawn by drawInputs; EXPECTs every output within
/// `o.tol`. Returns how many CUDA kernels were checked (0 is a failure: the
/// op has no CUDA kernel).
inline int expectMatchesCpu(const std::string& ir, const CheckOptions& o = {}) {
  return expectMatchesCpuWith(ir, o, nullptr);
}

/// The text IR type `dt[d0,d1,...]`.
inline std::string ty(const std::string& dt, const std::vector<int64_t>& shape) {
  std::string s = dt + "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace kiln::cuda::test
