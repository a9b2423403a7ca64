// The CUDA elementwise kernels (backend/cuda/kernels_elementwise.cu, kernels_unary.cu) against
// the CPU reference: every op over f32 and bf16 (f16, f64 and the integer
// dtypes where the op takes them), same-shape operands of an odd size (the
// grid-stride and vector tails), broadcast and scalar operands, mixed dtypes
// (the operand conversions), attribute variants, and the data-fault flag.
// Without a GPU every test skips visibly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/op_table.h"
#include "tests/cuda/cuda_kernel_check.h"

namespace kiln::cuda::test {
namespace {

constexpr double kExact = 1e-6;    // f32/f64 results the CPU computes with the same IEEE operations
constexpr double kF32Math = 1e-5;  // f32 transcendentals (CUDA's libm vs glibc's)
constexpr double kF64Math = 1e-10;
constexpr double kLowp = 1e-2;  // f16/bf16 outputs

const std::vector<std::string> kFloatTypes = {"f32", "bf16", "f16", "f64"};
const std::vector<std::string> kIntTypes = {"i64", "i32", "i16", "i8", "u8"};
const std::vector<std::string> kAllTypes = {"f32", "bf16", "f16", "f64", "i64", "i32", "i16", "i8", "u8", "bool"};

double floatTol(const std::string& t, bool math = false) {
  if (t == "bf16" || t == "f16") return kLowp;
  if (t == "f64") return math ? kF64Math : kExact;
  if (t == "f32") return math ? kF32Math : kExact;
  return 0.0;  // integers and bool: exact
}

/// One-node graphs over inputs %a (%b, %c); `attrs` includes its braces.
std::string graph1(const std::string& op, const std::string& a, const std::string& out, const std::string& attrs = "") {
  return "graph g(%a: " + a + " data) {\n  %r = " + op + "(%a)" + (attrs.empty() ? "" : " " + attrs) + " : " + out +
         "\n  return %r \"out\"\n}\n";
}
std::string graph2(const std::string& op, const std::string& a, const std::string& b, const std::string& out,
                   const std::string& attrs = "") {
  return "graph g(%a: " + a + " data, %b: " + b + " data) {\n  %r = " + op + "(%a, %b)" +
         (attrs.empty() ? "" : " " + attrs) + " : " + out + "\n  return %r \"out\"\n}\n";
}
std::string graph3(const std::string& op, const std::string& a, const std::string& b, const std::string& c,
                   const std::string& out, const std::string& attrs = "") {
  return "graph g(%a: " + a + " data, %b: " + b + " data, %c: " + c + " data) {\n  %r = " + op + "(%a, %b, %c)" +
         (attrs.empty() ? "" : " " + attrs) + " : " + out + "\n  return %r \"out\"\n}\n";
}
std::string graph0(const std::string& op, const std::string& out, const std::string& attrs) {
  return "graph g() {\n  %r = " + op + "() " + attrs + " : " + out + "\n  return %r \"out\"\n}\n";
}

bool isSignedInt(DType t) {
  return t == DType::I64 || t == DType::I32 || t == DType::I16 || t == DType::I8;
}

/// Signed integer inputs shifted to [-bound/2, bound/2); floats scaled.
Tweak spread(int64_t bound, double float_scale = 1.0) {
  return [=](TensorMap& in) {
    for (auto& [name, t] : in)
      for (int64_t i = 0; i < t.numel(); ++i) {
        if (isSignedInt(t.dtype())) t.set(i, t.at(i) - static_cast<double>(bound / 2));
        if (isFloating(t.dtype())) t.set(i, t.at(i) * float_scale);
      }
  };
}

/// As spread, then input %b (a divisor) made nonzero.
Tweak spreadNonzeroB(int64_t bound) {
  return [=](TensorMap& in) {
    spread(bound)(in);
    Tensor& b = in.at("b");
    for (int64_t i = 0; i < b.numel(); ++i)
      if (b.at(i) == 0) b.set(i, isFloating(b.dtype()) ? 0.5 : 1.0);
  };
}

/// Floats rounded to multiples of `step` (ties for round, clamp bounds, maximum).
Tweak quantize(double step, double scale = 1.0) {
  return [=](TensorMap& in) {
    for (auto& [name, t] : in)
      if (isFloating(t.dtype()))
        for (int64_t i = 0; i < t.numel(); ++i) t.set(i, std::round(t.at(i) * scale / step) * step);
  };
}

struct Shapes {
  std::string a, b, out;
};
// Same shape (odd size: grid-stride and vector tails), broadcast both ways,
// scalars on either side, a trailing-dim bias, equal sizes of other ranks.
const std::vector<Shapes> kBinaryShapes = {
    {"[1000003]", "[1000003]", "[1000003]"},
    {"[4,1,5]", "[3,1]", "[4,3,5]"},
    {"[7,33]", "[]", "[7,33]"},
    {"[]", "[7,33]", "[7,33]"},
    {"[2,3,4,5]", "[3,1,5]", "[2,3,4,5]"},
    {"[6,1]", "[1,9]", "[6,9]"},
    {"[5]", "[1,5]", "[1,5]"},
    {"[130,67]", "[67]", "[130,67]"},
};

// ---- binary arithmetic ----------------------------------------------------------

TEST(CudaElementwise, FloatArithmetic) {
  KILN_REQUIRE_GPU();
  for (const char* op : {"add", "sub", "mul", "div", "floor_div", "remainder", "maximum", "minimum", "atan2"})
    for (const std::string& t : kFloatTypes)
      for (const Shapes& s : kBinaryShapes) {
        SCOPED_TRACE(std::string(op) + " " + t + s.a + " " + t + s.b);
        expectMatchesCpuWith(graph2(op, t + s.a, t + s.b, t + s.out), {.tol = floatTol(t)}, spreadNonzeroB(0));
      }
}

TEST(CudaElementwise, FloatPowAndXlogy) {
  KILN_REQUIRE_GPU();
  for (const std::string& t : kFloatTypes)
    for (const Shapes& s : kBinaryShapes) {
      SCOPED_TRACE("pow " + t + s.a + " " + t + s.b);
      expectMatchesCpu(graph2("pow", t + s.a, t + s.b, t + s.out), {.tol = floatTol(t, true), .positive = true});
      expectMatchesCpu(graph2("xlogy", t + s.a, t + s.b, t + s.out), {.tol = floatTol(t, true), .positive = true});
    }
  // Negative bases with integral exponents, and the NaN of a fractional one.
  expectMatchesCpuWith(graph2("pow", "f32[300]", "f32[300]", "f32[300]"), {.tol = kF32Math}, quantize(1.0, 3.0));
}

TEST(CudaElementwise, IntegerArithmetic) {
  KILN_REQUIRE_GPU();
  for (const char* op : {"add", "sub", "mul", "maximum", "minimum", "floor_div", "remainder", "pow"})
    for (const std::string& t : kIntTypes)
      for (const Shapes& s : {kBinaryShapes[0], kBinaryShapes[1], kBinaryShapes[2], kBinaryShapes[3]}) {
        SCOPED_TRACE(std::string(op) + " " + t + s.a + " " + t + s.b);
        expectMatchesCpuWith(graph2(op, t + s.a, t + s.b, t + s.out), {.tol = 0, .int_bound = 11}, spreadNonzeroB(11));
      }
}

TEST(CudaElementwise, BoolArithmetic) {
  KILN_REQUIRE_GPU();
  for (const char* op : {"add", "sub", "mul", "maximum", "minimum", "pow"})
    for (const Shapes& s : {kBinaryShapes[0], kBinaryShapes[1], kBinaryShapes[2]}) {
      SCOPED_TRACE(std::string(op) + " bool" + s.a);
      expectMatchesCpu(graph2(op, "bool" + s.a, "bool" + s.b, "bool" + s.out), {.tol = 0});
    }
}

TEST(CudaElementwise, IntegerTrueDivisionGivesF32) {
  KILN_REQUIRE_GPU();
  for (const std::string& t : kIntTypes) {
    SCOPED_TRACE(t);
    expectMatchesCpuWith(graph2("div", t + "[4,1,5]", t + "[3,1]", "f32[4,3,5]"), {.tol = kExact, .int_bound = 9},
                         spreadNonzeroB(9));
  }
}

/// Operands of different dtypes: converted (as the CPU's asDType) before the op.
TEST(CudaElementwise, TypePromotion) {
  KILN_REQUIRE_GPU();
  const Tweak none = [](TensorMap&) {};
  expectMatchesCpu(graph2("add", "bf16[4,1,5]", "f32[]", "bf16[4,1,5]"), {.tol = kLowp});
  expectMatchesCpu(graph2("mul", "f32[]", "f16[1001]", "f16[1001]"), {.tol = kLowp});
  expectMatchesCpu(graph2("mul", "i64[7,3]", "f32[]", "f32[7,3]"), {.tol = kExact});
  expectMatchesCpu(graph2("add", "i32[5,4]", "i64[]", "i32[5,4]"), {.tol = 0});
  expectMatchesCpu(graph2("add", "u8[10]", "i8[10]", "i16[10]"), {.tol = 0});
  expectMatchesCpu(graph2("sub", "bool[3,4]", "i32[4]", "i32[3,4]"), {.tol = 0});
  expectMatchesCpu(graph2("maximum", "f16[8]", "bf16[8]", "f32[8]"), {.tol = kExact});
  expectMatchesCpu(graph2("add", "f32[6,2]", "f64[6,2]", "f64[6,2]"), {.tol = kExact});
  expectMatchesCpuWith(graph2("div", "i32[6]", "f32[6]", "f32[6]"), {.tol = kExact}, spreadNonzeroB(10));
  expectMatchesCpu(graph2("atan2", "i32[6]", "i64[6]", "f32[6]"), {.tol = kF32Math});
  expectMatchesCpu(graph2("xlogy", "i32[6]", "i64[6]", "f32[6]"), {.tol = kF32Math, .positive = true});
  expectMatchesCpu(graph2("lt", "i64[5,3]", "f32[3]", "bool[5,3]"), {.tol = 0});
  expectMatchesCpu(graph2("eq", "i32[4]", "f64[]", "bool[4]"), {.tol = 0});
  expectMatchesCpu(graph2("ge", "u8[9]", "i8[9]", "bool[9]"), {.tol = 0});
  expectMatchesCpu(graph3("where", "bool[4,1,5]", "f32[3,1]", "f64[]", "f32[4,3,5]"), {.tol = kExact});
  expectMatchesCpu(graph3("where", "bool[4,5]", "i32[4,5]", "f32[]", "f32[4,5]"), {.tol = kExact});
  expectMatchesCpuWith(graph2("logical_and", "f32[6,4]", "i32[4]", "bool[6,4]"), {.tol = 0, .int_bound = 2}, none);
}

/// Integer division by zero: the CPU throws; the kernel writes 0 and flags the node.
TEST(CudaElementwise, IntegerDivisionByZeroRaisesTheFaultFlag) {
  KILN_REQUIRE_GPU();
  for (const char* op : {"floor_div", "remainder"}) {
    auto g = parseGraph(graph2(op, "i32[4]", "i32[4]", "i32[4]"), "test");
    ASSERT_TRUE(g.ok()) << g.error().message;
    const Node& n = *g->nodes().front();
    Tensor a(TensorType{DType::I32, {4}}), b(TensorType{DType::I32, {4}});
    for (int64_t i = 0; i < 4; ++i) a.set(i, 7.0), b.set(i, i == 2 ? 0.0 : 2.0);
    const std::vector<Tensor> args{a, b};
    auto r = runNode(n, args, nullptr, {.node_index = 41});
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->error_flag, 42) << op;
    EXPECT_EQ(r->outputs[0].at(0), std::string(op) == "floor_div" ? 3.0 : 1.0);
  }
}

// ---- comparisons, logical ops, where ------------------------------------------------

TEST(CudaElementwise, Comparisons) {
  KILN_REQUIRE_GPU();
  for (const char* op : {"eq", "ne", "lt", "le", "gt", "ge"})
    for (const std::string& t : kAllTypes)
      for (const Shapes& s : {kBinaryShapes[0], kBinaryShapes[1], kBinaryShapes[2], kBinaryShapes[6]}) {
        SCOPED_TRACE(std::string(op) + " " + t + s.a + " " + t + s.b);
        // Small integers and floats on a coarse grid so ties occur.
        expectMatchesCpuWith(graph2(op, t + s.a, t + s.b, "bool" + s.out), {.tol = 0, .int_bound = 3}, quantize(0.5));
      }
}

TEST(CudaElementwise, LogicalOps) {
  KILN_REQUIRE_GPU();
  for (const char* op : {"logical_and", "logical_or", "logical_xor"})
    for (const Shapes& s : kBinaryShapes) {
      SCOPED_TRACE(std::string(op) + s.a);
      expectMatchesCpu(graph2(op, "bool" + s.a, "bool" + s.b, "bool" + s.out), {.tol = 0});
    }
  // Truthiness of other dtypes (zeros on a coarse grid; NaN-free).
  for (const std::string t : {"f32", "bf16", "i64", "u8"})
    expectMatchesCpuWith(graph2("logical_xor", t + "[4,1,5]", "bool[3,1]", "bool[4,3,5]"), {.tol = 0, .int_bound = 2},
                         quantize(1.0));
}

TEST(CudaElementwise, LogicalNot) {
  KILN_REQUIRE_GPU();
  for (const std::string& t : kAllTypes)
    for (const char* shape : {"[1000003]", "[3,5]", "[]"}) {
      SCOPED_TRACE(t + shape);
      expectMatchesCpuWith(graph1("logical_not", t + shape, std::string("bool") + shape), {.tol = 0, .int_bound = 2},
                           quantize(1.0));
    }
}

TEST(CudaElementwise, Where) {
  KILN_REQUIRE_GPU();
  for (const std::string& t : kAllTypes) {
    SCOPED_TRACE(t);
    const double tol = floatTol(t);
    expectMatchesCpu(graph3("where", "bool[1000003]", t + "[1000003]", t + "[1000003]", t + "[1000003]"), {.tol = tol});
    expectMatchesCpu(graph3("where", "bool[4,1,5]", t + "[3,1]", t + "[]", t + "[4,3,5]"), {.tol = tol});
    expectMatchesCpu(graph3("where", "bool[]", t + "[6,7]", t + "[7]", t + "[6,7]"), {.tol = tol});
    expectMatchesCpu(graph3("where", "bool[2,1,3]", t + "[2,4,1]", t + "[1,1,3]", t + "[2,4,3]"), {.tol = tol});
  }
}

// ---- unary ops --------------------------------------------------------------------

struct UnaryCase {
  const char* op;
  const char* attrs;
  bool positive;  ///< domain (0.1, 2)
  bool math;      ///< a transcendental (f32 tolerance 1e-5)
};
const std::vector<UnaryCase> kFloatUnary = {
    {"exp", "", false, true},
    {"log", "", true, true},
    {"log1p", "", true, true},
    {"expm1", "", false, true},
    {"sqrt", "", true, false},
    {"rsqrt", "", true, false},
    {"reciprocal", "", false, false},
    {"sin", "", false, true},
    {"cos", "", false, true},
    {"tanh", "", false, true},
    {"sigmoid", "", false, true},
    {"erf", "", false, true},
    {"floor", "", false, false},
    {"ceil", "", false, false},
    {"round", "", false, false},
    {"silu", "", false, true},
    {"mish", "", false, true},
    {"hardswish", "", false, false},
    {"hardsigmoid", "", false, false},
    {"gelu", "", false, true},
    {"gelu", "{approximate=\"none\"}", false, true},
    {"gelu", "{approximate=\"tanh\"}", false, true},
    {"hardtanh", "", false, false},
    {"hardtanh", "{max_val=0.75, min_val=-0.5}", false, false},
    {"hardtanh", "{max_val=6.0, min_val=0.0}", false, false},
    {"leaky_relu", "", false, false},
    {"leaky_relu", "{negative_slope=0.2}", false, false},
    {"elu", "", false, true},
    {"elu", "{alpha=0.5}", false, true},
    {"softplus", "", false, true},
    {"softplus", "{beta=2.0, threshold=1.0}", false, true},
};

TEST(CudaElementwise, FloatUnaryOps) {
  KILN_REQUIRE_GPU();
  for (const UnaryCase& c : kFloatUnary)
    for (const std::string& t : kFloatTypes)
      for (const char* shape : {"[1000003]", "[3,5,7]", "[]"}) {
        SCOPED_TRACE(std::string(c.op) + " " + c.attrs + " " + t + shape);
        // Inputs over about [-4, 4] (or (0.1, 2)) cover the activations' branches.
        expectMatchesCpuWith(graph1(c.op, t + shape, t + shape, c.attrs),
                             {.tol = floatTol(t, c.math), .positive = c.positive}, spread(0, c.positive ? 1.0 : 4.0));
      }
}

TEST(CudaElementwise, RoundHalfToEven) {
  KILN_REQUIRE_GPU();
  for (const std::string& t : kFloatTypes)
    expectMatchesCpuWith(graph1("round", t + "[999]", t + "[999]"), {.tol = floatTol(t)}, quantize(0.5, 4.0));
}

TEST(CudaElementwise, UnaryOpsOnEveryDType) {
  KILN_REQUIRE_GPU();
  for (const char* op : {"neg", "abs", "relu", "sign"})
    for (const std::string& t : kAllTypes)
      for (const char* shape : {"[1000003]", "[3,5]", "[]"}) {
        SCOPED_TRACE(std::string(op) + " " + t + shape);
        expectMatchesCpuWith(graph1(op, t + shape, t + shape), {.tol = floatTol(t), .int_bound = 9}, spread(9));
      }
}

TEST(CudaElementwise, Clamp) {
  KILN_REQUIRE_GPU();
  const std::vector<std::string> float_attrs = {"{max=0.75, min=-0.5}", "{min=0.5}", "{max=-0.25}",
                                                "{max=-1.0, min=1.0}", ""};
  for (const std::string& t : kFloatTypes)
    for (const std::string& a : float_attrs) {
      SCOPED_TRACE(t + " " + a);
      expectMatchesCpuWith(graph1("clamp", t + "[1000003]", t + "[1000003]", a), {.tol = floatTol(t)}, quantize(0.25));
      expectMatchesCpu(graph1("clamp", t + "[4,5]", t + "[4,5]", a), {.tol = floatTol(t)});
    }
  // Integers clamp to the bounds rounded inwards, saturated to the type's range.
  const std::vector<std::string> int_attrs = {"{max=7.0, min=2.5}", "{min=-2.0}", "{max=3.9}", "{max=1e12, min=-1e12}",
                                              ""};
  for (const std::string& t : kIntTypes)
    for (const std::string& a : int_attrs) {
      SCOPED_TRACE(t + " " + a);
      expectMatchesCpuWith(graph1("clamp", t + "[1000003]", t + "[1000003]", a), {.tol = 0, .int_bound = 13},
                           spread(13));
    }
  expectMatchesCpu(graph1("clamp", "bool[33]", "bool[33]", "{min=0.5}"), {.tol = 0});
  expectMatchesCpu(graph1("clamp", "bool[33]", "bool[33]", "{max=0.5}"), {.tol = 0});
}

TEST(CudaElementwise, Cast) {
  KILN_REQUIRE_GPU();
  for (const std::string& from : kAllTypes)
    for (const std::string& to : kAllTypes) {
      SCOPED_TRACE(from + " -> " + to);
      // Floats over about [-300, 300]: narrow integer targets wrap, as on the CPU.
      expectMatchesCpuWith(graph1("cast", from + "[257]", to + "[257]", "{dtype=" + to + "}"),
                           {.tol = 0, .int_bound = 200}, spread(200, 100.0));
    }
  expectMatchesCpu(graph1("cast", "f32[1000003]", "bf16[1000003]", "{dtype=bf16}"), {.tol = 0});
  expectMatchesCpu(graph1("cast", "bf16[1000003]", "f32[1000003]", "{dtype=f32}"), {.tol = 0});
  expectMatchesCpu(graph1("cast", "f32[1000003]", "f32[1000003]", "{dtype=f32}"), {.tol = 0});
}

// ---- unary_backward, binary_backward -----------------------------------------------

struct GradCase {
  const char* fn;
  const char* attrs;  ///< besides fn
  bool positive;
};
const std::vector<GradCase> kUnaryGrads = {
    {"abs", "", false},
    {"clamp", "max=0.5, min=-0.5", false},
    {"hardtanh", "max_val=0.25, min_val=-0.5", false},
    {"hardtanh", "", false},
    {"log1p", "", true},
    {"expm1", "", false},
    {"sqrt", "", true},
    {"rsqrt", "", true},
    {"reciprocal", "", true},
    {"sin", "", false},
    {"cos", "", false},
    {"tanh", "", false},
    {"sigmoid", "", false},
    {"erf", "", false},
    {"silu", "", false},
    {"mish", "", false},
    {"hardswish", "", false},
    {"hardsigmoid", "", false},
    {"gelu", "approximate=\"none\"", false},
    {"gelu", "approximate=\"tanh\"", false},
    {"leaky_relu", "negative_slope=0.2", false},
    {"leaky_relu", "", false},
    {"elu", "alpha=0.7", false},
    {"softplus", "", false},
    {"softplus", "beta=2.0, threshold=1.0", false},
};

TEST(CudaElementwise, UnaryBackward) {
  KILN_REQUIRE_GPU();
  for (const GradCase& c : kUnaryGrads)
    for (const std::string t : {"f32", "bf16", "f16", "f64"})
      for (const char* shape : {"[1000003]", "[3,7,11]"}) {
        const std::string attrs =
            std::string("{") + (*c.attrs ? std::string(c.attrs) + ", " : "") + "fn=\"" + c.fn + "\"}";
        SCOPED_TRACE(attrs + " " + t + shape);
        // Values on a quarter grid over about [-4, 4]: the bounds of clamp,
        // hardtanh, hardswish and hardsigmoid are hit exactly.
        const Tweak tweak = c.positive ? quantize(0.0625) : quantize(0.25, 4.0);
        expectMatchesCpuWith(graph2("unary_backward", t + shape, t + shape, t + shape, attrs),
                             {.tol = floatTol(t, true), .positive = c.positive}, tweak);
      }
}

TEST(CudaElementwise, BinaryBackward) {
  KILN_REQUIRE_GPU();
  const std::vector<Shapes> shapes = {{"[1000003]", "[1000003]", "[1000003]"},
                                      {"[4,1,5]", "[3,1]", "[4,3,5]"},
                                      {"[7,3]", "[]", "[7,3]"},
                                      {"[]", "[5]", "[5]"}};
  for (const char* fn : {"div", "pow", "maximum", "minimum", "atan2", "xlogy"})
    for (int input = 0; input < 2; ++input)
      for (const std::string t : {"f32", "bf16", "f16", "f64"})
        for (const Shapes& s : shapes) {
          const std::string attrs = "{fn=\"" + std::string(fn) + "\", input=" + std::to_string(input) + "}";
          SCOPED_TRACE(attrs + " " + t + s.a + " " + t + s.b);
          const bool pow = std::string(fn) == "pow" || std::string(fn) == "xlogy", div = std::string(fn) == "div";
          // pow and xlogy on positive operands; maximum/minimum on a coarse grid (ties halve the gradient).
          const Tweak tweak = pow ? quantize(0.125) : div ? spreadNonzeroB(0) : quantize(0.5);
          expectMatchesCpuWith(graph3("binary_backward", t + s.out, t + s.a, t + s.b, t + s.out, attrs),
                               {.tol = floatTol(t, pow), .positive = pow}, tweak);
        }
  // Integer forward operands (div of i64 gives f32; the gradient reads them as f32).
  expectMatchesCpuWith(graph3("binary_backward", "f32[4,3]", "i64[4,3]", "i64[3]", "f32[4,3]", "{fn=\"div\", input=1}"),
                       {.tol = kExact}, spreadNonzeroB(10));
}

// ---- full, arange, tril, triu ------------------------------------------------------

TEST(CudaElementwise, Full) {
  KILN_REQUIRE_GPU();
  for (const std::string& t : kAllTypes)
    for (const char* value : {"2.7", "-1.5", "0.0", "1e10", "-0.0"})
      for (const char* shape : {"[]", "[3,4]", "[1000003]"}) {
        SCOPED_TRACE(t + shape + " " + value);
        const std::string s(shape);
        const std::string attrs = "{dtype=" + t + ", shape=" + s + ", value=" + value + "}";
        expectMatchesCpu(graph0("full", t + s, attrs), {.tol = 0});
      }
}

/// A float attribute in text IR (always with a point or exponent, so it parses as a float).
std::string floatAttr(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s(buf);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

TEST(CudaElementwise, Arange) {
  KILN_REQUIRE_GPU();
  struct Range {
    double start, end, step;
  };
  for (const Range& r : {Range{0, 10, 1}, Range{-1.5, 2.0, 0.25}, Range{0, 1, 0.1}, Range{5, -3, -0.7},
                         Range{0, 1000003, 1}, Range{3, 3.5, 1}})
    for (const std::string& t : kAllTypes) {
      const auto len = static_cast<int64_t>(std::max(0.0, std::ceil((r.end - r.start) / r.step)));
      const std::string attrs = "{dtype=" + t + ", end=" + floatAttr(r.end) + ", start=" + floatAttr(r.start) +
                                ", step=" + floatAttr(r.step) + "}";
      SCOPED_TRACE(attrs);
      // Values past an integer type's range wrap on both sides (bf16/f16 round).
      expectMatchesCpu(graph0("arange", t + "[" + std::to_string(len) + "]", attrs), {.tol = 0});
    }
}

TEST(CudaElementwise, TrilTriu) {
  KILN_REQUIRE_GPU();
  for (const char* op : {"tril", "triu"})
    for (const std::string t : {"f32", "bf16", "f64", "i64", "i8", "bool"})
      for (const char* shape : {"[5,7]", "[3,4,6]", "[3,517,389]", "[7,5]"})
        for (int diag : {0, 2, -1, -9, 9}) {
          SCOPED_TRACE(std::string(op) + " " + t + shape + " diagonal=" + std::to_string(diag));
          expectMatchesCpu(graph1(op, t + shape, t + shape, "{diagonal=" + std::to_string(diag) + "}"),
                           {.tol = 0, .int_bound = 100});
        }
}

// ---- registration ------------------------------------------------------------------

/// Every elementwise op has a cuda-dialect kernel, and only ops whose traits
/// allow it write over an input (as the CPU registry's test demands).
TEST(CudaElementwise, EveryOpIsRegistered) {
  const CudaKernelRegistry& reg = CudaKernelRegistry::get();
  for (const char* op : {"abs",
                         "add",
                         "sub",
                         "mul",
                         "div",
                         "pow",
                         "remainder",
                         "floor_div",
                         "maximum",
                         "minimum",
                         "atan2",
                         "xlogy",
                         "neg",
                         "reciprocal",
                         "sqrt",
                         "rsqrt",
                         "exp",
                         "log",
                         "log1p",
                         "expm1",
                         "sin",
                         "cos",
                         "tanh",
                         "sigmoid",
                         "relu",
                         "gelu",
                         "silu",
                         "mish",
                         "softplus",
                         "elu",
                         "leaky_relu",
                         "hardtanh",
                         "hardswish",
                         "hardsigmoid",
                         "erf",
                         "sign",
                         "floor",
                         "ceil",
                         "round",
                         "clamp",
                         "cast",
                         "where",
                         "eq",
                         "ne",
                         "lt",
                         "le",
                         "gt",
                         "ge",
                         "logical_and",
                         "logical_or",
                         "logical_xor",
                         "logical_not",
                         "unary_backward",
                         "binary_backward",
                         "full",
                         "arange",
                         "tril",
                         "triu"}) {
    const CudaKernelDef* k = reg.byName(op, std::string("cuda.") + op);
    ASSERT_NE(k, nullptr) << op;
    EXPECT_EQ(k->dialect, "cuda") << op;
    if (k->writes_over_input) {
      const OpDef* def = OpTable::get().find(op);
      ASSERT_NE(def, nullptr) << op;
      EXPECT_TRUE(def->has(kElementwise) || def->has(kOutput0OverInput)) << k->name;
    }
  }
}

}  // namespace
}  // namespace kiln::cuda::test
