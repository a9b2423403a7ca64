// Op symbols (core/op_names.h): the list and the op table name the same
// ops, and names and symbols convert both ways.
#include <gtest/gtest.h>

#include "core/op_table.h"
#include "core/text_ir.h"

namespace kiln {
namespace {

TEST(OpNames, EveryListedOpIsRegisteredUnderItsSymbol) {
  size_t registered = 0;
  for (size_t i = 0; i < kOpCount; ++i) {
    const Op op = static_cast<Op>(i);
    const OpDef* def = OpTable::get().find(opName(op));
    ASSERT_NE(def, nullptr) << opName(op) << " is in KILN_OP_LIST but no op family registers it";
    EXPECT_EQ(def->id, op) << def->name;
    EXPECT_EQ(opByName(opName(op)), op);
    ++registered;
  }
  EXPECT_EQ(registered, kOpCount);
  // The other direction (OpTable::add also aborts on an op not listed).
  EXPECT_EQ(OpTable::get().all().size(), kOpCount);
  for (const auto& [name, def] : OpTable::get().all()) EXPECT_EQ(opName(def.id), name);
}

TEST(OpNames, UnknownNamesHaveNoSymbol) {
  EXPECT_FALSE(opByName("bmm"));
  EXPECT_FALSE(opByName(""));
  EXPECT_FALSE(opByName("Reshape"));
}

TEST(OpNames, NodesCarryTheirSymbol) {
  auto g = parseGraph(R"(graph t(%x: f32[2,3] data) {
  %y = permute(%x) {dims=[1,0]} : f32[3,2]
  return %y "y"
})",
                      "t");
  ASSERT_TRUE(g.ok()) << g.error().message;
  const Node& n = *g->nodes().front();
  EXPECT_TRUE(n.is(Op::permute));
  EXPECT_FALSE(n.is(Op::reshape));
  EXPECT_EQ(n.kind(), Op::permute);
  EXPECT_EQ(opName(n.kind()), n.op());
}

}  // namespace
}  // namespace kiln
