// Regions: a fused node owns its body as a graph-valued attribute
// (core/attribute.h GraphAttr). The text IR prints it on its node's line
// and reads it back (in any layout), JSON carries it, the structural hash covers it, clones share
// it, and the string form of earlier text IR (body="graph ...") still reads.
#include <gtest/gtest.h>

#include "core/graph_hash.h"
#include "core/graph_json.h"
#include "core/text_ir.h"

namespace kiln {
namespace {

const char* kFused = R"(graph f(%x: f32[4,8] data, %b: f32[8] param) {
  %0 = fused_elementwise(%x, %b) {body=graph fused(%i0: f32[4,8] data, %i1: f32[8] data) {
    %0 = add(%i0, %i1) : f32[4,8]
    %1 = relu(%0) : f32[4,8]
    return %1 "o0"
  }} : f32[4,8] @block.act
  %1 = sum(%0) : f32[]
  return %1 "output0"
}
)";

// How the printer writes kFused: one line per node, the region included.
const char* kFusedPrinted = R"(graph f(%x: f32[4,8] data, %b: f32[8] param) {
  %0 = fused_elementwise(%x, %b) {body=graph fused(%i0: f32[4,8] data, %i1: f32[8] data) { %0 = add(%i0, %i1) : f32[4,8] %1 = relu(%0) : f32[4,8] return %1 "o0" }} : f32[4,8] @block.act
  %1 = sum(%0) : f32[]
  return %1 "output0"
}
)";

Graph parse(const std::string& text) {
  auto g = parseGraph(text, "test");
  EXPECT_TRUE(g.ok()) << g.error().message;
  return g.ok() ? std::move(*g) : Graph{};
}

TEST(Region, ParsedAndPrintedBackOnItsNodesLine) {
  Graph g = parse(kFused);
  const Node& n = *g.nodes().front();
  const Graph& body = n.subgraph("body");
  ASSERT_EQ(body.numNodes(), 2u);
  EXPECT_TRUE(body.nodes().back()->is(Op::relu));
  EXPECT_EQ(body.inputs().size(), 2u);
  EXPECT_EQ(n.output()->type().str(), "f32[4,8]") << "shape inference reads the region";
  EXPECT_EQ(printGraph(g), kFusedPrinted);
  EXPECT_EQ(printGraph(parse(kFusedPrinted)), kFusedPrinted) << "print(parse(print(g))) == print(g)";
}

// Messages (and kernel signatures) show a node on one line, region included.
TEST(Region, PrintNodeKeepsTheRegionOnOneLine) {
  Graph g = parse(kFused);
  const std::string line = printNode(*g.nodes().front());
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  EXPECT_NE(line.find("%1 = relu(%0) : f32[4,8] return %1 \"o0\" }}"), std::string::npos) << line;
}

TEST(Region, TheStringFormOfEarlierTextIrReadsAsTheSameRegion) {
  const std::string old = R"(graph f(%x: f32[4,8] data, %b: f32[8] param) {
  %0 = fused_elementwise(%x, %b) {body="graph fused(%i0: f32[4,8] data, %i1: f32[8] data) {\n  %0 = add(%i0, %i1) : f32[4,8]\n  %1 = relu(%0) : f32[4,8]\n  return %1 \"o0\"\n}\n"} : f32[4,8] @block.act
  %1 = sum(%0) : f32[]
  return %1 "output0"
}
)";
  Graph a = parse(old), b = parse(kFused);
  EXPECT_EQ(structuralHash(a), structuralHash(b));
  EXPECT_EQ(printGraph(a), kFusedPrinted);
}

TEST(Region, HashAndEqualityFollowTheBodysStructure) {
  Graph a = parse(kFused);
  std::string changed = kFused;
  changed.replace(changed.find("relu(%0)"), 8, "tanh(%0)");
  Graph b = parse(changed);
  EXPECT_NE(structuralHash(a), structuralHash(b)) << "a different body is a different graph";
  const Attr& x = *a.nodes().front()->attr("body");
  const Attr& y = *b.nodes().front()->attr("body");
  EXPECT_FALSE(x == y);
  Graph c = parse(kFused);
  EXPECT_TRUE(x == *c.nodes().front()->attr("body")) << "equal by structure, not by address";
}

TEST(Region, ClonesShareTheRegionAndJsonCarriesIt) {
  Graph g = parse(kFused);
  Graph copy = g.clone();
  EXPECT_EQ(&copy.nodes().front()->subgraph("body"), &g.nodes().front()->subgraph("body"))
      << "a region is immutable: clones share it";
  auto back = graphFromJsonText(graphToJsonText(g), "json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(printGraph(*back), kFusedPrinted);
}

TEST(Region, BadRegionsAreOneLineErrorsThatSayWhere) {
  std::string bad = kFused;
  bad.replace(bad.find("relu(%0)"), 8, "relu(%9)");
  auto g = parseGraph(bad, "bad.kir");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().message.find("bad.kir:4"), std::string::npos) << g.error().message;
  EXPECT_NE(g.error().message.find("%9"), std::string::npos) << g.error().message;
  // Regions nest only so deep (hostile text cannot exhaust the stack).
  std::string deep = "graph g(%x: f32[1] data) {\n  %0 = fused_elementwise(%x) {body=";
  for (int i = 0; i < 6; ++i) deep += "graph b(%y: f32[1] data) { %0 = fused_elementwise(%y) {body=";
  auto d = parseGraph(deep, "deep.kir");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message.find("nested too deep"), std::string::npos) << d.error().message;
}

}  // namespace
}  // namespace kiln
