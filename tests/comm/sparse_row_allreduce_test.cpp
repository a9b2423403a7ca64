// Tests of the row-sparse allreduce (sparseRowAllreduce,
// backend/comm/sparse_allreduce.h): on the rows each rank lists, it must
// give the block-sparse allreduce of the dense tables those rows make (the
// same exchange: the same bits, the same bytes, the same sparse/dense
// choice), hence the dense allreduce's bits on integer-valued data; its
// output must list the union of the ranks' rows, ascending, then -1 and
// zeros, identically on every rank. Densities 0, 1%, 50% and 100% of the
// table, forced sparse, the default rule and the dense fallback; threads at
// 2, 3 and 4 ranks and Gloo processes at 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/comm/sparse_allreduce.h"
#include "tests/comm/sparse_test_helpers.h"
#include "tests/comm/thread_communicator.h"

namespace kiln {
namespace {

using sparse_test::Checks;
using sparse_test::expectAllOk;
using sparse_test::glooRanks;
using sparse_test::kForceSparse;

struct Case {
  const char* name;
  size_t num_rows, dim, capacity;
  double density;  ///< chance that this rank lists a row (up to `capacity` rows)
  bool ints = true;
  double max_ratio = kForceSparse;
};

template <typename T>
void runCase(Communicator& c, Checks& ck, const Case& k, uint32_t seed) {
  const int r = c.rank(), n = c.size();
  const std::string at = std::string(k.name) + " " + (sizeof(T) == 4 ? "f32" : "f64") + " density " +
                         std::to_string(k.density) + " rank " + std::to_string(r) + ": ";
  std::mt19937 rng(seed * 7919u + static_cast<uint32_t>(r));
  std::uniform_real_distribution<double> u(0, 1);
  // This rank's rows: ascending, at most `capacity`, each with a non-zero
  // element (a listed all-zero row would travel here but not as a block).
  std::vector<int64_t> rows(k.capacity, -1);
  std::vector<T> values(k.capacity * k.dim, T(0)), table(k.num_rows * k.dim, T(0));
  size_t listed = 0;
  for (size_t row = 0; row < k.num_rows && listed < k.capacity; ++row) {
    if (u(rng) >= k.density) continue;
    rows[listed] = static_cast<int64_t>(row);
    T* v = values.data() + listed * k.dim;
    for (size_t d = 0; d < k.dim; ++d)
      v[d] =
          k.ints ? (u(rng) < 0.7 ? static_cast<T>(std::floor(u(rng) * 17) - 8) : T(0)) : static_cast<T>(2 * u(rng) - 1);
    v[static_cast<size_t>(u(rng) * k.dim)] = static_cast<T>(r + 1);
    std::copy(v, v + k.dim, table.data() + row * k.dim);
    ++listed;
  }
  const DType dt = sizeof(T) == 4 ? DType::F32 : DType::F64;
  const size_t out_capacity = std::min(k.capacity * static_cast<size_t>(n), k.num_rows);
  std::vector<int64_t> out_rows(out_capacity, 7);
  std::vector<T> out_values(out_capacity * k.dim, T(7));
  const SparseAllreduceStats st =
      sparseRowAllreduce(c, RowSparse{rows.data(), reinterpret_cast<const uint8_t*>(values.data()), k.capacity, k.dim},
                         RowSparseOut{out_rows.data(), reinterpret_cast<uint8_t*>(out_values.data()), out_capacity},
                         k.num_rows, dt, k.max_ratio);
  std::vector<T> block_sum = table, dense_sum = table;
  const SparseAllreduceStats bst = sparseBlockAllreduce(c, block_sum.data(), block_sum.size(), dt, k.dim, k.max_ratio);
  c.allreduceSum(dense_sum.data(), dense_sum.size(), dt);

  // The output as a table; its rows ascend and the padding is -1 and zeros.
  std::vector<T> got(k.num_rows * k.dim, T(0));
  int64_t last = -1;
  bool padding = false;
  for (size_t j = 0; j < out_capacity; ++j) {
    const int64_t row = out_rows[j];
    const T* v = out_values.data() + j * k.dim;
    if (row < 0) {
      padding = true;
      ck.expect(row == -1 && std::all_of(v, v + k.dim, [](T x) { return x == T(0) && !std::signbit(x); }),
                at + "padding is not -1 and +0");
      continue;
    }
    ck.expect(!padding && row > last && row < static_cast<int64_t>(k.num_rows), at + "rows out of order or range");
    last = row;
    std::copy(v, v + k.dim, got.data() + static_cast<size_t>(row) * k.dim);
  }
  ck.expect(st.sparse == bst.sparse, at + "the row and block exchanges chose differently");
  if (st.sparse) {
    ck.expect(std::memcmp(got.data(), block_sum.data(), got.size() * sizeof(T)) == 0,
              at + "differs from the block-sparse allreduce of the tables");
    ck.expect(
        st.sent_bytes == bst.sent_bytes && st.union_blocks == bst.union_blocks,
        at + "sent " + std::to_string(st.sent_bytes) + " bytes, the block exchange " + std::to_string(bst.sent_bytes));
  }
  if (k.ints) {
    ck.expect(std::memcmp(got.data(), dense_sum.data(), got.size() * sizeof(T)) == 0,
              at + "differs from the dense allreduce");
  } else {
    for (size_t i = 0; i < got.size(); ++i)
      if (!(std::fabs(double(got[i]) - double(dense_sum[i])) <= (sizeof(T) == 4 ? 1e-6 : 1e-14) * n)) {
        ck.expect(false, at + "element " + std::to_string(i) + " is off the dense sum");
        break;
      }
  }
  ck.expect(st.nonzero_blocks == listed && st.blocks == k.num_rows && st.dense_bytes == table.size() * sizeof(T),
            at + "stats");
  // Every rank holds the same rows and bits.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, size_t bytes) {
    for (size_t i = 0; i < bytes; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 1099511628211ull;
  };
  mix(out_rows.data(), out_rows.size() * 8);
  mix(out_values.data(), out_values.size() * sizeof(T));
  std::vector<int64_t> hashes(static_cast<size_t>(n), 0);
  hashes[static_cast<size_t>(r)] = static_cast<int64_t>(h);
  c.allGather(hashes.data(), std::vector<size_t>(static_cast<size_t>(n), 1), DType::I64);
  for (int64_t other : hashes) ck.expect(other == hashes[0], at + "ranks hold different results");
}

void suite(Communicator& c) {
  Checks ck;
  uint32_t seed = 1;
  for (double d : {0.0, 0.01, 0.5, 1.0}) {
    runCase<float>(c, ck, {"forced sparse", 400, 8, 400, d}, seed++);
    runCase<double>(c, ck, {"forced sparse", 400, 8, 400, d}, seed++);
    runCase<float>(c, ck, {"default rule", 400, 8, 400, d, true, 1.0}, seed++);
    runCase<float>(c, ck, {"randoms", 300, 5, 300, d, false, 1.0}, seed++);
  }
  // Capacity below the table (a batch of 16 indices), and the dense fallback.
  runCase<float>(c, ck, {"16 of 5000 rows", 5000, 16, 16, 0.5}, seed++);
  runCase<float>(c, ck, {"max_ratio 0", 200, 4, 200, 0.3, true, 0.0}, seed++);
  runCase<double>(c, ck, {"max_ratio 0 randoms", 200, 4, 200, 0.3, false, 0.0}, seed++);
  runCase<float>(c, ck, {"one row", 1, 3, 1, 1.0}, seed++);
  ck.throwIfFailed();
}

TEST(SparseRowAllreduce, OneRank) {
  expectAllOk(testing::runThreadRanks(1, suite));
}
TEST(SparseRowAllreduce, Threads2) {
  expectAllOk(testing::runThreadRanks(2, suite));
}
TEST(SparseRowAllreduce, Threads3) {
  expectAllOk(testing::runThreadRanks(3, suite));
}
TEST(SparseRowAllreduce, Threads4) {
  expectAllOk(testing::runThreadRanks(4, suite));
}
TEST(SparseRowAllreduce, Gloo2) {
  expectAllOk(glooRanks(2, suite));
}

TEST(SparseRowAllreduce, RejectsRowsOutOfOrderOrRange) {
  testing::ThreadGroup group(1);
  testing::ThreadCommunicator c(group, 0);
  std::vector<float> v(6, 1.f), out_v(6);
  std::vector<int64_t> out_r(3);
  for (auto [a, b, what] : {std::tuple{2, 1, "does not ascend"}, std::tuple{0, 9, "out of range"}}) {
    std::vector<int64_t> rows = {a, b, -1};
    try {
      sparseRowAllreduce(c, RowSparse{rows.data(), reinterpret_cast<const uint8_t*>(v.data()), 3, 2},
                         RowSparseOut{out_r.data(), reinterpret_cast<uint8_t*>(out_v.data()), 3}, 5, DType::F32);
      ADD_FAILURE() << "rows " << a << ", " << b << " accepted";
    } catch (const KilnException& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace kiln
