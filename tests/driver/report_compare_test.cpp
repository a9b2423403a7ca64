// Comparing two reports (driver/report_compare.h) on reports built by hand,
// where every expected number follows from the inputs; the comparison of
// two real training reports is tests/cli/compare_reports_cli.sh.
#include "driver/report_compare.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "driver/messages.h"
#include "driver/provenance_paths.h"

namespace kiln::driver {
namespace {

ReportKernel kernel(const std::string& node, const std::string& op, const std::string& scope, double ms) {
  ReportKernel k;
  k.node = node;
  k.op = op;
  k.scope = scope;
  k.kernel = "cpu." + op;
  k.measured_ms = ms;
  return k;
}

ReportPass pass(const std::string& name, int64_t nodes, double flops) {
  ReportPass p;
  p.name = name;
  p.nodes = nodes;
  p.flops = flops;
  return p;
}

Report baseline() {
  Report r;
  r.model.path = "m.pt";
  r.memory.peak_bytes = 1000;
  r.graph.nodes = 3;
  r.kernels = {kernel("matmul @a", "matmul", "a", 2.0), kernel("add @a", "add", "a", 0.5),
               kernel("relu @b", "relu", "b", 1.0)};
  r.steps = std::vector<StepRecord>{{0, 1, 50, 0}, {1, 1, 4, 0}, {2, 1, 6, 0}, {3, 1, 5, 0}};
  r.passes = {pass("dce", 10, 100), pass("fuse", 8, 100), pass("dce", 7, 100)};
  return r;
}

TEST(CompareReports, TheMedianStepSkipsTheFirst) {
  const Report r = baseline();
  EXPECT_EQ(medianStepMillis(r), 5.0);  // of 4, 6, 5; the 50 ms first step is warm-up
  Report even = r;
  even.steps->push_back({4, 1, 8, 0});
  EXPECT_EQ(medianStepMillis(even), 5.5);
  Report compiled;
  EXPECT_FALSE(medianStepMillis(compiled).has_value());
}

TEST(CompareReports, DifferencesBySizeAndPassesByOccurrence) {
  const Report a = baseline();
  Report b = baseline();
  // B fuses add into matmul (one node fewer, matmul slower) and speeds up relu.
  b.kernels = {kernel("matmul_add @a", "matmul", "a", 2.2), kernel("relu @b", "relu", "b", 0.25)};
  b.memory.peak_bytes = 800;
  b.steps = std::vector<StepRecord>{{0, 1, 40, 0}, {1, 1, 3, 0}, {2, 1, 3, 0}};
  b.passes = {pass("dce", 10, 100), pass("dce", 6, 100), pass("remat", 6, 120)};
  const ReportComparison c = compareReports(a, b);
  ASSERT_TRUE(c.measured);

  ASSERT_GE(c.summary.size(), 4u);
  EXPECT_EQ(c.summary[0].what, "step time (median)");
  EXPECT_EQ(*c.summary[0].a, 5.0);
  EXPECT_EQ(*c.summary[0].b, 3.0);
  EXPECT_EQ(c.summary[1].what, "kernel time per step");
  EXPECT_DOUBLE_EQ(*c.summary[1].a, 3.5);
  EXPECT_DOUBLE_EQ(*c.summary[1].b, 2.45);
  EXPECT_EQ(c.summary[2].what, "peak memory");
  EXPECT_EQ(*c.summary[2].b, 800.0);

  // By op: relu -0.75, add -0.5, matmul +0.2 (largest change first).
  ASSERT_EQ(c.by_op.size(), 3u);
  EXPECT_EQ(c.by_op[0].key, "relu");
  EXPECT_DOUBLE_EQ(c.by_op[0].diff(), -0.75);
  EXPECT_EQ(c.by_op[1].key, "add");
  EXPECT_EQ(c.by_op[1].a_nodes, 1);
  EXPECT_EQ(c.by_op[1].b_nodes, 0);
  EXPECT_EQ(c.by_op[2].key, "matmul");
  EXPECT_NEAR(c.by_op[2].diff(), 0.2, 1e-12);
  // By scope: b -0.75, a -0.3.
  ASSERT_EQ(c.by_scope.size(), 2u);
  EXPECT_EQ(c.by_scope[0].key, "b");
  EXPECT_EQ(c.by_scope[1].key, "a");
  EXPECT_NEAR(c.by_scope[1].diff(), -0.3, 1e-12);
  EXPECT_EQ(c.by_node.size(), 4u);  // matmul, add, relu and matmul_add

  // Passes matched by name and occurrence; those of one side only kept.
  ASSERT_EQ(c.passes.size(), 4u);
  EXPECT_EQ(c.passes[0].pass, "dce");
  EXPECT_EQ(c.passes[1].pass, "fuse");
  EXPECT_FALSE(c.passes[1].b.has_value());
  EXPECT_EQ(c.passes[2].pass, "dce #2");
  EXPECT_EQ(c.passes[2].a->nodes, 7);
  EXPECT_EQ(c.passes[2].b->nodes, 6);
  EXPECT_EQ(c.passes[3].pass, "remat");
  EXPECT_FALSE(c.passes[3].a.has_value());

  std::ostringstream text;
  printComparison(text, c, "a.json", "b.json", 2);
  const std::string s = text.str();
  EXPECT_NE(s.find("step time (median)             5.00 ms     3.00 ms    0.60x"), std::string::npos) << s;
  EXPECT_NE(s.find("peak memory                    1.00 KB       800 B    0.80x"), std::string::npos) << s;
  EXPECT_NE(s.find("(the 2 largest of 3)"), std::string::npos) << s;
  EXPECT_NE(s.find("  add                          500 us          -     -500 us        1        0"), std::string::npos)
      << s;
}

TEST(CompareReports, CompiledReportsCompareByNodeCounts) {
  Report a = baseline(), b = baseline();
  for (ReportKernel& k : a.kernels) k.measured_ms.reset();
  for (ReportKernel& k : b.kernels) k.measured_ms.reset();
  a.steps.reset();
  b.steps.reset();
  b.kernels.pop_back();  // B has no relu
  const ReportComparison c = compareReports(a, b);
  EXPECT_FALSE(c.measured);
  EXPECT_EQ(c.summary[0].what, "peak memory");  // no step times, no kernel times
  EXPECT_EQ(c.by_op[0].key, "relu");
  std::ostringstream text;
  printComparison(text, c, "a", "b");
  EXPECT_NE(text.str().find("Ops, by the change in nodes"), std::string::npos) << text.str();
  EXPECT_EQ(text.str().find("matmul      "), std::string::npos) << "unchanged ops listed:\n" << text.str();
}

TEST(FormatQuantity, ThreeSignificantDigitsWithUnits) {
  EXPECT_EQ(formatQuantity(0.0299731, "ms"), "30.0 us");
  EXPECT_EQ(formatQuantity(12.345, "ms"), "12.3 ms");
  EXPECT_EQ(formatQuantity(1234.5, "ms"), "1.23 s");
  EXPECT_EQ(formatQuantity(-0.5, "ms"), "-500 us");
  EXPECT_EQ(formatQuantity(1104890000, "B"), "1.10 GB");
  EXPECT_EQ(formatQuantity(999.7, "B"), "1.00 KB");
  EXPECT_EQ(formatQuantity(7170000, "FLOP"), "7.17 MFLOP");
  EXPECT_EQ(formatQuantity(42, ""), "42");
  EXPECT_EQ(formatQuantity(30600, ""), "30.6 K");
  EXPECT_EQ(formatQuantity(8.42495, ""), "8.42");
  EXPECT_EQ(formatQuantity(0, "B"), "0 B");
  EXPECT_EQ(formatQuantity(4, "B"), "4 B");
  EXPECT_EQ(formatQuantity(2.5, "FLOP"), "2.50 FLOP");
}

TEST(ProvenancePaths, RelativeToTheDirectoryTheyShare) {
  const std::vector<std::string> nodes{"reshape (/home/ana/proj/models/zoo.py:200)",
                                       "linear @h.0.attn (/home/ana/proj/models/blocks/attn.py:31)",
                                       "add (grad of mul @a (/home/ana/proj/models/zoo.py:12))", "relu"};
  const std::string dir = commonSourceDir(nodes);
  EXPECT_EQ(dir, "/home/ana/proj/models/");
  EXPECT_EQ(relativeToDir(nodes[0], dir), "reshape (zoo.py:200)");
  EXPECT_EQ(relativeToDir(nodes[1], dir), "linear @h.0.attn (blocks/attn.py:31)");
  EXPECT_EQ(relativeToDir(nodes[2], dir), "add (grad of mul @a (zoo.py:12))");
  EXPECT_EQ(relativeToDir(nodes[3], dir), "relu");
  EXPECT_EQ(commonSourceDir({"a (/usr/lib/x.py:1)", "b (/home/y.py:2)"}), "");  // only the root in common
  EXPECT_EQ(commonSourceDir({"relu", "add"}), "");
  EXPECT_EQ(commonSourceDir({"a (/p/q/x.py:1)", "b (/p/qr/y.py:2)"}), "/p/");  // whole directories
  EXPECT_EQ(relativeToDir("a (/p/q/x.py:1)", ""), "a (/p/q/x.py:1)");
}

}  // namespace
}  // namespace kiln::driver
