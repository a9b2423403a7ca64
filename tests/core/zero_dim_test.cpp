// Ops that need a dim reject 0-d inputs with an error instead of reading
// past an empty shape (they used to crash).
#include <gtest/gtest.h>

#include "backend/cpu/cpu_executor.h"
#include "core/ir.h"
#include "core/result.h"

namespace kiln {
namespace {

TEST(ZeroDim, DimOpsRejectScalars) {
  struct Case {
    const char* op;
    AttrMap attrs;
    bool with_index;
  };
  std::vector<Case> cases = {{"slice", {{"dim", int64_t{0}}}, false},
                             {"select", {{"dim", int64_t{0}}, {"index", int64_t{0}}}, false},
                             {"cat", {{"dim", int64_t{0}}}, false},
                             {"split", {{"dim", int64_t{0}}, {"sizes", std::vector<int64_t>{1}}}, false},
                             {"index", {{"dim", int64_t{0}}}, true}};
  for (const Case& c : cases) {
    Graph g;
    Value* x = g.addInput("x", {DType::F32, {}}, ValueRole::Data);
    std::vector<Value*> ins = {x};
    if (c.with_index) ins.push_back(g.addInput("i", {DType::I64, {1}}, ValueRole::Data));
    try {
      g.create(c.op, ins, c.attrs);
      ADD_FAILURE() << c.op << " accepted a 0-d input";
    } catch (const KilnException& e) {
      EXPECT_NE(std::string(e.what()).find("cannot be applied to a 0-d tensor"), std::string::npos) << e.what();
    }
  }
}

TEST(ZeroDim, ArgmaxOfAScalarIsZero) {
  Graph g;
  Value* x = g.addInput("x", {DType::F32, {}}, ValueRole::Data);
  g.addOutput(g.add("argmax", {x}, {{"dim", int64_t{0}}}), "output0");
  auto ex = CpuExecutor::create(g);
  ASSERT_TRUE(ex.ok()) << ex.error().message;
  auto out = ex->run({{"x", Tensor::scalar(DType::F32, 3.5)}});
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ((*out)[0].type(), (TensorType{DType::I64, {}}));
  EXPECT_EQ((*out)[0].at(0), 0);
}

}  // namespace
}  // namespace kiln
