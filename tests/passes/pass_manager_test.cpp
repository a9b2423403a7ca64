// The PassManager and the pass registry: pipelines are checked against the
// registry before anything runs, every pass run becomes a trace entry whose
// "changed" agrees with the structural hash, the debugging switches print
// and dump the IR, and errors name the pass.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include <unistd.h>

#include "core/file_io.h"
#include "core/graph_hash.h"
#include "core/text_ir.h"
#include "passes/pass_manager.h"
#include "passes/pipelines.h"

namespace kiln {
namespace {

// One dead node (%2) for dce to remove.
const char* kGraph = R"(graph g(%x: f32[2,3] data, %w: f32[3] param) {
  %0 = mul(%x, %w) : f32[2,3] @layer
  %1 = mean(%0) : f32[] @head
  %2 = relu(%0) : f32[2,3] @dead
  return %1 "output0"
}
)";

Graph parsed() {
  auto g = parseGraph(kGraph, "test");
  EXPECT_TRUE(g.ok()) << g.error().message;
  return std::move(*g);
}

std::vector<const PassInfo*> pipeline(const std::vector<std::string>& names) {
  auto p = resolvePipeline(names);
  EXPECT_TRUE(p.ok()) << p.error().message;
  return p.ok() ? *p : std::vector<const PassInfo*>{};
}

TEST(PassRegistry, EveryPassIsDescribedAndDefaultPipelinesResolve) {
  for (const PassInfo& p : allPasses()) {
    EXPECT_NE(std::string(p.summary), "") << p.name;
    EXPECT_NE(std::string(p.description), "") << p.name;
    EXPECT_EQ(findPass(p.name), &p);
  }
  for (auto kind : {TrainingGraphKind::Gradients, TrainingGraphKind::Step}) {
    for (const PipelineEntry& e : trainingPipeline(kind)) EXPECT_NE(std::string(e.why), "") << e.pass;
    EXPECT_TRUE(resolvePipeline(passNames(trainingPipeline(kind))).ok());
  }
  EXPECT_EQ(findPass("no_such_pass"), nullptr);
}

TEST(PassManager, UnknownPassFailsBeforeAnythingRunsAndListsTheKnownOnes) {
  auto p = resolvePipeline({"dce", "dcee"}, "--passes");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().message.rfind("unknown pass 'dcee' in --passes (known: ", 0), 0u) << p.error().message;
  EXPECT_NE(p.error().message.find("autodiff"), std::string::npos);
}

TEST(PassManager, SplitsPassLists) {
  auto ok = splitPassList("loss,autodiff,dce");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, (std::vector<std::string>{"loss", "autodiff", "dce"}));
  for (const char* bad : {"", "dce,", ",dce", "a,,b"}) EXPECT_FALSE(splitPassList(bad).ok()) << bad;
}

TEST(PassManager, TraceSaysWhatChangedByTheStructuralHash) {
  Graph g = parsed();
  PassContext ctx;
  std::vector<PassTraceEntry> trace;
  ASSERT_TRUE(runPipeline(g, ctx, pipeline({"dce", "dce"}), {}, &trace).ok());
  ASSERT_EQ(trace.size(), 2u);
  EXPECT_EQ(trace[0].pass, "dce");
  EXPECT_TRUE(trace[0].result.changed);
  EXPECT_EQ(trace[0].nodes_after, 2u);
  EXPECT_EQ(trace[0].result.statistics.at("nodes_removed"), 1);
  EXPECT_FALSE(trace[1].result.changed);  // nothing left to remove
  EXPECT_EQ(trace[1].hash_after, trace[0].hash_after);
  EXPECT_EQ(trace[1].hash_after, structuralHash(g));
  EXPECT_GE(trace[0].millis, 0);
}

TEST(PassManager, PrintsIrAfterANamedPassOrAfterChanges) {
  std::ostringstream out;
  Graph g = parsed();
  PassContext ctx;
  ASSERT_TRUE(runPipeline(g, ctx, pipeline({"dce", "dce"}), {.print_ir_after = {"dce"}, .out = &out}).ok());
  EXPECT_NE(out.str().find("// ---- IR after dce ----\n"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("// ---- IR after dce (unchanged) ----\n"), std::string::npos) << out.str();
  EXPECT_EQ(out.str().find("relu"), std::string::npos) << "dce should have removed the relu";

  std::ostringstream changes;
  Graph h = parsed();
  ASSERT_TRUE(runPipeline(h, ctx, pipeline({"dce", "dce"}), {.print_ir_after_change = true, .out = &changes}).ok());
  EXPECT_NE(changes.str().find("// ---- IR after dce ----"), std::string::npos);
  EXPECT_EQ(changes.str().find("unchanged"), std::string::npos) << "the second dce changed nothing: no print";
}

TEST(PassManager, DumpDirHoldsTheIrBeforeAndAfterEveryPass) {
  auto dir = std::filesystem::temp_directory_path() / ("kiln_pm_dump_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  Graph g = parsed();
  PassContext ctx;
  ASSERT_TRUE(runPipeline(g, ctx, pipeline({"dce"}), {.dump_dir = (dir / "sub").string()}).ok());
  auto input = readFile((dir / "sub" / "00-input.kir").string());
  auto after = readFile((dir / "sub" / "01-dce.kir").string());
  ASSERT_TRUE(input.ok() && after.ok());
  EXPECT_NE(input->find("relu"), std::string::npos);
  auto reparsed = parseGraph(*after, "01-dce.kir");  // dumps round-trip through the parser
  ASSERT_TRUE(reparsed.ok()) << reparsed.error().message;
  EXPECT_EQ(structuralHash(*reparsed), structuralHash(g));
  std::filesystem::remove_all(dir);
}

TEST(PassManager, KeepIrHoldsEachPassesBeforeAndAfterWithStableValueNumbers) {
  Graph g = parsed();
  PassContext ctx;
  std::vector<PassTraceEntry> trace;
  ASSERT_TRUE(runPipeline(g, ctx, pipeline({"dce", "dce"}), {.keep_ir = true}, &trace).ok());
  ASSERT_EQ(trace.size(), 2u);
  ASSERT_TRUE(trace[0].ir_before && trace[0].ir_after);
  EXPECT_NE(trace[0].ir_before->find("relu"), std::string::npos);
  EXPECT_EQ(trace[0].ir_after->find("relu"), std::string::npos);
  // The unchanged second dce shares the first one's text.
  EXPECT_EQ(trace[1].ir_before, trace[0].ir_after);
  EXPECT_EQ(trace[1].ir_after, trace[0].ir_after);
  // Values keep their numbers: the mean's result is the same %N before and after.
  auto resultOf = [](const std::string& ir, const std::string& op) {
    size_t at = ir.find(" = " + op + "(");
    size_t start = ir.rfind('%', at);
    return ir.substr(start, at - start);
  };
  EXPECT_EQ(resultOf(*trace[0].ir_before, "mean"), resultOf(*trace[0].ir_after, "mean"));
  auto reparsed = parseGraph(*trace[0].ir_after, "after dce");
  ASSERT_TRUE(reparsed.ok()) << reparsed.error().message;
  EXPECT_EQ(structuralHash(*reparsed), structuralHash(g));

  std::vector<PassTraceEntry> none;
  Graph h = parsed();
  ASSERT_TRUE(runPipeline(h, ctx, pipeline({"dce"}), {}, &none).ok());
  EXPECT_FALSE(none[0].ir_before || none[0].ir_after) << "IR is kept only when asked";
}

TEST(PassManager, ProgressSeesEveryPassAndCanCancel) {
  Graph g = parsed();
  PassContext ctx;
  std::vector<std::string> seen;
  PassManagerOptions o;
  o.progress = [&](size_t i, size_t n, const std::string& pass) {
    seen.push_back(std::to_string(i) + "/" + std::to_string(n) + " " + pass);
    return i < 1;  // cancel before the second pass
  };
  std::vector<PassTraceEntry> trace;
  Status s = runPipeline(g, ctx, pipeline({"dce", "cse"}), o, &trace);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "cancelled");
  EXPECT_EQ(seen, (std::vector<std::string>{"0/2 dce", "1/2 cse"}));
  EXPECT_EQ(trace.size(), 1u) << "the cancelled pass never ran";
}

TEST(PassManager, ErrorsNameThePass) {
  Graph g = parsed();  // no Loss output: autodiff has nothing to differentiate
  PassContext ctx;
  Status s = runPipeline(g, ctx, pipeline({"dce", "autodiff"}), {.verify_each = true});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message.rfind("pass 'autodiff': ", 0), 0u) << s.error().message;
}

}  // namespace
}  // namespace kiln
