#include <gtest/gtest.h>

#include "core/ir.h"
#include "core/op_table.h"
#include "core/result.h"

namespace kiln {
namespace {

TEST(IrTest, CreateInfersTypesAndTracksUses) {
  Graph g;
  Value* x = g.addInput("input0", {DType::F32, {2, 3}}, ValueRole::Data);
  Value* w = g.addInput("fc.weight", {DType::F32, {4, 3}}, ValueRole::Param);
  Value* y = g.add("linear", {x, w});
  EXPECT_EQ(y->type(), (TensorType{DType::F32, {2, 4}}));
  Value* r = g.add("relu", {y});
  g.addOutput(r, "output0");
  ASSERT_EQ(y->uses().size(), 1u);
  EXPECT_EQ(y->uses()[0].user, r->producer());
  EXPECT_EQ(g.numNodes(), 2u);
}

TEST(IrTest, ShapeErrorNamesOpAndScope) {
  Graph g;
  Value* a = g.addInput("input0", {DType::F32, {2, 3}}, ValueRole::Data);
  Value* b = g.addInput("input1", {DType::F32, {4, 5}}, ValueRole::Data);
  try {
    g.create("add", {a, b}, {}, "block.0");
    FAIL() << "expected a broadcast error";
  } catch (const KilnException& e) {
    EXPECT_NE(std::string(e.what()).find("add @block.0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("do not broadcast"), std::string::npos) << e.what();
  }
}

TEST(IrTest, EraseAndReplaceAllUses) {
  Graph g;
  Value* x = g.addInput("input0", {DType::F32, {4}}, ValueRole::Data);
  Value* a = g.add("relu", {x});
  Value* b = g.add("neg", {a});
  g.addOutput(b, "output0");
  g.replaceAllUsesWith(a, x);
  EXPECT_TRUE(a->uses().empty());
  g.erase(a->producer());
  EXPECT_EQ(g.numNodes(), 1u);
  EXPECT_EQ(b->producer()->input(0), x);
  Graph c = g.clone();
  EXPECT_EQ(c.numNodes(), 1u);
  EXPECT_EQ(c.outputs()[0].value->producer()->input(0), c.inputs()[0]);
}

TEST(IrTest, InsertPointPlacesNodesBefore) {
  Graph g;
  Value* x = g.addInput("input0", {DType::F32, {4}}, ValueRole::Data);
  Value* a = g.add("relu", {x});
  g.setInsertPoint(a->producer());
  g.add("neg", {x});
  g.setInsertPoint(nullptr);
  EXPECT_EQ(g.nodes().front()->op(), "neg");
}

TEST(IrTest, ReorderAcceptsTopologicalOrdersOnly) {
  Graph g;
  Value* x = g.addInput("input0", {DType::F32, {4}}, ValueRole::Data);
  Node* a = g.add("relu", {x})->producer();
  Node* b = g.add("neg", {x})->producer();
  Node* c = g.add("add", {a->output(), b->output()})->producer();
  g.addOutput(c->output(), "output0");
  g.reorder({b, a, c});
  EXPECT_EQ(g.nodes().front().get(), b);
  EXPECT_EQ(g.nodes().back().get(), c);
  for (const auto& bad : std::vector<std::vector<Node*>>{{c, a, b}, {a, b}, {a, a, c}, {a, b, c, c}}) {
    try {
      g.reorder(bad);
      ADD_FAILURE() << "accepted an invalid order of " << bad.size() << " nodes";
    } catch (const KilnException& e) {
      EXPECT_NE(std::string(e.what()), "");
    }
  }
  // A rejected order leaves the graph as it was.
  std::vector<const Node*> now;
  for (const auto& n : g.nodes()) now.push_back(n.get());
  EXPECT_EQ(now, (std::vector<const Node*>{b, a, c}));
}

TEST(IrTest, SplitHasOneOutputPerPiece) {
  Graph g;
  Value* x = g.addInput("input0", {DType::F32, {2, 6}}, ValueRole::Data);
  Node* s = g.create("split", {x}, {{"dim", int64_t{1}}, {"sizes", std::vector<int64_t>{2, 4}}});
  ASSERT_EQ(s->numOutputs(), 2u);
  EXPECT_EQ(s->output(1)->shape(), (Shape{2, 4}));
}

TEST(IrTest, ClassLossOfAScalarIsAnErrorNotACrash) {
  Graph g;
  Value* x = g.addInput("x", {DType::F32, {}}, ValueRole::Data);
  Value* t = g.addInput("t", {DType::I64, {}}, ValueRole::Data);
  for (const char* op : {"cross_entropy", "nll_loss"}) {
    try {
      g.create(op, {x, t});
      ADD_FAILURE() << op << " of a 0-d input should fail";
    } catch (const KilnException& e) {
      EXPECT_NE(std::string(e.what()).find("class dimension (rank >= 1), got f32[]"), std::string::npos) << e.what();
    }
  }
}

TEST(IrTest, OpTableHasAllFamilies) {
  const OpTable& t = OpTable::get();
  for (const char* op : {"add", "sum", "reshape", "matmul", "conv2d", "cross_entropy"})
    EXPECT_NE(t.find(op), nullptr) << op;
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Expected dtypes are torch.result_type's (checked with PyTorch 1.13).
TEST(IrTest, ZeroDimOperandsPromoteLikePyTorch) {
  struct Case {
    DType a;
    Shape sa;
    DType b;
    Shape sb;
    DType expect;
  };
  for (const Case& c : {Case{DType::I32, {2}, DType::I64, {}, DType::I32},
                        Case{DType::I64, {2}, DType::F64, {}, DType::F64},
                        Case{DType::F16, {2}, DType::F64, {}, DType::F16},
                        Case{DType::I32, {}, DType::I64, {}, DType::I64},
                        Case{DType::F32, {2}, DType::F64, {3, 1}, DType::F64}}) {
    Graph g;
    Value* a = g.addInput("a", {c.a, c.sa}, ValueRole::Data);
    Value* b = g.addInput("b", {c.b, c.sb}, ValueRole::Data);
    EXPECT_EQ(g.add("add", {a, b})->dtype(), c.expect) << dtypeName(c.a) << " + " << dtypeName(c.b);
    EXPECT_EQ(g.add("add", {b, a})->dtype(), c.expect) << dtypeName(c.b) << " + " << dtypeName(c.a);
  }
}

}  // namespace
}  // namespace kiln
