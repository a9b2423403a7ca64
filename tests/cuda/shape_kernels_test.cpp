// The CUDA layout and index kernels (backend/cuda/kernels_shape.cu) against
// the CPU reference: every op over f32 and bf16 (and the other dtypes, since
// the copies move elements by size), attribute variants (negative dims and
// indices, steps, every pad mode, crops), sizes past the grid-stride tails,
// valid indices drawn with int_bound, and the data-fault flag for indices out
// of range. Without a GPU every test skips visibly.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "tests/cuda/cuda_kernel_check.h"

namespace kiln::cuda::test {
namespace {

const std::vector<std::string> kAllTypes = {"f32", "bf16", "f16", "f64", "i64", "i32", "i16", "i8", "u8", "bool"};
const std::vector<std::string> kFloatTypes = {"f32", "bf16", "f16", "f64"};

double tolFor(const std::string& t) {
  if (t == "bf16" || t == "f16") return 1e-2;
  if (t == "f32") return 1e-6;
  if (t == "f64") return 1e-12;
  return 0.0;
}

/// A one-node graph: `inputs` as "%a: f32[2,3]" declarations, the node text
/// (e.g. "permute(%a) {dims=[1,0]}"), and its output types.
std::string graph(const std::vector<std::string>& inputs, const std::string& node,
                  const std::vector<std::string>& outs) {
  std::string s = "graph g(";
  for (size_t i = 0; i < inputs.size(); ++i) s += (i ? ", " : "") + inputs[i] + " data";
  s += ") {\n  ";
  std::string names, types, ret;
  for (size_t i = 0; i < outs.size(); ++i) {
    const std::string r = "%r" + std::to_string(i);
    names += (i ? ", " : "") + r;
    types += (i ? ", " : "") + outs[i];
    ret += (i ? ", " : "") + r + " \"out" + std::to_string(i) + "\"";
  }
  return s + names + " = " + node + " : " + types + "\n  return " + ret + "\n}\n";
}

/// Integer inputs named `name` shifted down by `by` (negative indices).
Tweak shiftInts(const std::string& name, int64_t by) {
  return [=](TensorMap& in) {
    Tensor& t = in.at(name);
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, t.at(i) - static_cast<double>(by));
  };
}

/// Runs `ir` on the GPU only with `args` and returns the fault flag (the CPU
/// would throw on such inputs).
int faultFlagOf(const std::string& ir, const std::vector<Tensor>& args, uint64_t node_index) {
  auto g = parseGraph(ir, "test");
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().message);
  if (!g.ok()) return -1;
  auto r = runNode(*g->nodes().front(), args, nullptr, {.node_index = node_index});
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? r->error_flag : -1;
}

Tensor ints(DType dt, Shape shape, const std::vector<double>& values) {
  Tensor t(TensorType{dt, std::move(shape)});
  for (size_t i = 0; i < values.size(); ++i) t.set(static_cast<int64_t>(i), values[i]);
  return t;
}

// ---- views and copies ---------------------------------------------------------

TEST(CudaShape, Reshape) {
  KILN_REQUIRE_GPU();
  for (const std::string t : {"f32", "bf16", "i64", "bool"}) {
    expectMatchesCpu(graph({"%a: " + t + "[4,6]"}, "reshape(%a) {shape=[2,12]}", {t + "[2,12]"}), {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[1000003]"}, "reshape(%a) {shape=[1,1000003]}", {t + "[1,1000003]"}),
                     {.tol = 0});
  }
}

TEST(CudaShape, Permute) {
  KILN_REQUIRE_GPU();
  for (const std::string& t : kAllTypes) {
    SCOPED_TRACE(t);
    expectMatchesCpu(graph({"%a: " + t + "[2,3,4,5]"}, "permute(%a) {dims=[0,2,3,1]}", {t + "[2,4,5,3]"}), {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[2,3,4,5]"}, "permute(%a) {dims=[3,1,0,2]}", {t + "[5,3,2,4]"}), {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[1001,1003]"}, "permute(%a) {dims=[-1,0]}", {t + "[1003,1001]"}), {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[3,1,4]"}, "permute(%a) {dims=[1,0,2]}", {t + "[1,3,4]"}), {.tol = 0});
    // Tiled transposes: batched, the batch dim between the tiled ones, ragged tiles.
    expectMatchesCpu(graph({"%a: " + t + "[4,70,50]"}, "permute(%a) {dims=[0,2,1]}", {t + "[4,50,70]"}), {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[33,5,40]"}, "permute(%a) {dims=[2,1,0]}", {t + "[40,5,33]"}), {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[2,3,64,17]"}, "permute(%a) {dims=[3,0,2,1]}", {t + "[17,2,64,3]"}),
                     {.tol = 0});
    expectMatchesCpu(
        graph({"%a: " + t + "[2,3,2,3,2,3,2,3]"}, "permute(%a) {dims=[7,6,5,4,3,2,1,0]}", {t + "[3,2,3,2,3,2,3,2]"}),
        {.tol = 0});
  }
}

TEST(CudaShape, Expand) {
  KILN_REQUIRE_GPU();
  for (const std::string& t : kAllTypes) {
    SCOPED_TRACE(t);
    expectMatchesCpu(graph({"%a: " + t + "[3,1]"}, "expand(%a) {shape=[4,3,5]}", {t + "[4,3,5]"}), {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[]"}, "expand(%a) {shape=[1000003]}", {t + "[1000003]"}), {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[1,7]"}, "expand(%a) {shape=[2,-1,-1]}", {t + "[2,1,7]"}), {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[5,1,3]"}, "expand(%a) {shape=[5,4,3]}", {t + "[5,4,3]"}), {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[40,1]"}, "expand(%a) {shape=[3,40,64]}", {t + "[3,40,64]"}), {.tol = 0});
  }
}

TEST(CudaShape, Slice) {
  KILN_REQUIRE_GPU();
  for (const std::string& t : kAllTypes) {
    SCOPED_TRACE(t);
    expectMatchesCpu(graph({"%a: " + t + "[4,10,3]"}, "slice(%a) {dim=1, end=-1, start=1, step=2}", {t + "[4,4,3]"}),
                     {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[4,10,3]"}, "slice(%a) {dim=-1, start=1}", {t + "[4,10,2]"}), {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[4,10,3]"}, "slice(%a) {dim=0, end=3, start=-3}", {t + "[2,10,3]"}),
                     {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[1000003]"}, "slice(%a) {dim=0, start=2, step=3}", {t + "[333334]"}),
                     {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[6,9]"}, "slice(%a) {dim=1, end=100, start=4, step=7}", {t + "[6,1]"}),
                     {.tol = 0});
  }
}

TEST(CudaShape, Select) {
  KILN_REQUIRE_GPU();
  for (const std::string& t : kAllTypes) {
    SCOPED_TRACE(t);
    expectMatchesCpu(graph({"%a: " + t + "[4,5,6]"}, "select(%a) {dim=1, index=3}", {t + "[4,6]"}), {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[4,5,6]"}, "select(%a) {dim=-1, index=-2}", {t + "[4,5]"}), {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[7]"}, "select(%a) {dim=0, index=6}", {t + "[]"}), {.tol = 0});
  }
}

TEST(CudaShape, Flip) {
  KILN_REQUIRE_GPU();
  for (const std::string& t : kAllTypes) {
    SCOPED_TRACE(t);
    expectMatchesCpu(graph({"%a: " + t + "[3,4,5]"}, "flip(%a) {dims=[0,2]}", {t + "[3,4,5]"}), {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[3,4,5]"}, "flip(%a) {dims=[-2]}", {t + "[3,4,5]"}), {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[1000003]"}, "flip(%a) {dims=[0]}", {t + "[1000003]"}), {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[2,3]"}, "flip(%a) {dims=[]}", {t + "[2,3]"}), {.tol = 0});
  }
}

TEST(CudaShape, Cat) {
  KILN_REQUIRE_GPU();
  for (const std::string& t : kAllTypes) {
    SCOPED_TRACE(t);
    expectMatchesCpu(graph({"%a: " + t + "[4,2,3]", "%b: " + t + "[4,5,3]", "%c: " + t + "[4,1,3]"},
                           "cat(%a, %b, %c) {dim=1}", {t + "[4,8,3]"}),
                     {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[2,3]", "%b: " + t + "[5,3]"}, "cat(%a, %b) {dim=0}", {t + "[7,3]"}),
                     {.tol = 0});
    expectMatchesCpu(
        graph({"%a: " + t + "[3,500001]", "%b: " + t + "[3,2]"}, "cat(%a, %b) {dim=-1}", {t + "[3,500003]"}),
        {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[2,0]", "%b: " + t + "[2,3]"}, "cat(%a, %b) {dim=1}", {t + "[2,3]"}),
                     {.tol = 0});
  }
  // Inputs of different dtypes are converted to the promoted one.
  expectMatchesCpu(graph({"%a: f32[2,3]", "%b: bf16[2,4]"}, "cat(%a, %b) {dim=1}", {"f32[2,7]"}), {.tol = 1e-6});
  expectMatchesCpu(graph({"%a: i32[3,2]", "%b: i64[1,2]", "%c: u8[2,2]"}, "cat(%a, %b, %c) {dim=0}", {"i64[6,2]"}),
                   {.tol = 0});
  expectMatchesCpu(graph({"%a: bool[5]", "%b: f16[3]"}, "cat(%a, %b) {dim=0}", {"f16[8]"}), {.tol = 0});
}

TEST(CudaShape, Split) {
  KILN_REQUIRE_GPU();
  for (const std::string& t : kAllTypes) {
    SCOPED_TRACE(t);
    expectMatchesCpu(
        graph({"%a: " + t + "[6,4]"}, "split(%a) {dim=0, sizes=[1,3,2]}", {t + "[1,4]", t + "[3,4]", t + "[2,4]"}),
        {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[3,7,2]"}, "split(%a) {dim=-2, sizes=[4,0,3]}",
                           {t + "[3,4,2]", t + "[3,0,2]", t + "[3,3,2]"}),
                     {.tol = 0});
    expectMatchesCpu(
        graph({"%a: " + t + "[1000003]"}, "split(%a) {dim=0, sizes=[500000,500003]}", {t + "[500000]", t + "[500003]"}),
        {.tol = 0});
  }
}

// ---- coordinate maps ------------------------------------------------------------

TEST(CudaShape, Roll) {
  KILN_REQUIRE_GPU();
  for (const std::string& t : kAllTypes) {
    SCOPED_TRACE(t);
    expectMatchesCpu(graph({"%a: " + t + "[3,4,5]"}, "roll(%a) {dims=[0,2], shifts=[2,-1]}", {t + "[3,4,5]"}),
                     {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[3,4,5]"}, "roll(%a) {shifts=[7]}", {t + "[3,4,5]"}), {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[3,4,5]"}, "roll(%a) {dims=[1,1], shifts=[3,-10]}", {t + "[3,4,5]"}),
                     {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[1000003]"}, "roll(%a) {dims=[0], shifts=[-123457]}", {t + "[1000003]"}),
                     {.tol = 0});
  }
}

TEST(CudaShape, Repeat) {
  KILN_REQUIRE_GPU();
  for (const std::string& t : kAllTypes) {
    SCOPED_TRACE(t);
    expectMatchesCpu(graph({"%a: " + t + "[2,3]"}, "repeat(%a) {repeats=[2,1,3]}", {t + "[2,2,9]"}), {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[2,3]"}, "repeat(%a) {repeats=[1,1]}", {t + "[2,3]"}), {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[]"}, "repeat(%a) {repeats=[4]}", {t + "[4]"}), {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[1001]"}, "repeat(%a) {repeats=[3,999]}", {t + "[3,999999]"}), {.tol = 0});
  }
}

struct PadCase {
  const char* in;
  const char* pads;
  const char* out;
};

TEST(CudaShape, Pad) {
  KILN_REQUIRE_GPU();
  const std::vector<PadCase> cases = {{"[2,3,5,6]", "[2,2,1,1]", "[2,3,7,10]"},
                                      {"[4,5]", "[1,2]", "[4,8]"},
                                      {"[4,5]", "[0,0,3,1]", "[8,5]"},
                                      {"[2,3,4]", "[3,3,2,2,1,1]", "[4,7,10]"},
                                      {"[1000003]", "[1,4]", "[1000008]"}};
  for (const char* mode : {"constant", "reflect", "replicate", "circular"})
    for (const std::string& t : kAllTypes)
      for (const PadCase& c : cases) {
        const std::string node = std::string("pad(%a) {mode=\"") + mode + "\", pads=" + c.pads + ", value=1.5}";
        SCOPED_TRACE(node + " " + t + c.in);
        expectMatchesCpu(graph({"%a: " + t + c.in}, node, {t + c.out}), {.tol = 0});
      }
  // Negative pads crop (constant mode), replicate pads wider than the input, a 0-d input.
  for (const std::string t : {"f32", "bf16", "i32"}) {
    expectMatchesCpu(graph({"%a: " + t + "[4,9]"}, "pad(%a) {pads=[-2,3,1,-1], value=-7.0}", {t + "[4,10]"}),
                     {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[3,2]"}, "pad(%a) {mode=\"replicate\", pads=[5,4]}", {t + "[3,11]"}),
                     {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[]"}, "pad(%a) {pads=[]}", {t + "[]"}), {.tol = 0});
  }
}

TEST(CudaShape, PadBackward) {
  KILN_REQUIRE_GPU();
  const std::vector<PadCase> cases = {
      {"[2,3,5,6]", "[2,2,1,1]", "[2,3,7,10]"}, {"[4,5]", "[1,2]", "[4,8]"},     {"[4,5]", "[0,0,3,1]", "[8,5]"},
      {"[2,3,4]", "[3,3,2,2,1,1]", "[4,7,10]"}, {"[2,3]", "[2,1,1,1]", "[4,6]"}, {"[1000003]", "[1,4]", "[1000008]"}};
  for (const char* mode : {"constant", "reflect", "replicate", "circular"})
    for (const std::string& t : kFloatTypes)
      for (const PadCase& c : cases) {
        const std::string node =
            std::string("pad_backward(%a) {input_shape=") + c.in + ", mode=\"" + mode + "\", pads=" + c.pads + "}";
        SCOPED_TRACE(node + " " + t);
        expectMatchesCpu(graph({"%a: " + t + c.out}, node, {t + c.in}), {.tol = tolFor(t)});
      }
  // Replicate pads wider than the input (many copies of a border), a crop, a size-1 dim.
  for (const std::string t : {"f32", "bf16"}) {
    expectMatchesCpu(graph({"%a: " + t + "[3,11]"},
                           "pad_backward(%a) {input_shape=[3,2], mode=\"replicate\", pads=[5,4]}", {t + "[3,2]"}),
                     {.tol = tolFor(t)});
    expectMatchesCpu(graph({"%a: " + t + "[4,10]"}, "pad_backward(%a) {input_shape=[4,9], pads=[-2,3]}", {t + "[4,9]"}),
                     {.tol = tolFor(t)});
    expectMatchesCpu(graph({"%a: " + t + "[3,6]"},
                           "pad_backward(%a) {input_shape=[1,6], mode=\"replicate\", pads=[0,0,1,1]}", {t + "[1,6]"}),
                     {.tol = tolFor(t)});
  }
}

TEST(CudaShape, SliceBackward) {
  KILN_REQUIRE_GPU();
  for (const std::string& t : kAllTypes) {
    SCOPED_TRACE(t);
    expectMatchesCpu(graph({"%a: " + t + "[4,3]"},
                           "slice_backward(%a) {dim=1, end=9, input_shape=[4,10], start=1, step=3}", {t + "[4,10]"}),
                     {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[2,10,3]"}, "slice_backward(%a) {dim=0, input_shape=[4,10,3], start=-2}",
                           {t + "[4,10,3]"}),
                     {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[333334]"},
                           "slice_backward(%a) {dim=0, input_shape=[1000003], start=2, step=3}", {t + "[1000003]"}),
                     {.tol = 0});
  }
}

TEST(CudaShape, SelectBackward) {
  KILN_REQUIRE_GPU();
  for (const std::string& t : kAllTypes) {
    SCOPED_TRACE(t);
    expectMatchesCpu(
        graph({"%a: " + t + "[4,6]"}, "select_backward(%a) {dim=1, index=-1, input_shape=[4,5,6]}", {t + "[4,5,6]"}),
        {.tol = 0});
    expectMatchesCpu(
        graph({"%a: " + t + "[4,5]"}, "select_backward(%a) {dim=2, index=0, input_shape=[4,5,6]}", {t + "[4,5,6]"}),
        {.tol = 0});
    expectMatchesCpu(graph({"%a: " + t + "[]"}, "select_backward(%a) {dim=0, index=3, input_shape=[7]}", {t + "[7]"}),
                     {.tol = 0});
  }
}

// ---- index ops -----------------------------------------------------------------

TEST(CudaShape, Index) {
  KILN_REQUIRE_GPU();
  for (const std::string& t : kAllTypes)
    for (const std::string it : {"i64", "i32", "u8"}) {
      SCOPED_TRACE(t + " index " + it);
      expectMatchesCpu(graph({"%a: " + t + "[5,7,3]", "%i: " + it + "[4]"}, "index(%a, %i) {dim=1}", {t + "[5,4,3]"}),
                       {.tol = 0, .int_bound = 7});
      expectMatchesCpu(
          graph({"%a: " + t + "[5,7,3]", "%i: " + it + "[2,3]"}, "index(%a, %i) {dim=-1}", {t + "[5,7,2,3]"}),
          {.tol = 0, .int_bound = 3});
      expectMatchesCpu(
          graph({"%a: " + t + "[9,1000]", "%i: " + it + "[1200]"}, "index(%a, %i) {dim=0}", {t + "[1200,1000]"}),
          {.tol = 0, .int_bound = 9});
    }
  // Negative indices count from the end.
  expectMatchesCpuWith(graph({"%a: f32[5,7,3]", "%i: i64[6]"}, "index(%a, %i) {dim=1}", {"f32[5,6,3]"}),
                       {.tol = 0, .int_bound = 14}, shiftInts("i", 7));
}

TEST(CudaShape, Gather) {
  KILN_REQUIRE_GPU();
  for (const std::string& t : kAllTypes)
    for (const std::string it : {"i64", "i32"}) {
      SCOPED_TRACE(t + " index " + it);
      expectMatchesCpu(graph({"%a: " + t + "[4,6]", "%i: " + it + "[4,3]"}, "gather(%a, %i) {dim=1}", {t + "[4,3]"}),
                       {.tol = 0, .int_bound = 6});
      expectMatchesCpu(graph({"%a: " + t + "[4,6]", "%i: " + it + "[2,5]"}, "gather(%a, %i) {dim=0}", {t + "[2,5]"}),
                       {.tol = 0, .int_bound = 4});
      expectMatchesCpu(
          graph({"%a: " + t + "[3,5,7]", "%i: " + it + "[3,9,2]"}, "gather(%a, %i) {dim=-2}", {t + "[3,9,2]"}),
          {.tol = 0, .int_bound = 5});
      expectMatchesCpu(
          graph({"%a: " + t + "[1000,50]", "%i: " + it + "[1000,1000]"}, "gather(%a, %i) {dim=1}", {t + "[1000,1000]"}),
          {.tol = 0, .int_bound = 50});
    }
}

TEST(CudaShape, ScatterAdd) {
  KILN_REQUIRE_GPU();
  for (const std::string& t : kFloatTypes)
    for (const std::string it : {"i64", "i32"}) {
      SCOPED_TRACE(t + " index " + it);
      const double tol = tolFor(t);
      expectMatchesCpu(graph({"%b: " + t + "[4,6]", "%i: " + it + "[4,3]", "%s: " + t + "[4,3]"},
                             "scatter_add(%b, %i, %s) {dim=1}", {t + "[4,6]"}),
                       {.tol = tol, .int_bound = 6});
      // src larger than the index (its extra elements unused), many duplicates along dim 0.
      expectMatchesCpu(graph({"%b: " + t + "[5,6]", "%i: " + it + "[40,4]", "%s: " + t + "[41,6]"},
                             "scatter_add(%b, %i, %s) {dim=0}", {t + "[5,6]"}),
                       {.tol = tol, .int_bound = 5});
      expectMatchesCpu(graph({"%b: " + t + "[3,5,7]", "%i: " + it + "[3,9,2]", "%s: " + t + "[3,9,2]"},
                             "scatter_add(%b, %i, %s) {dim=-2}", {t + "[3,5,7]"}),
                       {.tol = tol, .int_bound = 5});
      expectMatchesCpu(graph({"%b: " + t + "[1000,64]", "%i: " + it + "[3000,64]", "%s: " + t + "[3000,64]"},
                             "scatter_add(%b, %i, %s) {dim=0}", {t + "[1000,64]"}),
                       {.tol = tol, .int_bound = 1000});
    }
}

TEST(CudaShape, ScatterReduce) {
  KILN_REQUIRE_GPU();
  for (const std::string& t : kFloatTypes)
    for (const char* reduce : {"prod", "amax", "amin"})
      for (const char* self : {"1", "0"}) {
        SCOPED_TRACE(t + " " + reduce + " include_self " + self);
        const std::string attrs = std::string(" {dim=1, reduce=\"") + reduce + "\", include_self=" + self + "}";
        // Products of a few factors only: the rounding stays within tolFor.
        expectMatchesCpu(graph({"%b: " + t + "[4,6]", "%i: i64[4,3]", "%s: " + t + "[4,3]"},
                               "scatter_reduce(%b, %i, %s)" + attrs, {t + "[4,6]"}),
                         {.tol = tolFor(t), .int_bound = 6});
        expectMatchesCpu(graph({"%b: " + t + "[300,64]", "%i: i64[300,40]", "%s: " + t + "[300,40]"},
                               "scatter_reduce(%b, %i, %s)" + attrs, {t + "[300,64]"}),
                         {.tol = tolFor(t), .int_bound = 64});
      }
}

TEST(CudaShape, IndexAdd) {
  KILN_REQUIRE_GPU();
  for (const std::string& t : kFloatTypes)
    for (const std::string it : {"i64", "i32"}) {
      SCOPED_TRACE(t + " index " + it);
      const double tol = tolFor(t);
      expectMatchesCpu(graph({"%b: " + t + "[5,7,3]", "%i: " + it + "[10]", "%s: " + t + "[5,10,3]"},
                             "index_add(%b, %i, %s) {dim=1}", {t + "[5,7,3]"}),
                       {.tol = tol, .int_bound = 7});
      expectMatchesCpu(graph({"%b: " + t + "[6,4]", "%i: " + it + "[2,3]", "%s: " + t + "[6,2,3]"},
                             "index_add(%b, %i, %s) {dim=-1}", {t + "[6,4]"}),
                       {.tol = tol, .int_bound = 4});
      // An embedding-style gradient: many rows accumulated into a table.
      expectMatchesCpu(graph({"%b: " + t + "[100,256]", "%i: " + it + "[5000]", "%s: " + t + "[5000,256]"},
                             "index_add(%b, %i, %s) {dim=0}", {t + "[100,256]"}),
                       {.tol = tol, .int_bound = 100});
    }
  expectMatchesCpuWith(
      graph({"%b: f32[5,7]", "%i: i64[9]", "%s: f32[5,9]"}, "index_add(%b, %i, %s) {dim=1}", {"f32[5,7]"}),
      {.tol = 1e-6, .int_bound = 14}, shiftInts("i", 7));
}

/// Indices out of range: the CPU throws; the kernels skip them and flag the node.
TEST(CudaShape, IndicesOutOfRangeRaiseTheFaultFlag) {
  KILN_REQUIRE_GPU();
  const Tensor x(TensorType{DType::F32, {3, 4}});
  const Tensor bad = ints(DType::I64, {2}, {1, 4});
  EXPECT_EQ(faultFlagOf(graph({"%a: f32[3,4]", "%i: i64[2]"}, "index(%a, %i) {dim=1}", {"f32[3,2]"}), {x, bad}, 6), 7);
  EXPECT_EQ(faultFlagOf(graph({"%a: f32[3,4]", "%i: i64[2]"}, "index(%a, %i) {dim=1}", {"f32[3,2]"}),
                        {x, ints(DType::I64, {2}, {-5, 0})}, 0),
            1);
  const Tensor bad2 = ints(DType::I64, {3, 1}, {0, 9, 2});
  EXPECT_EQ(faultFlagOf(graph({"%a: f32[3,4]", "%i: i64[3,1]"}, "gather(%a, %i) {dim=1}", {"f32[3,1]"}), {x, bad2}, 2),
            3);
  EXPECT_EQ(faultFlagOf(graph({"%a: f32[3,4]", "%i: i64[3,1]", "%s: f32[3,1]"}, "scatter_add(%a, %i, %s) {dim=1}",
                              {"f32[3,4]"}),
                        {x, ints(DType::I64, {3, 1}, {0, -1, 2}), Tensor(TensorType{DType::F32, {3, 1}})}, 3),
            4);
  EXPECT_EQ(
      faultFlagOf(graph({"%a: f32[3,4]", "%i: i64[2]", "%s: f32[3,2]"}, "index_add(%a, %i, %s) {dim=1}", {"f32[3,4]"}),
                  {x, bad, Tensor(TensorType{DType::F32, {3, 2}})}, 4),
      5);
}

// ---- cumsum ---------------------------------------------------------------------

TEST(CudaShape, Cumsum) {
  KILN_REQUIRE_GPU();
  struct Case {
    const char* shape;
    int dim;
  };
  // Rows scanned by a block (long rows, a few long columns), columns by a thread.
  const std::vector<Case> cases = {{"[7,300]", 1},  {"[7,300]", 0},    {"[1000003]", 0}, {"[3,5000,4]", 1},
                                   {"[40,30]", -1}, {"[300,2500]", 0}, {"[]", 0},        {"[5,1]", 1}};
  for (const std::string& t : kAllTypes)
    for (const Case& c : cases) {
      SCOPED_TRACE(t + c.shape + " dim=" + std::to_string(c.dim));
      const bool floating = t == "f32" || t == "f64" || t == "bf16" || t == "f16";
      const std::string out = (floating ? t : std::string("i64")) + c.shape;
      // f32: double accumulation rounded once per element; the block scan adds in another order.
      const double tol = t == "f32" ? 1e-6 : t == "f64" ? 1e-12 : floating ? 1e-2 : 0.0;
      expectMatchesCpu(graph({"%a: " + t + c.shape}, "cumsum(%a) {dim=" + std::to_string(c.dim) + "}", {out}),
                       {.tol = tol, .int_bound = 100});
    }
}

/// cumprod: one thread per column, the CPU's loop and accumulator.
TEST(CudaShape, Cumprod) {
  KILN_REQUIRE_GPU();
  for (const std::string& t : kAllTypes)
    for (const char* shape : {"[7,30]", "[3,50,4]", "[5,1]", "[]"})
      for (int dim : {0, -1}) {
        SCOPED_TRACE(t + shape + " dim=" + std::to_string(dim));
        const bool floating = t == "f32" || t == "f64" || t == "bf16" || t == "f16";
        const std::string out = (floating ? t : std::string("i64")) + shape;
        expectMatchesCpu(graph({"%a: " + t + shape}, "cumprod(%a) {dim=" + std::to_string(dim) + "}", {out}),
                         {.tol = floating && t != "f32" && t != "f64" ? 1e-2 : 1e-12, .int_bound = 3, .positive = true});
      }
}

// ---- topk ------------------------------------------------------------------------

/// Every dtype, indices compared exactly: integers drawn from [0, 4) and
/// floats rounded to halves tie often, so the lower-index-first rule is
/// checked; NaN ranks above every number.
TEST(CudaShape, Topk) {
  KILN_REQUIRE_GPU();
  struct Case {
    const char* shape;
    int dim, k, largest;
    const char* out;
  };
  const std::vector<Case> cases = {{"[6,8]", 1, 2, 1, "[6,2]"},        {"[6,8]", 1, 8, 0, "[6,8]"},
                                   {"[5,7,3]", 1, 3, 1, "[5,3,3]"},    {"[5,7,3]", 0, 5, 0, "[5,7,3]"},
                                   {"[40]", 0, 40, 1, "[40]"},         {"[3,300]", -1, 17, 1, "[3,17]"},
                                   {"[1000,16]", 1, 2, 1, "[1000,2]"}, {"[4,0]", 1, 0, 1, "[4,0]"}};
  for (const std::string& t : kAllTypes)
    for (const Case& c : cases)
      for (bool nans : {false, true}) {
        const bool floating = t == "f32" || t == "f64" || t == "bf16" || t == "f16";
        if (nans && !floating) continue;
        SCOPED_TRACE(t + c.shape + " dim=" + std::to_string(c.dim) + " k=" + std::to_string(c.k) +
                     (nans ? " with NaN" : ""));
        const std::string node = "topk(%a) {k=" + std::to_string(c.k) + ", dim=" + std::to_string(c.dim) +
                                 ", largest=" + std::to_string(c.largest) + "}";
        expectMatchesCpuWith(graph({"%a: " + t + c.shape}, node, {std::string("i64") + c.out}),
                             {.tol = 0.0, .int_bound = 4}, [nans](TensorMap& in) {
                               Tensor& a = in.at("a");
                               for (int64_t i = 0; i < a.numel(); ++i) {
                                 if (!isFloating(a.dtype())) break;
                                 a.set(i, nans && i % 7 == 3 ? std::nan("") : std::round(a.at(i) * 2) / 2);
                               }
                             });
      }
}

// ---- registration ----------------------------------------------------------------

TEST(CudaShape, EveryOpIsRegistered) {
  const CudaKernelRegistry& reg = CudaKernelRegistry::get();
  for (const char* op :
       {"reshape",         "detach", "permute", "expand",      "slice",          "slice_backward", "select",
        "select_backward", "cat",    "split",   "flip",        "roll",           "repeat",         "pad",
        "pad_backward",    "index",  "gather",  "scatter_add", "scatter_reduce", "index_add",      "cumsum",
        "cumprod",         "topk"}) {
    const CudaKernelDef* k = reg.byName(op, std::string("cuda.") + op);
    ASSERT_NE(k, nullptr) << op;
    EXPECT_EQ(k->dialect, "cuda") << op;
    EXPECT_EQ(k->output_views_input0, std::string(op) == "reshape" || std::string(op) == "detach") << op;
    EXPECT_FALSE(k->writes_over_input) << op;
  }
}

}  // namespace
}  // namespace kiln::cuda::test
