// The CUDA executor against the CPU executor on whole training steps: an
// MLP and a small CNN step graph (loss, autodiff, AdamW; without the fuse
// pass, so every node is a library or own kernel, and with it, so fused
// chains run as NVRTC-generated kernels), 5 steps from the same
// weights and batches; the weights after them match within 1e-4 relative
// (f32; reductions sum in another order). The same run checks the
// executor's promises: the step is captured into a CUDA graph from the
// second run on, no synchronizing call is made while steps run
// (cuda_sync.h counts them), and reading the loss is one. Skips visibly
// without a GPU.
#include <gtest/gtest.h>

#include <random>

#include "backend/cpu/cpu_executor.h"
#include "backend/cuda/cuda_executor.h"
#include "backend/cuda/cuda_node_runner.h"
#include "backend/cuda/cuda_sync.h"
#include "core/tensor_compare.h"
#include "core/text_ir.h"
#include "passes/pass_registry.h"
#include "passes/training_graph.h"
#include "tests/cuda/cuda_kernel_check.h"  // KILN_REQUIRE_GPU

namespace kiln::cuda {
namespace {

const char* kMlp = R"(graph mlp(%input0: f32[16,32] data, %fc1.weight: f32[64,32] param, %fc1.bias: f32[64] param,
                               %fc2.weight: f32[10,64] param, %fc2.bias: f32[10] param) {
  %h = linear(%input0, %fc1.weight, %fc1.bias) : f32[16,64] @fc1
  %a = gelu(%h) : f32[16,64] @act
  %o = linear(%a, %fc2.weight, %fc2.bias) : f32[16,10] @fc2
  return %o "out"
})";

const char* kCnn =
    R"(graph cnn(%input0: f32[4,3,16,16] data, %conv.weight: f32[8,3,3,3] param, %conv.bias: f32[8] param,
                               %fc.weight: f32[10,8] param, %fc.bias: f32[10] param) {
  %c = conv2d(%input0, %conv.weight, %conv.bias) {padding=[1,1]} : f32[4,8,16,16] @conv
  %r = relu(%c) : f32[4,8,16,16] @act
  %p = adaptive_avg_pool2d(%r) {output_size=[1,1]} : f32[4,8,1,1] @pool
  %f = reshape(%p) {shape=[4,8]} : f32[4,8] @flat
  %o = linear(%f, %fc.weight, %fc.bias) : f32[4,10] @fc
  return %o "out"
})";

/// The step of `forward_ir`; with `split`, one update per parameter right
/// after its gradient, else the optimizer's run of consecutive updates
/// (which the executor enqueues as one multi-tensor launch).
/// With `fuse`, the fuse pass runs too (NVRTC-generated kernels).
Graph stepGraph(const char* forward_ir, bool split = true, bool fuse = false) {
  auto fwd = parseGraph(forward_ir, "forward");
  EXPECT_TRUE(fwd.ok()) << (fwd.ok() ? "" : fwd.error().message);
  PassContext ctx;
  ctx.training.optimizer.kind = OptimizerKind::AdamW;
  std::vector<const PassInfo*> pipeline;
  for (const char* p : {"loss", "autodiff", "optimizer", "simplify", "fuse", "split_updates", "schedule"})
    if ((split || std::string_view(p) != "split_updates") && (fuse || std::string_view(p) != "fuse"))
      pipeline.push_back(findPass(p));
  auto g = buildTrainingGraph(*fwd, ctx, TrainingGraphKind::Step, nullptr, {.verify_each = true}, pipeline);
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().message);
  return std::move(*g);
}

/// Every graph input: normal(0, 0.3) weights and data, class targets < 10,
/// zero optimizer state, lr 1e-2.
TensorMap inputsFor(const Graph& g, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0, 0.3);
  TensorMap in;
  for (const Value* v : g.inputs()) {
    Tensor t(v->type());
    for (int64_t i = 0; i < t.numel(); ++i) {
      double x = 0;
      if (v->name() == "lr")
        x = 1e-2;
      else if (v->role() == ValueRole::OptState)
        x = 0;
      else if (!isFloating(v->dtype()))
        x = static_cast<double>(rng() % 10);
      else
        x = d(rng);
      t.set(i, x);
    }
    in[v->name()] = t;
  }
  return in;
}

void expectStepsMatchCpu(const char* forward_ir, bool split = true, bool fuse = false) {
  KILN_REQUIRE_GPU();
  const Graph g = stepGraph(forward_ir, split, fuse);
  TensorMap state = inputsFor(g, 1);
  auto gpu = CudaExecutor::create(g, {.seed = 3});
  ASSERT_TRUE(gpu.ok()) << gpu.error().message;
  CudaExecutor& ex = **gpu;
  TensorMap batch;
  for (const Value* v : g.inputs()) {
    if (v->role() == ValueRole::Data || v->role() == ValueRole::Scalar)
      batch[v->name()] = state.at(v->name());
    else
      ASSERT_TRUE(ex.setState(v->name(), state.at(v->name()))) << v->name();
  }
  auto cpu = CpuExecutor::create(g, {.seed = 3});
  ASSERT_TRUE(cpu.ok()) << cpu.error().message;
  std::vector<double> gpu_losses, cpu_losses;
  for (int step = 0; step < 5; ++step) {
    ASSERT_TRUE(ex.setBatch(batch));
    const uint64_t before = syncCalls();
    ASSERT_TRUE(ex.run());
    EXPECT_EQ(syncCalls(), before) << "run() synchronized at step " << step;
    if (step >= 1) EXPECT_TRUE(ex.graphCaptured()) << "step " << step << " did not replay a CUDA graph";
    auto loss = ex.read("loss");
    ASSERT_TRUE(loss.ok()) << loss.error().message;
    gpu_losses.push_back(loss->at(0));
    // The CPU: the same step, state carried by name.
    auto out = cpu->run(state);
    ASSERT_TRUE(out.ok()) << out.error().message;
    for (size_t i = 0; i < g.outputs().size(); ++i) {
      const GraphOutput& o = g.outputs()[i];
      if (o.role == OutputRole::Loss) cpu_losses.push_back((*out)[i].at(0));
      if (o.role == OutputRole::ParamUpdate || o.role == OutputRole::OptStateUpdate ||
          o.role == OutputRole::BufferUpdate)
        state[o.name] = (*out)[i];
    }
  }
  for (int step = 0; step < 5; ++step)
    EXPECT_NEAR(gpu_losses[step], cpu_losses[step], 1e-4 * std::max(1.0, std::abs(cpu_losses[step]))) << step;
  for (const Value* v : g.inputs()) {
    if (v->role() != ValueRole::Param) continue;
    auto w = ex.read(v->name());
    ASSERT_TRUE(w.ok()) << w.error().message;
    EXPECT_LE(parityError(*w, state.at(v->name())), 1e-4) << v->name() << " after 5 AdamW steps";
  }
}

TEST(CudaExecutor, MlpFiveAdamWStepsMatchTheCpu) {
  expectStepsMatchCpu(kMlp);
}
TEST(CudaExecutor, CnnFiveAdamWStepsMatchTheCpu) {
  expectStepsMatchCpu(kCnn);
}

TEST(CudaExecutor, MultiTensorUpdatesMatchTheCpu) {
  expectStepsMatchCpu(kMlp, /*split=*/false);
}

TEST(CudaExecutor, FusedStepsMatchTheCpu) {
  expectStepsMatchCpu(kMlp, /*split=*/true, /*fuse=*/true);
  expectStepsMatchCpu(kCnn, /*split=*/true, /*fuse=*/true);
}

TEST(CudaExecutor, WithoutAGpuCreateIsAClearError) {
  std::string why;
  if (deviceAvailable(&why)) GTEST_SKIP() << "this machine has a GPU: the error path is for machines without";
  const Graph g = stepGraph(kMlp);
  auto ex = CudaExecutor::create(g);
  ASSERT_FALSE(ex.ok());
  EXPECT_EQ(ex.error().message.rfind("--device cuda: ", 0), 0u) << ex.error().message;
}

}  // namespace
}  // namespace kiln::cuda
