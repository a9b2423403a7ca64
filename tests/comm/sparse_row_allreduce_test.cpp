// Tests of the row-sparse allreduce (sparseRowAllreduce,
// backend/comm/sparse_allreduce.h): on the rows each rank lists, it must
// give the block-sparse allreduce's bits of the dense tables those rows make
// (the same rank-order sums), hence the dense allreduce's bits on
// integer-valued data; its output must list the union of the ranks' rows,
// ascending, then -1 and zeros, identically on every rank. Its choice
// (all-gather, owner sums, dense) and sent_bytes must be the header's
// formulas, counted here from every rank's rows, and over Gloo the bytes
// the process really wrote. Densities 0, 1%, 50% and 100% of the table,
// rows drawn per rank and shared by all ranks, forced sparse, the default
// rule and the dense fallback; threads at 2, 3 and 4 ranks and Gloo
// processes at 2 and 4. On a GPT-2-sized embedding gradient, the bytes stay
// within the project's target whatever the overlap.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/comm/sparse_allreduce.h"
#include "core/collective_layout.h"
#include "tests/comm/sparse_test_helpers.h"
#include "tests/comm/thread_communicator.h"

namespace kiln {
namespace {

using sparse_test::bytesWritten;
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
  bool shared = false;  ///< every rank draws the same rows (with its own values)
};

/// What the header says the exchange does, counted from every rank's rows
/// (all_rows[q]: rank q's, ascending).
struct Expected {
  bool sparse, allgather;
  uint64_t sent_bytes;
  size_t union_rows;
};
Expected expectedExchange(const std::vector<std::vector<int64_t>>& all_rows, int r, size_t num_rows, size_t dim,
                          size_t esize, size_t capacity, double max_ratio) {
  const int n = static_cast<int>(all_rows.size());
  const uint64_t row_bytes = dim * esize, lists = uint64_t(n - 1) * capacity * 4;
  auto owner = [&](int64_t row) {  // q with q R / N <= row < (q+1) R / N
    int q = 0;
    while (q + 1 < n && uint64_t(row) >= num_rows * uint64_t(q + 1) / n) ++q;
    return q;
  };
  std::vector<int64_t> uni;
  std::vector<uint64_t> in_range(n, 0);  // union rows per owner
  std::vector<std::vector<uint64_t>> c(n, std::vector<uint64_t>(n, 0));
  uint64_t listed = 0, scattered = 0;
  for (int p = 0; p < n; ++p)
    for (int64_t row : all_rows[p]) {
      uni.push_back(row);
      ++listed;
      ++c[p][owner(row)];
      scattered += owner(row) != p;
    }
  std::sort(uni.begin(), uni.end());
  uni.erase(std::unique(uni.begin(), uni.end()), uni.end());
  for (int64_t row : uni) ++in_range[owner(row)];
  const double gather = double(n - 1) * listed * row_bytes,
               owners = (scattered + double(n - 1) * uni.size()) * row_bytes;
  const uint64_t ring = ringAllreduceBytes(num_rows * row_bytes, n);
  Expected e{std::min(gather, owners) <= max_ratio * n * double(ring), gather <= owners, 0, uni.size()};
  const int next = (r + 1) % n;
  if (!e.sparse) {
    e.sent_bytes = lists + ring;
  } else if (listed == 0) {
    e.sent_bytes = lists;
  } else if (e.allgather) {
    e.sent_bytes = lists + (listed - all_rows[next].size()) * row_bytes;
  } else {
    uint64_t mine_out = 0;
    for (int q = 0; q < n; ++q) mine_out += q == r ? 0 : c[r][q];
    e.sent_bytes = lists + (mine_out + uni.size() - in_range[next]) * row_bytes;
  }
  return e;
}

template <typename T>
void runCase(Communicator& c, Checks& ck, const Case& k, uint32_t seed) {
  const int r = c.rank(), n = c.size();
  const std::string at = std::string(k.name) + " " + (sizeof(T) == 4 ? "f32" : "f64") + " density " +
                         std::to_string(k.density) + " rank " + std::to_string(r) + ": ";
  std::mt19937 rng(seed * 7919u + static_cast<uint32_t>(r)), rows_rng(k.shared ? seed : seed * 7919u + r);
  std::uniform_real_distribution<double> u(0, 1);
  // This rank's rows: ascending, at most `capacity`, each with a non-zero
  // element (a listed all-zero row would travel here but not as a block).
  std::vector<int64_t> rows(k.capacity, -1);
  std::vector<T> values(k.capacity * k.dim, T(0)), table(k.num_rows * k.dim, T(0));
  size_t listed = 0;
  for (size_t row = 0; row < k.num_rows && listed < k.capacity; ++row) {
    if (u(rows_rng) >= k.density) continue;
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
  const long w0 = bytesWritten();
  const SparseAllreduceStats st =
      sparseRowAllreduce(c, RowSparse{rows.data(), reinterpret_cast<const uint8_t*>(values.data()), k.capacity, k.dim},
                         RowSparseOut{out_rows.data(), reinterpret_cast<uint8_t*>(out_values.data()), out_capacity},
                         k.num_rows, dt, k.max_ratio);
  const long wire = bytesWritten() - w0;
  // Every rank's rows, for the expected choice and bytes.
  std::vector<int64_t> gathered(k.capacity * static_cast<size_t>(n), -1);
  std::copy(rows.begin(), rows.end(), gathered.begin() + static_cast<long>(k.capacity) * r);
  c.allGather(gathered.data(), std::vector<size_t>(static_cast<size_t>(n), k.capacity), DType::I64);
  std::vector<std::vector<int64_t>> all_rows(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q)
    for (size_t j = 0; j < k.capacity && gathered[q * k.capacity + j] >= 0; ++j)
      all_rows[q].push_back(gathered[q * k.capacity + j]);
  const Expected want = expectedExchange(all_rows, r, k.num_rows, k.dim, sizeof(T), k.capacity, k.max_ratio);
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
  ck.expect(n == 1 || (st.sparse == want.sparse && (!st.sparse || st.row_allgather == want.allgather)),
            at + "chose " + (st.sparse ? (st.row_allgather ? "all-gather" : "owner sums") : "dense") + ", expected " +
                (want.sparse ? (want.allgather ? "all-gather" : "owner sums") : "dense"));
  ck.expect(n == 1 || (st.sent_bytes == want.sent_bytes && st.union_blocks == (st.sparse ? want.union_rows : 0)),
            at + "sent " + std::to_string(st.sent_bytes) + " bytes, expected " + std::to_string(want.sent_bytes));
  // Gloo's TCP pairs write each message with a header (144 bytes in the
  // Gloo we build against); at most 3 (N-1) messages: the lists, then an
  // all-gather or an all-to-all and an all-gather.
  if (c.backend() == "gloo" && w0 >= 0)
    ck.expect(wire >= long(st.sent_bytes) && wire <= long(st.sent_bytes) + 256 * 3 * (n - 1),
              at + "wrote " + std::to_string(wire) + " B, sent_bytes says " + std::to_string(st.sent_bytes));
  if (st.sparse && bst.sparse)
    ck.expect(std::memcmp(got.data(), block_sum.data(), got.size() * sizeof(T)) == 0,
              at + "differs from the block-sparse allreduce of the tables");
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
    // The same rows on every rank (frequent tokens): owner sums from 3 ranks on.
    runCase<float>(c, ck, {"shared rows", 400, 8, 400, d, true, kForceSparse, true}, seed++);
    runCase<double>(c, ck, {"shared randoms", 300, 5, 300, d, false, 1.0, true}, seed++);
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

TEST(SparseRowAllreduce, Gloo4) {
  expectAllOk(glooRanks(4, suite));
}

// A GPT-2-sized embedding gradient (50257 x 64 f32), each rank listing ~1%
// of the rows: drawn per rank, the same on every rank, or disjoint. Each
// rank sends at most 1.1 x the summed gradient's non-zero-row fraction of
// the dense ring's bytes, plus its row lists (the project's target), taking
// the all-gather when the rows barely overlap and owner sums when they do.
enum class Overlap { Independent, Full, None };
void embedding(Communicator& c, Overlap overlap) {
  Checks ck;
  const size_t num_rows = 50257, dim = 64, capacity = 1024;
  const int n = c.size(), r = c.rank();
  std::mt19937 rows_rng(overlap == Overlap::Independent ? 1234 + r : 1234), values_rng(99 + r);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::bernoulli_distribution touched(overlap == Overlap::None ? 0.01 * n : 0.01);
  std::vector<int64_t> rows(capacity, -1);
  std::vector<float> values(capacity * dim, 0.f);
  size_t k = 0;
  for (size_t row = 0; row < num_rows && k < capacity; ++row) {
    if (!touched(rows_rng) || (overlap == Overlap::None && row % n != static_cast<size_t>(r))) continue;
    rows[k] = static_cast<int64_t>(row);
    for (size_t j = 0; j < dim; ++j) values[k * dim + j] = u(values_rng);
    ++k;
  }
  const size_t out_capacity = capacity * n;
  std::vector<int64_t> out_rows(out_capacity);
  std::vector<float> out_values(out_capacity * dim);
  const SparseAllreduceStats st = sparseRowAllreduce(
      c, RowSparse{rows.data(), reinterpret_cast<const uint8_t*>(values.data()), capacity, dim},
      RowSparseOut{out_rows.data(), reinterpret_cast<uint8_t*>(out_values.data()), out_capacity}, num_rows, DType::F32);
  const uint64_t ring = ringAllreduceBytes(st.dense_bytes, n);
  const double f_union = double(st.union_blocks) / double(num_rows);
  const double bound = 1.1 * f_union * double(ring) + double(st.count_bytes);
  const char* name = overlap == Overlap::Full ? "full" : overlap == Overlap::None ? "none" : "independent";
  if (r == 0)
    std::fprintf(stderr,
                 "[rows %s, %d ranks, overlap %-11s] %s: rows rank 0 %zu, union %zu (%.2f%%); sent %llu B = %.3fx "
                 "the union's fraction of the %llu B ring (lists %llu B)\n",
                 c.backend().c_str(), n, name, st.row_allgather ? "all-gather" : "owner sums", st.nonzero_blocks,
                 st.union_blocks, 100 * f_union, (unsigned long long)st.sent_bytes,
                 double(st.sent_bytes - st.count_bytes) / (f_union * double(ring)), (unsigned long long)ring,
                 (unsigned long long)st.count_bytes);
  ck.expect(st.sparse, std::string(name) + ": fell back to dense");
  ck.expect(double(st.sent_bytes) <= bound, std::string(name) + ": rank " + std::to_string(r) + " sent " +
                                                std::to_string(st.sent_bytes) + " B > bound " +
                                                std::to_string(static_cast<uint64_t>(bound)) + " B");
  ck.expect(st.row_allgather == (overlap != Overlap::Full || n == 2),
            std::string(name) + ": took " + (st.row_allgather ? "the all-gather" : "owner sums"));
  ck.throwIfFailed();
}
void embeddingAll(Communicator& c) {
  for (Overlap o : {Overlap::Independent, Overlap::Full, Overlap::None}) embedding(c, o);
}
TEST(SparseRowAllreduce, EmbeddingBytesThreads4) {
  expectAllOk(testing::runThreadRanks(4, embeddingAll));
}
TEST(SparseRowAllreduce, EmbeddingBytesGloo2) {
  expectAllOk(glooRanks(2, embeddingAll));
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
