// CUDA kernels of the row-sparse gradient ops (core/ops/row_sparse.cpp):
// embedding_backward_rows and rows_to_dense (kernels_embedding.cu),
// sgd_update_rows (kernels_optim_rows.cu) and allreduce_rows
// (collective_rows.cu, row_coalesce.cu), each against the CPU kernel bit
// for bit; the multi-rank sum of allreduce_rows (its gathered slots filled
// as NCCL's all-gather would fill them) against the dense sum of the ranks'
// tensors; bad rows raise the data-fault flag. Skips visibly without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "backend/cuda/cuda_collectives.h"
#include "tests/cuda/cuda_kernel_check.h"

namespace kiln::cuda::test {
namespace {

/// A row-sparse tensor's real rows: `count` distinct rows of [0, num_rows),
/// ascending, then -1 to the capacity; values normal(0, 1) (or integers
/// in [-8, 8]) on the real rows, zero on the padding.
void fillRowSparse(Tensor& rows, Tensor& values, int64_t count, int64_t num_rows, uint32_t seed,
                   bool integers = false) {
  std::mt19937 rng(seed);
  std::set<int64_t> chosen;
  while (static_cast<int64_t>(chosen.size()) < count) chosen.insert(static_cast<int64_t>(rng() % num_rows));
  int64_t j = 0;
  for (int64_t r : chosen) rows.set(j++, static_cast<double>(r));
  for (; j < rows.numel(); ++j) rows.set(j, -1);
  std::normal_distribution<double> normal(0, 1);
  const int64_t dim = values.shape()[1];
  for (int64_t i = 0; i < values.numel(); ++i)
    values.set(i, i / dim >= count ? 0.0
                  : integers       ? static_cast<double>(static_cast<int>(rng() % 17) - 8)
                                   : normal(rng));
}

std::string rowsIr(const std::string& dt, int64_t k, int64_t dim, int64_t num_indices, int64_t num_weights,
                   int64_t padding_idx, const std::string& idt) {
  return "graph g(%g: " + ty(dt, {num_indices, dim}) + " data, %i: " + ty(idt, {num_indices}) +
         " data) {\n  %r, %v = embedding_backward_rows(%g, %i) {num_weights=" + std::to_string(num_weights) +
         ", padding_idx=" + std::to_string(padding_idx) + "} : " + ty("i64", {k}) + ", " + ty(dt, {k, dim}) +
         "\n  return %r \"rows\", %v \"values\"\n}\n";
}

TEST(CudaRowSparseKernels, EmbeddingBackwardRowsMatchesCpuBitForBit) {
  KILN_REQUIRE_GPU();
  // Few rows (every row repeated many times), padding, narrow indices, f64.
  expectMatchesCpu(rowsIr("f32", 104, 64, 104, 10, -1, "i64"), {.tol = 0, .int_bound = 10});
  expectMatchesCpu(rowsIr("f32", 104, 64, 104, 100, 3, "i32"), {.tol = 0, .int_bound = 100});
  expectMatchesCpu(rowsIr("f64", 77, 33, 77, 50, 0, "u8"), {.tol = 0, .int_bound = 50});
  expectMatchesCpu(rowsIr("f32", 1, 5, 1, 7, -1, "i16"), {.tol = 0, .int_bound = 7});
  // A GPT-2-sized table and batch: runs longer than the 8-load unroll.
  expectMatchesCpu(rowsIr("f32", 8192, 768, 8192, 50257, -1, "i64"), {.tol = 0, .int_bound = 50257});
  expectMatchesCpu(rowsIr("f32", 8192, 64, 8192, 500, -1, "i64"), {.tol = 0, .int_bound = 500});
}

TEST(CudaRowSparseKernels, RowsToDenseMatchesCpu) {
  KILN_REQUIRE_GPU();
  for (const std::string dt : {"f32", "f64"})
    for (int64_t count : {0, 1, 37, 64}) {
      SCOPED_TRACE(dt + " rows " + std::to_string(count));
      const std::string ir = "graph g(%r: i64[64] data, %v: " + dt + "[64,19] data) {\n  %d = rows_to_dense(%r, %v) " +
                             "{num_rows=200} : " + dt + "[200,19]\n  return %d \"dense\"\n}\n";
      expectMatchesCpuWith(ir, {.tol = 0}, [&](TensorMap& in) { fillRowSparse(in["r"], in["v"], count, 200, 11); });
    }
}

std::string sgdRowsIr(const std::string& dt, int64_t num_rows, int64_t k, int64_t dim, bool skip) {
  return "graph g(%lr: f64[] data, %step: f64[] data, %gs: f64[] data, %p: " + ty(dt, {num_rows, dim}) +
         " param, %r: " + ty("i64", {k}) + " data, %v: " + ty(dt, {k, dim}) +
         " data) {\n  %p2 = sgd_update_rows(%lr, %step, %gs, %p, %r, %v) {skip_nonfinite=" + (skip ? "1" : "0") +
         "} : " + ty(dt, {num_rows, dim}) + "\n  return %p2 \"p\"\n}\n";
}

TEST(CudaRowSparseKernels, SgdUpdateRowsMatchesCpuBitForBit) {
  KILN_REQUIRE_GPU();
  // A finite scale touches only the listed rows; a non-finite one (clipping
  // after an infinite norm) makes the unlisted rows NaN and the listed ones
  // +-inf or NaN, as the dense update does; skip_nonfinite leaves p alone.
  for (const std::string dt : {"f32", "f64"})
    for (double scale : {0.75, 1.0, 1e300 /* finite, but not as f32 */, double(INFINITY), double(NAN)})
      for (bool skip : {false, true}) {
        SCOPED_TRACE(dt + " scale " + std::to_string(scale) + (skip ? " skip" : ""));
        expectMatchesCpuWith(sgdRowsIr(dt, 300, 48, 24, skip), {.tol = 0}, [&](TensorMap& in) {
          in["lr"].set(0, 0.1);
          in["step"].set(0, 3);
          in["gs"].set(0, scale);
          fillRowSparse(in["r"], in["v"], 40, 300, 5);
        });
      }
}

TEST(CudaRowSparseKernels, OneRankAllreduceRowsIsThePaddedInput) {
  KILN_REQUIRE_GPU();
  // No communicator: the CPU kernel copies and pads; the GPU one sums the
  // one slot it has (the others are padding when compiled for 3 ranks).
  for (int64_t world : {1, 3})
    for (int64_t average : {0, 1}) {
      SCOPED_TRACE("world " + std::to_string(world) + " average " + std::to_string(average));
      const int64_t cap = std::min<int64_t>(world * 32, 90);
      const std::string ir = "graph g(%r: i64[32] data, %v: f32[32,16] data) {\n  %r2, %v2 = allreduce_rows(%r, %v) " +
                             std::string("{bucket=0, average=") + std::to_string(average) +
                             ", num_rows=90, world_size=" + std::to_string(world) + "} : " + ty("i64", {cap}) + ", " +
                             ty("f32", {cap, 16}) + "\n  return %r2 \"rows\", %v2 \"values\"\n}\n";
      expectMatchesCpuWith(ir, {.tol = 0}, [&](TensorMap& in) { fillRowSparse(in["r"], in["v"], 29, 90, 3); });
    }
}

/// Device buffer for a test (freed at scope end).
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(bytes, 1)), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
};

// What allreduce_rows computes on N ranks once NCCL has gathered their
// slots: the union of the rows, ascending, each summed over the ranks; the
// dense allreduce of the same tensors, bit for bit on integer data.
TEST(CudaRowSparseKernels, GatheredRowsSumEqualsTheDenseSum) {
  KILN_REQUIRE_GPU();
  constexpr int64_t kCap = 40, kDim = 12, kRows = 150;
  for (int64_t world : {2, 3, 4})
    for (int64_t count : {0, 1, 20, 40}) {
      SCOPED_TRACE("world " + std::to_string(world) + " rows per rank " + std::to_string(count));
      const int64_t cap = std::min(world * kCap, kRows);
      auto g = parseGraph(
          "graph g(%r: i64[40] data, %v: f32[40,12] data) {\n  %r2, %v2 = allreduce_rows(%r, %v) "
          "{bucket=0, average=0, num_rows=150, world_size=" +
              std::to_string(world) + "} : " + ty("i64", {cap}) + ", " + ty("f32", {cap, kDim}) +
              "\n  return %r2 \"rows\", %v2 \"values\"\n}\n",
          "test");
      ASSERT_TRUE(g.ok()) << g.error().message;
      const Node& n = *g->nodes().front();
      const RowsStaging s = rowsStaging(n);
      std::vector<unsigned char> host(s.coalesce, 0);
      std::vector<double> dense(kRows * kDim, 0.0);
      std::set<int64_t> union_rows;
      for (int64_t r = 0; r < world; ++r) {
        Tensor rows(DType::I64, {kCap}), values(DType::F32, {kCap, kDim});
        fillRowSparse(rows, values, count, kRows, static_cast<uint32_t>(100 + r), /*integers=*/true);
        std::memcpy(host.data() + s.rows + r * kCap * 8, rows.raw(), rows.bytes());
        std::memcpy(host.data() + s.values + r * kCap * kDim * 4, values.raw(), values.bytes());
        for (int64_t j = 0; j < kCap && rows.at(j) >= 0; ++j) {
          const auto row = static_cast<int64_t>(rows.at(j));
          union_rows.insert(row);
          for (int64_t d = 0; d < kDim; ++d) dense[row * kDim + d] += values.at(j * kDim + d);
        }
      }
      DeviceBuffer staging(s.total), rows_out(cap * 8), values_out(cap * kDim * 4), flag(sizeof(int));
      ASSERT_EQ(cudaMemcpy(staging.p, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemset(flag.p, 0, sizeof(int)), cudaSuccess);
      const std::vector<DeviceTensor> outs = {{n.output(0)->type(), rows_out.p}, {n.output(1)->type(), values_out.p}};
      enqueueGatheredRowsSum(n, staging.p, outs, nullptr, static_cast<int*>(flag.p), 0);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      Tensor rows(n.output(0)->type()), values(n.output(1)->type());
      int fault = -1;
      ASSERT_EQ(cudaMemcpy(rows.raw(), rows_out.p, rows.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(values.raw(), values_out.p, values.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(&fault, flag.p, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(fault, 0);
      // The union of the ranks' rows, ascending, each with its dense sum;
      // then -1 rows and zero values.
      int64_t j = 0;
      for (int64_t row : union_rows) {
        ASSERT_LT(j, cap);
        ASSERT_EQ(rows.at(j), static_cast<double>(row)) << "row " << j;
        for (int64_t d = 0; d < kDim; ++d)
          EXPECT_EQ(values.at(j * kDim + d), dense[row * kDim + d]) << "row " << row << " column " << d;
        ++j;
      }
      for (; j < cap; ++j) {
        EXPECT_EQ(rows.at(j), -1) << "padding at " << j;
        for (int64_t d = 0; d < kDim; ++d) EXPECT_EQ(values.at(j * kDim + d), 0.0) << "padding at " << j;
      }
    }
}

TEST(CudaRowSparseKernels, BadRowsRaiseTheDataFault) {
  KILN_REQUIRE_GPU();
  const auto flagOf = [](const std::string& ir, const std::function<void(TensorMap&)>& fill) {
    auto g = parseGraph(ir, "test");
    EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().message);
    if (!g.ok()) return -1;
    TensorMap in = drawInputs(*g, {});
    fill(in);
    const Node& n = *g->nodes().front();
    std::vector<Tensor> args;
    for (const Value* v : n.inputs()) args.push_back(in.at(v->name()));
    auto r = runNode(n, args, nullptr, {.node_index = 6});
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    return r.ok() ? r->error_flag : -1;
  };
  const std::string dense =
      "graph g(%r: i64[8] data, %v: f32[8,4] data) {\n  %d = rows_to_dense(%r, %v) "
      "{num_rows=20} : f32[20,4]\n  return %d \"dense\"\n}\n";
  const auto rows = [](std::vector<double> r) {
    return [r](TensorMap& in) {
      for (int64_t j = 0; j < 8; ++j) in["r"].set(j, j < static_cast<int64_t>(r.size()) ? r[j] : -1);
    };
  };
  EXPECT_EQ(flagOf(dense, rows({1, 5, 9})), 0);
  EXPECT_EQ(flagOf(dense, rows({1, 20})), 7) << "out of range";
  EXPECT_EQ(flagOf(dense, rows({5, 1})), 7) << "not ascending";
  EXPECT_EQ(flagOf(dense, rows({1, -1, 4})), 7) << "a row after the padding";
  const std::string sgd = sgdRowsIr("f32", 20, 8, 4, false);
  EXPECT_EQ(flagOf(sgd, rows({2, 3})), 0);
  EXPECT_EQ(flagOf(sgd, rows({2, 2})), 7) << "repeated";
  EXPECT_EQ(flagOf(rowsIr("f32", 6, 4, 6, 10, -1, "i64"),
                   [](TensorMap& in) {
                     for (int64_t j = 0; j < 6; ++j) in["i"].set(j, j == 4 ? 10 : j);
                   }),
            7)
      << "an index out of range";
}

}  // namespace
}  // namespace kiln::cuda::test
