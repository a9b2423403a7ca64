// Independent nodes run at the same time (backend/cpu/node_stages.h): which
// nodes share a stage, that nodes of one stage never share arena bytes, and
// that a step run with stages computes every output, and the weights after
// several optimizer steps, bit for bit as the step run one node at a time.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backend/cpu/cpu_executor.h"
#include "backend/cpu/node_stages.h"
#include "backend/training_session.h"
#include "core/op_table.h"
#include "core/text_ir.h"
#include "tests/backend/random_inputs.h"

namespace kiln {
namespace {

/// A narrow model of many small tensors: what leaves cores idle when nodes
/// run one at a time.
const char* kNarrow = R"(graph narrow(%input0: f32[8,16] data, %w1: f32[16,16] param, %b1: f32[16] param,
    %g1: f32[16] param, %e1: f32[16] param, %w2: f32[16,16] param, %b2: f32[16] param, %g2: f32[16] param,
    %e2: f32[16] param, %w3: f32[4,16] param, %b3: f32[4] param) {
  %0 = linear(%input0, %w1, %b1) : f32[8,16] @fc1
  %1 = layer_norm(%0, %g1, %e1) {normalized_shape=[16], eps=1e-5} : f32[8,16] @ln1
  %2 = gelu(%1) {approximate="none"} : f32[8,16] @act1
  %3, %m = dropout(%2) {p=0.25} : f32[8,16], bool[8,16] @drop1
  %4 = linear(%3, %w2, %b2) : f32[8,16] @fc2
  %5 = layer_norm(%4, %g2, %e2) {normalized_shape=[16], eps=1e-5} : f32[8,16] @ln2
  %6 = tanh(%5) : f32[8,16] @act2
  %7 = linear(%6, %w3, %b3) : f32[8,4] @fc3
  return %7 "output0"
}
)";

Model narrowModel() {
  return test::modelFromText(kNarrow, "narrow", 11, 0.5);
}

TrainingConfig config(bool concurrent) {
  TrainingConfig c;
  c.passes.training.loss = LossKind::CrossEntropy;
  c.passes.training.target = TensorType{DType::I64, {8}};
  c.passes.training.optimizer.kind = OptimizerKind::AdamW;
  c.lr = 0.01;
  c.num_threads = 2;  // a pool of two even on one core: the stages really run side by side
  c.concurrent_nodes = concurrent;
  c.min_beside_micros = 0;  // every run of independent small nodes side by side, however short
  return c;
}

TensorMap batchFor(int64_t step) {
  std::mt19937_64 rng(200 + static_cast<uint64_t>(step));
  std::normal_distribution<double> d(0, 1);
  Tensor x(DType::F32, {8, 16}), y(DType::I64, {8});
  for (int64_t i = 0; i < x.numel(); ++i) x.set(i, d(rng));
  for (int64_t i = 0; i < y.numel(); ++i) y.set(i, static_cast<double>(rng() % 4));
  return {{"input0", x}, {"target", y}};
}

bool sameBits(const Tensor& a, const Tensor& b) {
  return a.type() == b.type() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

size_t widestStage(const NodeStages& stages) {
  size_t w = 0;
  for (const auto& [first, end] : stages) w = std::max(w, end - first);
  return w;
}

TEST(ConcurrentNodes, StagesCoverTheStepInOrderAndHoldNoDependentNodes) {
  auto s = TrainingSession::create(narrowModel(), config(true));
  ASSERT_TRUE(s.ok()) << s.error().message;
  const CpuExecutor& ex = *(*s)->cpuExecutor();
  const NodeStages& stages = ex.stages();
  size_t next = 0;
  for (const auto& [first, end] : stages) {
    ASSERT_EQ(first, next);
    ASSERT_LT(first, end);
    next = end;
    for (size_t i = first; i < end; ++i)
      for (const Value* v : ex.nodes()[i]->inputs())
        for (size_t j = first; j < end; ++j)
          EXPECT_NE(v->producer(), ex.nodes()[j]) << ex.nodes()[i]->describe() << " reads its stage-mate";
  }
  EXPECT_EQ(next, ex.nodes().size());
  EXPECT_GE(widestStage(stages), 3u) << "a step of many small parameters has independent nodes";
}

// Nodes of one stage run together: what one writes shares no arena byte
// with anything another touches.
TEST(ConcurrentNodes, NodesOfOneStageShareNoArenaBytes) {
  auto s = TrainingSession::create(narrowModel(), config(true));
  ASSERT_TRUE(s.ok()) << s.error().message;
  const CpuExecutor& ex = *(*s)->cpuExecutor();
  const MemoryPlan& plan = ex.memoryPlan();
  ASSERT_TRUE(checkPlan(plan).ok()) << checkPlan(plan).error().message;
  auto range = [&](const Value* v) -> std::pair<int64_t, int64_t> {
    const size_t b = plan.liveness.buffer_of.at(v);
    if (plan.offsets[b] < 0) return {-1, -1};
    return {plan.offsets[b], plan.offsets[b] + static_cast<int64_t>(arenaSize(plan.liveness.buffers[b].bytes))};
  };
  int pairs = 0;
  for (const auto& [first, end] : ex.stages())
    for (size_t a = first; a < end; ++a)
      for (size_t b = first; b < end; ++b) {
        if (a == b) continue;
        std::vector<const Value*> touched(ex.nodes()[b]->inputs().begin(), ex.nodes()[b]->inputs().end());
        for (const Value* o : ex.nodes()[b]->outputs()) touched.push_back(o);
        for (const Value* w : ex.nodes()[a]->outputs()) {
          const auto [lo, hi] = range(w);
          if (lo < 0 || plan.liveness.buffers[plan.liveness.buffer_of.at(w)].value != w) continue;  // a view
          for (const Value* t : touched) {
            const auto [tlo, thi] = range(t);
            ++pairs;
            EXPECT_FALSE(tlo >= 0 && lo < thi && tlo < hi)
                << ex.nodes()[a]->describe() << " writes where " << ex.nodes()[b]->describe() << " works";
          }
        }
      }
  EXPECT_GT(pairs, 0);
}

TEST(ConcurrentNodes, TrainingMatchesOneNodeAtATimeBitForBit) {
  const Model m = narrowModel();
  auto serial = TrainingSession::create(m, config(false));
  auto staged = TrainingSession::create(m, config(true));
  ASSERT_TRUE(serial.ok() && staged.ok());
  EXPECT_EQ(widestStage((*serial)->cpuExecutor()->stages()), 1u);
  EXPECT_GE(widestStage((*staged)->cpuExecutor()->stages()), 3u);
  for (int64_t step = 0; step < 4; ++step) {
    ASSERT_TRUE((*serial)->step(batchFor(step)).ok());
    ASSERT_TRUE((*staged)->step(batchFor(step)).ok());
    EXPECT_EQ(*(*serial)->readLoss(), *(*staged)->readLoss()) << "step " << step;
  }
  const TensorMap a = (*serial)->stateDict(), b = (*staged)->stateDict();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) EXPECT_TRUE(sameBits(t, b.at(name))) << name;
  const TensorMap oa = (*serial)->optimizerState(), ob = (*staged)->optimizerState();
  for (const auto& [name, t] : oa) EXPECT_TRUE(sameBits(t, ob.at(name))) << name;
}

// Two lookups side by side, the second out of range: the error names it.
TEST(ConcurrentNodes, AFailingNodeInAStageIsNamed) {
  auto g =
      parseGraph(R"(graph two(%input0: i64[4] data, %input1: i64[4] data, %t1: f32[10,4] param, %t2: f32[10,4] param) {
  %0 = embedding(%t1, %input0) : f32[4,4] @first
  %1 = embedding(%t2, %input1) : f32[4,4] @second
  %2 = add(%0, %1) : f32[4,4]
  return %2 "output0"
}
)",
                 "two");
  ASSERT_TRUE(g.ok()) << g.error().message;
  auto ex = CpuExecutor::create(*g, {.num_threads = 2, .min_beside_micros = 0});
  ASSERT_TRUE(ex.ok());
  ASSERT_EQ(ex->stages().front(), std::make_pair(size_t{0}, size_t{2})) << "the lookups share a stage";
  TensorMap in = test::randomInputs(*g, 5);
  in.at("input1").set(2, 12.0);
  auto r = ex->run(in);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("@second"), std::string::npos) << r.error().message;
}

// The rules, on hand-made kernels and donors.
TEST(ConcurrentNodes, GroupingRules) {
  auto g = parseGraph(R"(graph rules(%x: f32[4] data, %w: f32[4] param, %big: f32[2048,2048] data) {
  %0 = relu(%x) : f32[4]
  %1 = neg(%x) : f32[4]
  %2 = add(%0, %1) : f32[4]
  %3 = exp(%w) : f32[4]
  %4 = mul(%x, %x) : f32[4]
  %5 = exp(%big) : f32[2048,2048]
  %6 = neg(%w) : f32[4]
  %7 = tanh(%x) : f32[4]
  %8 = sin(%x) : f32[4]
  return %2 "a", %3 "b", %4 "c", %5 "d", %6 "e", %7 "f", %8 "g"
}
)",
                      "rules");
  ASSERT_TRUE(g.ok()) << g.error().message;
  std::vector<const Node*> nodes;
  for (const auto& n : g->nodes()) nodes.push_back(n.get());
  KernelDef plain{"op", "cpu", "plain", 0, nullptr, nullptr}, lonely = plain;
  lonely.runs_beside_others = false;
  std::vector<const KernelDef*> kernels(nodes.size(), &plain);
  kernels[8] = &lonely;
  std::vector<std::vector<const Value*>> donors(nodes.size(), std::vector<const Value*>{nullptr});
  donors[4][0] = g->inputs()[1];  // %4 is written over %w, which %3 reads
  const Liveness l = analyzeLiveness(*g, [](const Node&) { return false; });
  ASSERT_EQ(l.order, nodes);
  const NodeStages stages = groupIndependentNodes(l, kernels, donors, 0);
  // %2 reads %0 and %1; %4 writes what %3 reads; %5 is big; %6 after a big
  // node opens a stage, %7 joins it; %8's kernel runs alone.
  const NodeStages expected{{0, 2}, {2, 4}, {4, 5}, {5, 6}, {6, 8}, {8, 9}};
  EXPECT_EQ(stages, expected);
}

// The registry's flags as registered: oneDNN's kernels (whose reductions
// split by the thread count) never run beside others; the elementwise
// families may write over an input.
TEST(ConcurrentNodes, RegisteredKernelFlags) {
  const KernelRegistry& reg = KernelRegistry::cpu();
  int dnnl = 0;
  for (const std::string& op : reg.ops())
    for (const KernelDef* k : reg.candidates(op))
      if (k->dialect == "onednn") {
        ++dnnl;
        EXPECT_FALSE(k->runs_beside_others) << k->name;
        EXPECT_FALSE(k->writes_over_input) << k->name;
      }
  EXPECT_GE(dnnl, 4) << "conv2d, its low-precision form and both convolution backwards";
  for (const char* op : {"add", "relu", "gelu", "where", "unary_backward", "binary_backward", "fused_elementwise",
                         "batch_norm_backward"}) {
    const std::vector<const KernelDef*> ks = reg.candidates(op);
    ASSERT_FALSE(ks.empty()) << op;
    EXPECT_TRUE(ks.front()->writes_over_input) << op;
    EXPECT_TRUE(ks.front()->runs_beside_others) << op;
  }
  // The passes count a write in place only for ops whose traits allow it
  // (core/liveness.h): a kernel writing over an input of any other op would
  // make the planned peak a lie.
  for (const std::string& op : reg.ops())
    for (const KernelDef* k : reg.candidates(op))
      if (k->writes_over_input) {
        const OpDef* def = OpTable::get().find(op);
        ASSERT_NE(def, nullptr) << op;
        EXPECT_TRUE(def->has(kElementwise) || def->has(kOutput0OverInput)) << k->name;
      }
}

// Waking the pool costs tens of microseconds: nodes this small run one by
// one unless told otherwise.
TEST(ConcurrentNodes, NodesTooShortToPayForAThreadRunOneByOne) {
  TrainingConfig c = config(true);
  c.min_beside_micros = -1;
  auto s = TrainingSession::create(narrowModel(), c);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(widestStage((*s)->cpuExecutor()->stages()), 1u);
  for (const Node* n : (*s)->cpuExecutor()->nodes()) EXPECT_LT(estimatedMicros(*n), kMinBesideMicros) << n->describe();
}

}  // namespace
}  // namespace kiln
