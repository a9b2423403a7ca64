// The CUDA executor against the CPU executor on whole training steps: an
// MLP and a small CNN step graph (loss, autodiff, AdamW; without the fuse
// pass, so every node is a library or own kernel, and with it, so fused
// chains run as NVRTC-generated kernels), 5 steps from the same
// weights and batches; the weights after them match within 1e-4 relative
// (f32; reductions sum in another order). The same run checks the
// executor's promises: the step is captured into a CUDA graph from the
// second run on, no synchronizing call is made while steps run
// (cuda_sync.h counts them), and reading the loss is one. A bf16 amp step
// (fused bf16 chains among them) matches within bf16's rounding, and
// profiled runs (node by node with events) give the same results and a
// time for every node. Skips visibly without a GPU.
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

/// A residual around the activation: elementwise chains of two and more
/// ops forward (gelu, add) and backward (gelu's gradient plus the skip's).
const char* kResidualMlp =
    R"(graph res(%input0: f32[16,32] data, %fc1.weight: f32[64,32] param, %fc1.bias: f32[64] param,
                               %fc2.weight: f32[10,64] param, %fc2.bias: f32[10] param) {
  %h = linear(%input0, %fc1.weight, %fc1.bias) : f32[16,64] @fc1
  %a = gelu(%h) : f32[16,64] @act
  %r = add(%a, %h) : f32[16,64] @skip
  %o = linear(%r, %fc2.weight, %fc2.bias) : f32[16,10] @fc2
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

/// How a test builds and runs its step.
struct StepOptions {
  /// One update per parameter right after its gradient, else the
  /// optimizer's run of consecutive updates (which the executor enqueues
  /// as one multi-tensor launch).
  bool split = true;
  bool fuse = false;     ///< the fuse pass runs too (NVRTC-generated kernels)
  bool bf16 = false;     ///< amp bf16 (with fuse: bf16 bodies)
  bool profile = false;  ///< steps 2 and 3 run profiled (node by node with events)
};

/// The step of `forward_ir` (as the CUDA device builds it: cpu_only_ops off).
Graph stepGraph(const char* forward_ir, const StepOptions& o = {}) {
  auto fwd = parseGraph(forward_ir, "forward");
  EXPECT_TRUE(fwd.ok()) << (fwd.ok() ? "" : fwd.error().message);
  PassContext ctx;
  ctx.cpu_only_ops = false;
  ctx.training.optimizer.kind = OptimizerKind::AdamW;
  if (o.bf16) ctx.training.amp.mode = AmpMode::Bf16;
  std::vector<const PassInfo*> pipeline;
  for (const char* p :
       {"loss", "amp", "autodiff", "optimizer", "simplify", "fold_transposes", "fuse", "split_updates", "schedule"}) {
    const std::string_view name = p;
    if ((o.split || name != "split_updates") && (o.fuse || name != "fuse") && (o.bf16 || name != "amp"))
      pipeline.push_back(findPass(p));
  }
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

void expectStepsMatchCpu(const char* forward_ir, const StepOptions& opt = {}) {
  KILN_REQUIRE_GPU();
  const Graph g = stepGraph(forward_ir, opt);
  // bf16: the CPU and the GPU round the same values, but GEMMs and sums
  // accumulate in other orders, and a bf16 rounding then differs by 2^-8;
  // AdamW's first steps move a weight by about lr whatever its gradient's
  // size, so a gradient near zero that changes sign moves it 2 lr apart.
  const double tol = opt.bf16 ? 2e-2 : 1e-4, weight_tol = opt.bf16 ? 5e-2 : 1e-4;
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
    const bool profiled = opt.profile && (step == 2 || step == 3);
    if (opt.profile && (step == 2 || step == 4)) {
      ASSERT_TRUE(ex.setProfiling(step == 2));
    }
    ASSERT_TRUE(ex.setBatch(batch));
    const uint64_t before = syncCalls();
    ASSERT_TRUE(ex.run());
    if (!profiled) {
      EXPECT_EQ(syncCalls(), before) << "run() synchronized at step " << step;
      if (step >= 1) EXPECT_TRUE(ex.graphCaptured()) << "step " << step << " did not replay a CUDA graph";
    }
    if (profiled && step == 3) {
      // Every node that launches work has a time; the views none.
      ASSERT_EQ(ex.nodeMillis().size(), ex.kernelChoices().size());
      double total = 0;
      int timed = 0;
      for (double ms : ex.nodeMillis()) {
        EXPECT_GE(ms, 0.0);
        total += ms;
        timed += ms > 0;
      }
      EXPECT_GT(total, 0.0);
      EXPECT_GE(timed, static_cast<int>(ex.kernelChoices().size()) / 2) << "of " << ex.kernelChoices().size();
    }
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
    EXPECT_NEAR(gpu_losses[step], cpu_losses[step], tol * std::max(1.0, std::abs(cpu_losses[step]))) << step;
  for (const Value* v : g.inputs()) {
    if (v->role() != ValueRole::Param) continue;
    auto w = ex.read(v->name());
    ASSERT_TRUE(w.ok()) << w.error().message;
    EXPECT_LE(parityError(*w, state.at(v->name())), weight_tol) << v->name() << " after 5 AdamW steps";
  }
}

TEST(CudaExecutor, MlpFiveAdamWStepsMatchTheCpu) {
  expectStepsMatchCpu(kMlp);
}
TEST(CudaExecutor, CnnFiveAdamWStepsMatchTheCpu) {
  expectStepsMatchCpu(kCnn);
}

TEST(CudaExecutor, MultiTensorUpdatesMatchTheCpu) {
  expectStepsMatchCpu(kMlp, {.split = false});
}

TEST(CudaExecutor, FusedStepsMatchTheCpu) {
  expectStepsMatchCpu(kMlp, {.fuse = true});
  expectStepsMatchCpu(kCnn, {.fuse = true});
}

/// The steps below read the weight gradients' transposed operands through
/// gemm flags (fold_transposes runs for CUDA too; no GPU needed to build them).
TEST(CudaExecutor, StepsForTheDeviceReadTransposesThroughGemmFlags) {
  const Graph g = stepGraph(kMlp);
  int gemms = 0;
  for (const auto& n : g.nodes()) {
    if (n->op() != "gemm") continue;
    ++gemms;
    const CudaKernelDef* k = CudaKernelRegistry::get().select(*n);
    ASSERT_NE(k, nullptr) << n->describe();
    EXPECT_EQ(k->name, "cublaslt.gemm");
  }
  EXPECT_GE(gemms, 2) << printGraph(g);
}

/// The bf16 fused chains the GPU step below runs (no GPU needed to build them).
TEST(CudaExecutor, Bf16AmpStepsFuseBf16ChainsForTheDevice) {
  const Graph g = stepGraph(kResidualMlp, {.fuse = true, .bf16 = true});
  int bf16_bodies = 0;
  for (const auto& n : g.nodes()) {
    if (n->op() != "fused_elementwise" || n->output(0)->dtype() != DType::BF16) continue;
    ++bf16_bodies;
    EXPECT_TRUE(CudaKernelRegistry::get().select(*n)) << "no CUDA kernel takes " << n->describe();
  }
  EXPECT_GE(bf16_bodies, 1) << printGraph(g);
}

TEST(CudaExecutor, Bf16AmpFusedStepsMatchTheCpu) {
  expectStepsMatchCpu(kResidualMlp, {.fuse = true, .bf16 = true});
  expectStepsMatchCpu(kCnn, {.fuse = true, .bf16 = true});
}

TEST(CudaExecutor, ProfiledStepsTimeEveryNodeAndMatchTheCpu) {
  expectStepsMatchCpu(kMlp, {.fuse = true, .profile = true});
  expectStepsMatchCpu(kMlp, {.split = false, .profile = true});
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
