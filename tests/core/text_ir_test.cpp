#include <gtest/gtest.h>

#include <cmath>

#include "core/graph_hash.h"
#include "core/graph_json.h"
#include "core/text_ir.h"
#include "core/verifier.h"

namespace kiln {
namespace {

const char* kSample =
    R"(graph mlp(%input0: f32[2,3] data, %fc.weight: f32[4,3] param, %fc.bias: f32[4] param, %0.w: f32[4] buffer) {
  %0 = linear(%input0, %fc.weight, %fc.bias) : f32[2,4] @fc loc("model.py:12")
  %1 = gelu(%0) {approximate="tanh"} : f32[2,4] @act
  %2, %3 = split(%1) {dim=1, sizes=[1,3]} : f32[2,1], f32[2,3]
  %4 = full() {dtype=f32, shape=[], value=-inf} : f32[]
  %5 = maximum(%2, %4) : f32[2,1]
  %6 = clamp(%3) {max=6.5, min=0.0} : f32[2,3] @"odd scope/with slash"
  return %5 "output0", %6 "output1", %0.w "0.w" buffer_update
}
)";

TEST(TextIrTest, RoundTripsExactly) {
  auto g = parseGraph(kSample, "sample");
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(printGraph(*g), kSample);
  EXPECT_TRUE(verify(*g).ok()) << verify(*g).error().message;
}

TEST(TextIrTest, ParsesAttributesWithTheirKinds) {
  auto g = parseGraph(kSample);
  ASSERT_TRUE(g.ok()) << g.error().message;
  auto it = g->nodes().begin();
  std::advance(it, 3);
  const Node& full = **it;
  EXPECT_TRUE(std::isinf(full.f("value")));
  EXPECT_EQ(full.dt("dtype"), DType::F32);
  EXPECT_EQ(g->outputs()[2].role, OutputRole::BufferUpdate);
  EXPECT_EQ(g->inputs()[3]->name(), "0.w");
}

TEST(TextIrTest, FloatsKeepFullPrecision) {
  Graph g;
  Value* x = g.addInput("x", {DType::F32, {3}}, ValueRole::Data);
  g.addOutput(g.add("leaky_relu", {x}, {{"negative_slope", 0.1 + 0.2}}), "output0");
  auto back = parseGraph(printGraph(g));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->nodes().front()->f("negative_slope"), 0.1 + 0.2);
}

TEST(TextIrTest, ValueIdsNumberIntermediatesByIdAndStillParse) {
  auto g = parseGraph(kSample, "sample");
  ASSERT_TRUE(g.ok()) << g.error().message;
  const Value* gelu = (*std::next(g->nodes().begin()))->output();
  const std::string ids = printGraph(*g, {.value_ids = true});
  EXPECT_NE(ids.find("%" + std::to_string(gelu->id()) + " = gelu("), std::string::npos) << ids;
  EXPECT_NE(ids.find("%0.w \"0.w\" buffer_update"), std::string::npos) << "graph inputs keep their names";
  auto back = parseGraph(ids, "ids");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(printGraph(*back), kSample) << "the same graph, renumbered";
}

TEST(TextIrTest, EmptyListsKeepTheirKind) {
  Graph g;
  Value* x = g.addInput("x", {DType::F32, {3}}, ValueRole::Data);
  g.addOutput(g.add("sum", {x}, {{"dims", std::vector<int64_t>{}}}), "output0");
  std::string text = printGraph(g);
  EXPECT_NE(text.find("dims=[]"), std::string::npos);
  auto back = parseGraph(text);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(printGraph(*back), text);
}

struct BadCase {
  const char* name;
  const char* text;
  const char* expect;  // substring of the error
};

class TextIrErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(TextIrErrorTest, ReportsWhereAndWhat) {
  auto g = parseGraph(GetParam().text, "bad.kir");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().message.find(GetParam().expect), std::string::npos) << g.error().message;
  EXPECT_EQ(g.error().message.rfind("bad.kir:", 0), 0u) << g.error().message;
}

INSTANTIATE_TEST_SUITE_P(
    TextIr, TextIrErrorTest,
    ::testing::Values(
        BadCase{"empty", "", "expected 'graph'"},
        BadCase{"unknown_op", "graph g(%x: f32[2] data) {\n  %0 = frobnicate(%x) : f32[2]\n  return %0 \"o\"\n}",
                "2:8: unknown op 'frobnicate'"},
        BadCase{"undefined", "graph g(%x: f32[2] data) {\n  %0 = relu(%y) : f32[2]\n  return %0 \"o\"\n}",
                "undefined value %y"},
        BadCase{"bad_dtype", "graph g(%x: q7[2] data) {\n  return %x \"o\"\n}", "unknown dtype 'q7'"},
        BadCase{"bad_role", "graph g(%x: f32[2] wobble) {\n  return %x \"o\"\n}", "unknown input role"},
        BadCase{"redefined",
                "graph g(%x: f32[2] data) {\n  %0 = relu(%x) : f32[2]\n  %0 = relu(%x) : f32[2]\n  return %0 \"o\"\n}",
                "defined twice"},
        BadCase{"missing_return", "graph g(%x: f32[2] data) {\n  %0 = relu(%x) : f32[2]\n", "missing 'return'"},
        BadCase{"unterminated", "graph g(%x: f32[2] data) {\n  %0 = gelu(%x) {approximate=\"tanh} : f32[2]\n}",
                "unterminated string"},
        BadCase{"int_overflow", "graph g(%x: f32[99999999999999999999] data) {\n  return %x \"o\"\n}",
                "invalid integer"},
        BadCase{"type_count", "graph g(%x: f32[2] data) {\n  %0, %1 = relu(%x) : f32[2]\n  return %0 \"o\"\n}",
                "2 results but 1 types"},
        BadCase{"arity", "graph g(%x: f32[2] data) {\n  %0 = add(%x) : f32[2]\n  return %0 \"o\"\n}", "takes 2"},
        BadCase{"trailing", "graph g(%x: f32[2] data) {\n  return %x \"o\"\n} extra", "unexpected text"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(VerifierTest, CatchesWrongResultType) {
  auto g = parseGraph("graph g(%x: f32[2,3] data) {\n  %0 = relu(%x) : f32[3,2] @blk\n  return %0 \"o\"\n}");
  ASSERT_TRUE(g.ok()) << g.error().message;
  Status s = verify(*g);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("shape inference gives f32[2,3]"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("@blk"), std::string::npos) << s.error().message;
}

TEST(VerifierTest, CatchesUnknownAndMissingAttributes) {
  auto g = parseGraph("graph g(%x: f32[2,3] data) {\n  %0 = softmax(%x) {axis=1} : f32[2,3]\n  return %0 \"o\"\n}");
  ASSERT_TRUE(g.ok()) << g.error().message;
  Status s = verify(*g);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("unknown attribute 'axis'"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("missing required attribute 'dim'"), std::string::npos) << s.error().message;
}

TEST(VerifierTest, CatchesWrongAttributeKind) {
  auto g =
      parseGraph("graph g(%x: f32[2,3] data) {\n  %0 = softmax(%x) {dim=\"one\"} : f32[2,3]\n  return %0 \"o\"\n}");
  ASSERT_TRUE(g.ok()) << g.error().message;
  Status s = verify(*g);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("'dim' must be a int"), std::string::npos) << s.error().message;
}

TEST(VerifierTest, CatchesBrokenUseLists) {
  Graph g;
  Value* x = g.addInput("x", {DType::F32, {2}}, ValueRole::Data);
  Value* y = g.add("relu", {x});
  g.addOutput(y, "o");
  EXPECT_TRUE(verify(g).ok());
  // Simulate a pass that forgot to update uses by cloning into a graph whose
  // operand comes from elsewhere.
  Graph other;
  Value* z = other.addInput("z", {DType::F32, {2}}, ValueRole::Data);
  y->producer()->replaceInput(0, z);
  Status s = verify(g);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("not in this graph"), std::string::npos) << s.error().message;
}

TEST(JsonTest, RoundTripsThroughJson) {
  auto g = parseGraph(kSample);
  ASSERT_TRUE(g.ok()) << g.error().message;
  std::string text = graphToJsonText(*g);
  EXPECT_NE(text.find("\"-inf\""), std::string::npos);
  auto back = graphFromJsonText(text, "g.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(printGraph(*back), printGraph(*g));
  EXPECT_EQ(structuralHash(*back), structuralHash(*g));
}

TEST(JsonTest, RejectsMalformedInput) {
  for (const char* bad : {"", "{", "[]", "{\"format\": \"kiln-graph\", \"version\": 1}",
                          "{\"format\": \"kiln-graph\", \"version\": 1, \"inputs\": [], \"nodes\": [{\"op\": \"relu\", "
                          "\"inputs\": [7], \"outputs\": []}], \"outputs\": []}",
                          "{\"format\": \"other\"}"}) {
    auto g = graphFromJsonText(bad, "bad.json");
    EXPECT_FALSE(g.ok()) << bad;
    if (!g.ok()) EXPECT_EQ(g.error().message.rfind("bad.json", 0), 0u) << g.error().message;
  }
}

TEST(HashTest, IgnoresScopesButNotStructure) {
  auto a = parseGraph("graph g(%x: f32[2] data) {\n  %0 = relu(%x) : f32[2] @a\n  return %0 \"o\"\n}");
  auto b = parseGraph("graph g(%x: f32[2] data) {\n  %0 = relu(%x) : f32[2] @b loc(\"x.py:1\")\n  return %0 \"o\"\n}");
  auto c = parseGraph("graph g(%x: f32[2] data) {\n  %0 = neg(%x) : f32[2]\n  return %0 \"o\"\n}");
  auto d = parseGraph("graph g(%x: f32[3] data) {\n  %0 = relu(%x) : f32[3]\n  return %0 \"o\"\n}");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok());
  EXPECT_EQ(structuralHash(*a), structuralHash(*b));
  EXPECT_NE(structuralHash(*a), structuralHash(*c));
  EXPECT_NE(structuralHash(*a), structuralHash(*d));
  EXPECT_EQ(hashHex(structuralHash(*a)).size(), 16u);
}

}  // namespace
}  // namespace kiln
