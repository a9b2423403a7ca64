// Kernel selection (backend/kernel_table.h): priority by default, dialect
// order under --dialects, restriction, predicates, cached choices by name,
// the one-line "no kernel" summary; and the CPU executor's autotuning and
// fixed (cached) bindings.
#include <gtest/gtest.h>

#include "backend/cpu/cpu_executor.h"
#include "backend/kernel_table.h"
#include "core/text_ir.h"

namespace kiln {
namespace {

struct FakeDef {
  std::string op, dialect, name;
  int priority = 0;
  KernelPredicate supports = nullptr;
};

bool never(const Node&) {
  return false;
}

Graph oneNode(const char* text) {
  auto g = parseGraph(text, "test");
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().message);
  return std::move(*g);
}

const char* kAdd = R"(graph g(%a: f32[4] data, %b: f32[4] data) {
  %c = add(%a, %b) : f32[4]
  return %c "out"
})";

TEST(KernelSelection, PriorityByDefaultDialectOrderWhenGiven) {
  KernelTable<FakeDef> t;
  t.add({"add", "slow", "slow.add", 0});
  t.add({"add", "fast", "fast.add", 20});
  t.add({"add", "picky", "picky.add", 30, never});
  const Graph g = oneNode(kAdd);
  const Node& n = *g.nodes().front();
  EXPECT_EQ(t.select(n)->name, "fast.add");  // picky's predicate refuses
  EXPECT_EQ(t.select(n, {{"slow", "fast"}})->name, "slow.add");
  EXPECT_EQ(t.select(n, {{"fast"}})->name, "fast.add");
  EXPECT_EQ(t.select(n, {{"picky"}}), nullptr);
  const auto all = t.applicable(n, {{"slow", "fast"}});
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1]->name, "fast.add");
  EXPECT_EQ(t.byName("add", "picky.add")->dialect, "picky");
  EXPECT_EQ(t.byName("add", "gone.add"), nullptr);
  EXPECT_EQ(t.dialects(), (std::vector<std::string>{"fast", "picky", "slow"}));
  EXPECT_EQ(whyNoKernel(t, n, {{"picky"}}), "dialects picky have none; fast,slow would");
}

TEST(KernelSelection, ParseDialectOrder) {
  const std::vector<std::string> known = {"blas", "cpu", "onednn"};
  auto o = parseDialectOrder("onednn,cpu", known);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->rank("onednn"), 0);
  EXPECT_EQ(o->rank("cpu"), 1);
  EXPECT_EQ(o->rank("blas"), -1);
  EXPECT_EQ(o->str(), "onednn,cpu");
  EXPECT_EQ(DialectOrder{}.str(), "all");
  EXPECT_EQ(parseDialectOrder("cpu,cudnn", known).error().message,
            "--dialects: unknown dialect 'cudnn' (known: blas, cpu, onednn)");
  EXPECT_EQ(parseDialectOrder("cpu,,blas", known).error().message,
            "--dialects 'cpu,,blas': empty name (known: blas, cpu, onednn)");
  EXPECT_EQ(parseDialectOrder("cpu,cpu", known).error().message, "--dialects: 'cpu' named twice");
}

TEST(KernelSelection, MissingKernelsIsOneLine) {
  const Graph g = oneNode(kAdd);
  MissingKernels one;
  one.add(*g.nodes().front(), "why");
  EXPECT_EQ(one.str(), g.nodes().front()->describe() + " (why)");
  MissingKernels many = one;
  many.add(*g.nodes().front(), "why");
  EXPECT_EQ(many.str(), "2 nodes: add x2 (why)");
}

const char* kConv = R"(graph g(%x: f32[2,8,16,16] data, %w: f32[8,8,3,3] data) {
  %y = conv2d(%x, %w) {padding=[1,1]} : f32[2,8,16,16]
  %z = conv2d(%y, %w) {padding=[1,1]} : f32[2,8,16,16]
  return %z "out"
})";

TEST(KernelSelection, CpuAutotuneTimesEachSignatureOnceAndKeepsTheFastest) {
  const Graph g = oneNode(kConv);
  auto ex = CpuExecutor::create(g, {.kernels = {.autotune = true}});
  ASSERT_TRUE(ex.ok()) << ex.error().message;
  const auto& choices = ex->kernelChoices();
  ASSERT_EQ(choices.size(), 2u);
  for (const KernelChoice& c : choices) {
    ASSERT_GE(c.timings.size(), 2u) << c.node;  // onednn and blas at least
    const int best = fastest(c.timings);
    ASSERT_GE(best, 0);
    EXPECT_EQ(c.kernel, c.timings[best].kernel);
  }
  // Same signature: timed once, so both nodes report the very same numbers.
  EXPECT_EQ(choices[0].timings[0].millis, choices[1].timings[0].millis);
  EXPECT_EQ(nodeSignature(*g.nodes().front()), nodeSignature(*g.nodes().back()));
}

TEST(KernelSelection, CpuFixedKernelsBindByNameOrFailClearly) {
  const Graph g = oneNode(kConv);
  auto ex = CpuExecutor::create(g, {.kernels = {.fixed_kernels = {"blas.conv2d", "onednn.conv2d"}}});
  ASSERT_TRUE(ex.ok()) << ex.error().message;
  EXPECT_EQ(ex->kernelChoices()[0].kernel, "blas.conv2d");
  EXPECT_EQ(ex->kernelChoices()[1].kernel, "onednn.conv2d");
  auto gone = CpuExecutor::create(g, {.kernels = {.fixed_kernels = {"blas.conv2d", "nvrtc.conv2d"}}});
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.error().message.find("kernel nvrtc.conv2d does not exist"), std::string::npos) << gone.error().message;
  auto short_list = CpuExecutor::create(g, {.kernels = {.fixed_kernels = {"blas.conv2d"}}});
  ASSERT_FALSE(short_list.ok());
  EXPECT_EQ(short_list.error().message, "the compiled plan names 1 kernels for 2 nodes");
}

TEST(KernelSelection, CpuDialectRestrictionNamesWhatIsMissing) {
  const Graph g = oneNode(kAdd);
  auto ex = CpuExecutor::create(g, {.kernels = {.dialects = {{"onednn"}}}});
  ASSERT_FALSE(ex.ok());
  EXPECT_NE(ex.error().message.find("(dialects onednn have none; cpu would)"), std::string::npos) << ex.error().message;
}

}  // namespace
}  // namespace kiln
