// kiln export --format fx with const inputs (a trace's baked-in tensors):
// the file carries them as CONSTS, their bytes in base64, and a const input
// without its tensor, or with a tensor of another type, is one clear error.
// (The file's numbers against Kiln's step: tests/export/fx_export_test.py.)
#include <gtest/gtest.h>

#include <cstring>

#include "core/export/fx_python.h"
#include "core/text_ir.h"

namespace kiln {
namespace {

Graph withConst() {
  auto g = parseGraph(R"(graph g(%x: i64[2] data, %__const.0: i64[2] const) {
  %0 = mul(%x, %__const.0) : i64[2]
  return %0 "output0"
}
)",
                      "const");
  EXPECT_TRUE(g.ok()) << g.error().message;
  return std::move(*g);
}

TEST(FxPythonConsts, AreWrittenInBase64AndBoundByRun) {
  Tensor idx(DType::I64, {2});
  const int64_t values[] = {1, 2};
  std::memcpy(idx.raw(), values, sizeof values);
  auto py = graphToFxPython(withConst(), {{"__const.0", idx}});
  ASSERT_TRUE(py.ok()) << py.error().message;
  EXPECT_NE(py->find("'__const.0': _tensor(torch.int64, [2], \"AQAAAAAAAAACAAAAAAAAAA==\")"), std::string::npos) << *py;
  EXPECT_NE(py->find("tensors[name] if name in tensors else CONSTS[name]"), std::string::npos);
}

TEST(FxPythonConsts, AMissingOrMistypedConstIsAnError) {
  auto missing = graphToFxPython(withConst());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message, "const input __const.0 has no tensor to write into the file");
  auto mistyped = graphToFxPython(withConst(), {{"__const.0", Tensor(DType::I32, {2})}});
  ASSERT_FALSE(mistyped.ok());
  EXPECT_EQ(mistyped.error().message, "const input __const.0 is i64[2] in the graph but i32[2] in the model");
}

TEST(FxPythonConsts, ABase64TailIsPadded) {
  // 4 bytes: one full group and one byte left (two '=' of padding).
  Tensor b(DType::I8, {4});
  const int8_t values[] = {1, 2, 3, 4};
  std::memcpy(b.raw(), values, sizeof values);
  auto g = parseGraph(R"(graph g(%x: i8[4] data, %c: i8[4] const) {
  %0 = add(%x, %c) : i8[4]
  return %0 "output0"
}
)",
                      "i8");
  ASSERT_TRUE(g.ok()) << g.error().message;
  auto py = graphToFxPython(*g, {{"c", b}});
  ASSERT_TRUE(py.ok()) << py.error().message;
  EXPECT_NE(py->find("\"AQIDBA==\""), std::string::npos) << *py;
}

}  // namespace
}  // namespace kiln
