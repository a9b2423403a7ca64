// The CPU kernels of the row-sparse gradient ops (core/ops/row_sparse.cpp,
// backend/cpu/kernels_row_sparse.cpp) against the dense kernels they stand
// in for, bit for bit: embedding_backward_rows then rows_to_dense equals
// embedding_backward (duplicate indices, padding_idx, i32 indices, f64),
// and sgd_update_rows equals sgd_update on that gradient (a non-finite
// gradient scale included), bound in place to the donated parameter or not,
// with amp's skip flag.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>

#include "backend/cpu/cpu_executor.h"
#include "core/text_ir.h"

namespace kiln {
namespace {

struct Shapes {
  const char* dtype;  // f32 or f64
  const char* index;  // i64 or i32
  int64_t batch, seq, dim, rows, padding_idx;
};

std::string sizes(const Shapes& s) {
  return std::to_string(s.batch) + "," + std::to_string(s.seq);
}

// Both paths side by side, from the same gradient, indices and parameter.
std::string bothPaths(const Shapes& s) {
  const std::string t = s.dtype, d = std::to_string(s.dim), v = std::to_string(s.rows);
  const std::string k = std::to_string(s.batch * s.seq), pad = std::to_string(s.padding_idx);
  return "graph t(%g: " + t + "[" + sizes(s) + "," + d + "] data, %idx: " + s.index + "[" + sizes(s) +
         "] data, %w: " + t + "[" + v + "," + d + "] param, %lr: f64[] scalar, %step: f64[] opt_state, %scale: " + t +
         "[] data) {\n"
         "  %0 = embedding_backward(%g, %idx) {num_weights=" +
         v + ", padding_idx=" + pad + "} : " + t + "[" + v + "," + d +
         "]\n"
         "  %1, %2 = embedding_backward_rows(%g, %idx) {num_weights=" +
         v + ", padding_idx=" + pad + "} : i64[" + k + "], " + t + "[" + k + "," + d +
         "]\n"
         "  %3 = rows_to_dense(%1, %2) {num_rows=" +
         v + "} : " + t + "[" + v + "," + d +
         "]\n"
         "  %4 = sgd_update(%lr, %step, %scale, %w, %0) : " +
         t + "[" + v + "," + d +
         "]\n"
         "  %5 = sgd_update_rows(%lr, %step, %scale, %w, %1, %2) : " +
         t + "[" + v + "," + d +
         "]\n"
         "  return %0 \"dense\", %3 \"from_rows\", %4 \"sgd\", %5 \"sgd_rows\", %1 \"rows\"\n}\n";
}

TensorMap inputs(const Graph& g, const Shapes& s, uint32_t seed, double scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> n(0, 1);
  TensorMap in;
  for (const Value* v : g.inputs()) {
    Tensor x(v->type());
    for (int64_t i = 0; i < x.numel(); ++i) {
      double value = n(rng);
      if (v->name() == "idx") value = double(rng() % static_cast<uint32_t>(s.rows / 3 + 1));  // many repeats
      if (v->name() == "lr") value = 0.05;
      if (v->name() == "step") value = 1;
      if (v->name() == "scale") value = scale;
      x.set(i, value);
    }
    in[v->name()] = x;
  }
  return in;
}

bool sameBits(const Tensor& a, const Tensor& b) {
  return a.type() == b.type() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

void expectRowsMatchDense(const Shapes& s, double scale) {
  auto g = parseGraph(bothPaths(s), "t");
  ASSERT_TRUE(g.ok()) << g.error().message;
  auto ex = CpuExecutor::create(*g);
  ASSERT_TRUE(ex.ok()) << ex.error().message;
  for (uint32_t seed : {1u, 2u, 3u}) {
    auto out = ex->run(inputs(*g, s, seed, scale));
    ASSERT_TRUE(out.ok()) << out.error().message;
    const std::string at = std::string(s.dtype) + " " + s.index + " seed " + std::to_string(seed);
    EXPECT_TRUE(sameBits((*out)[0], (*out)[1])) << at << ": rows_to_dense(embedding_backward_rows) differs";
    EXPECT_TRUE(sameBits((*out)[2], (*out)[3])) << at << ": sgd_update_rows differs from sgd_update";
    // The rows: ascending and distinct, then -1; never the padding row.
    const Tensor& rows = (*out)[4];
    int64_t last = -1;
    bool padding = false;
    for (int64_t j = 0; j < rows.numel(); ++j) {
      const auto r = static_cast<int64_t>(rows.at(j));
      if (r < 0) {
        padding = true;
        continue;
      }
      EXPECT_FALSE(padding) << at << ": row " << r << " after the padding";
      EXPECT_GT(r, last) << at << ": rows do not ascend";
      EXPECT_NE(r, s.padding_idx) << at << ": the padding row is listed";
      last = r;
    }
  }
}

TEST(RowSparseKernels, MatchTheDenseKernelsBitForBit) {
  expectRowsMatchDense({"f32", "i64", 4, 16, 24, 50, -1}, 1.0);
  expectRowsMatchDense({"f32", "i32", 3, 7, 5, 40, 2}, 0.37);
  expectRowsMatchDense({"f64", "i64", 2, 33, 17, 30, 0}, 1.0);
  expectRowsMatchDense({"f32", "i64", 8, 64, 128, 500, -1}, 1.0);  // threads split the rows
  // Clipping after a NaN or infinite norm: the dense update makes every row
  // NaN (0 x scale), so must the row update.
  expectRowsMatchDense({"f32", "i64", 2, 8, 4, 20, -1}, INFINITY);
  expectRowsMatchDense({"f64", "i64", 2, 8, 4, 20, -1}, NAN);
}

/// One sgd_update_rows node over a [num_rows, dim] f32 parameter `w` and
/// `capacity` listed rows, with its executor.
struct RowsUpdate {
  std::unique_ptr<Graph> graph;  // where the executor points
  std::optional<CpuExecutor> executor;
};

RowsUpdate rowsUpdate(int64_t num_rows, int64_t dim, int64_t capacity, bool skip_nonfinite) {
  const std::string p = "f32[" + std::to_string(num_rows) + "," + std::to_string(dim) + "]";
  const std::string k = std::to_string(capacity);
  const std::string ir = "graph t(%w: " + p + " param, %rows: i64[" + k + "] data, %values: f32[" + k + "," +
                         std::to_string(dim) +
                         "] data, %lr: f64[] scalar, %step: f64[] opt_state, %scale: f32[] data) {\n"
                         "  %0 = sgd_update_rows(%lr, %step, %scale, %w, %rows, %values) {skip_nonfinite=" +
                         std::to_string(skip_nonfinite ? 1 : 0) + "} : " + p + "\n  return %0 \"w\" param_update\n}\n";
  auto g = parseGraph(ir, "t");
  EXPECT_TRUE(g.ok()) << g.error().message;
  RowsUpdate u{std::make_unique<Graph>(std::move(*g)), std::nullopt};
  auto ex = CpuExecutor::create(*u.graph);
  EXPECT_TRUE(ex.ok()) << ex.error().message;
  u.executor.emplace(std::move(*ex));
  return u;
}

/// Its inputs: w[i] = weight(i), the rows (-1 pads), values[i] = value(i).
TensorMap rowsUpdateInputs(const Graph& g, double (*weight)(int64_t), const std::vector<int64_t>& rows,
                           double (*value)(int64_t), double lr, double scale) {
  TensorMap in;
  for (const Value* v : g.inputs()) in[v->name()] = Tensor(v->type());
  for (int64_t i = 0; i < in["w"].numel(); ++i) in["w"].set(i, weight(i));
  for (size_t j = 0; j < rows.size(); ++j) in["rows"].set(static_cast<int64_t>(j), double(rows[j]));
  for (int64_t i = 0; i < in["values"].numel(); ++i) in["values"].set(i, value(i));
  in["lr"].set(0, lr);
  in["step"].set(0, 1);
  in["scale"].set(0, scale);
  return in;
}

TEST(RowSparseKernels, SkipNonFiniteLeavesTheParameter) {
  RowsUpdate u = rowsUpdate(6, 2, 3, true);
  auto half = [](int64_t i) { return 0.5 * double(i); };
  auto one = [](int64_t) { return 1.0; };
  TensorMap in = rowsUpdateInputs(*u.graph, half, {1, 4, -1}, one, 0.5, INFINITY);
  const Tensor before = in["w"].clone();
  auto out = u.executor->run(in);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_TRUE(sameBits((*out)[0], before)) << "an overflowed step changed the parameter";
  in["scale"].set(0, 1.0);
  out = u.executor->run(in);
  ASSERT_TRUE(out.ok()) << out.error().message;
  for (int64_t i = 0; i < 12; ++i) {
    const bool listed = i / 2 == 1 || i / 2 == 4;
    EXPECT_EQ((*out)[0].at(i), 0.5 * double(i) - (listed ? 0.5 : 0.0)) << "element " << i;
  }
}

TEST(RowSparseKernels, UpdatesTheDonatedParameterInPlace) {
  RowsUpdate u = rowsUpdate(1000, 8, 4, false);
  auto wave = [](int64_t i) { return std::sin(double(i)); };
  auto ramp = [](int64_t i) { return 1.0 + double(i); };
  TensorMap in = rowsUpdateInputs(*u.graph, wave, {3, 500, 999, -1}, ramp, 1.0, 1.0);
  const Tensor before = in["w"].clone();
  const void* w = in["w"].raw();
  auto out = u.executor->run(in, {"w"});
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ((*out)[0].raw(), w) << "not updated in place";
  for (int64_t r = 0; r < 1000; ++r)
    for (int64_t d = 0; d < 8; ++d) {
      const int64_t j = r == 3 ? 0 : r == 500 ? 1 : r == 999 ? 2 : -1;
      const float expect = j < 0 ? static_cast<float>(before.at(r * 8 + d))
                                 : static_cast<float>(before.at(r * 8 + d)) - static_cast<float>(1.0 + j * 8 + d);
      ASSERT_EQ(static_cast<float>((*out)[0].at(r * 8 + d)), expect) << "row " << r << " element " << d;
    }
}

TEST(RowSparseKernels, RejectBadRows) {
  const char* ir =
      "graph t(%rows: i64[3] data, %values: f32[3,2] data) {\n"
      "  %0 = rows_to_dense(%rows, %values) {num_rows=5} : f32[5,2]\n"
      "  return %0 \"d\"\n}\n";
  auto g = parseGraph(ir, "t");
  ASSERT_TRUE(g.ok()) << g.error().message;
  auto ex = CpuExecutor::create(*g);
  ASSERT_TRUE(ex.ok()) << ex.error().message;
  for (auto [a, b, what] : {std::tuple{1, 5, "out of range"}, std::tuple{3, 2, "does not ascend"}}) {
    TensorMap in;
    in["rows"] = Tensor(TensorType{DType::I64, {3}});
    in["rows"].set(0, a);
    in["rows"].set(1, b);
    in["rows"].set(2, -1);
    in["values"] = Tensor(TensorType{DType::F32, {3, 2}});
    auto out = ex->run(in);
    ASSERT_FALSE(out.ok());
    EXPECT_NE(out.error().message.find(what), std::string::npos) << out.error().message;
  }
}

}  // namespace
}  // namespace kiln
