// Finite-difference checks of the elementwise gradient rules (double precision).
#include "tests/passes/grad_check.h"

namespace kiln::testing {
namespace {

TEST(GradElementwise, BinaryBroadcast) {
  for (const char* op : {"add", "sub", "mul"}) {
    EXPECT_TRUE(checkGrad({.op = op, .inputs = {f64({3, 4}), f64({4})}}));
    EXPECT_TRUE(checkGrad({.op = op, .inputs = {f64({2, 1, 4}), f64({3, 1})}}));
  }
}

TEST(GradElementwise, Relu) { EXPECT_TRUE(checkGrad({.op = "relu", .inputs = {f64({5, 3})}, .kinks = {0}})); }

}  // namespace
}  // namespace kiln::testing
