// Tests of the block-sparse allreduce's results (backend/comm/sparse_allreduce.h):
// the result must be the dense allreduce's (bit for bit on integer-valued
// data, within rounding on random floats) and the same bits on every rank; it
// must fall back to the dense ring exactly when the sparse exchange could
// cost more, identically on every rank; and its stats, sent_bytes included,
// must match a re-derivation from the blocks the test filled (owner ranges,
// union per owner, Gloo's ring all-gather pattern). One suite runs over an
// in-process thread communicator (fast, no Gloo) at 2, 3 and 4 ranks and over
// real Gloo rank processes at 2 and 4. A failing check is recorded and the
// suite goes on, so every rank runs the same collectives and none hangs.
// sparse_allreduce_bytes_test.cpp has the byte targets and Gloo's real writes.
#include "backend/comm/sparse_allreduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/comm/sparse_test_helpers.h"
#include "tests/comm/thread_communicator.h"

namespace kiln {
namespace {

using sparse_test::Checks;
using sparse_test::expectAllOk;
using sparse_test::glooRanks;
using sparse_test::kForceSparse;
using sparse_test::sumOverRanks;

// A tensor of any supported dtype, 8-byte aligned, set and read as doubles.
struct Buf {
  DType dt;
  size_t count;
  std::vector<uint64_t> mem;
  Buf(DType d, size_t n) : dt(d), count(n), mem((n * dtypeSize(d) + 7) / 8 + 1, 0) {}
  void* data() { return mem.data(); }
  void set(size_t i, double v) {
    auto* p = reinterpret_cast<char*>(mem.data());
    switch (dt) {
      case DType::F32:
        reinterpret_cast<float*>(p)[i] = static_cast<float>(v);
        break;
      case DType::F64:
        reinterpret_cast<double*>(p)[i] = v;
        break;
      case DType::I32:
        reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
        break;
      default:
        reinterpret_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
        break;
    }
  }
  double get(size_t i) const {
    auto* p = reinterpret_cast<const char*>(mem.data());
    switch (dt) {
      case DType::F32:
        return reinterpret_cast<const float*>(p)[i];
      case DType::F64:
        return reinterpret_cast<const double*>(p)[i];
      case DType::I32:
        return reinterpret_cast<const int32_t*>(p)[i];
      default:
        return static_cast<double>(reinterpret_cast<const int64_t*>(p)[i]);
    }
  }
  bool sameBits(const Buf& o) const { return std::memcmp(mem.data(), o.mem.data(), count * dtypeSize(dt)) == 0; }
};

enum class Fill { Ints, Randoms };
enum class Expect { Any, Sparse, Dense };

struct Case {
  const char* name;
  DType dt;
  size_t count, block;
  double density;  ///< chance that a block of a rank holds non-zero values
  Fill fill = Fill::Ints;
  double max_ratio = kForceSparse;
  Expect expect = Expect::Any;
  int zero_rank = -1;  ///< this rank's tensor is all zero
};

// sent_bytes, union_blocks and the byte parts re-derived from the blocks
// this rank filled (`filled`, one flag per block), independently of the
// implementation: rank q owns blocks [q B/N, (q+1) B/N); a block travels with
// a 4-byte index; phase 1 sends this rank's blocks outside its range, phase 2
// all owners' summed blocks but those of rank r+1 (Gloo's ring all-gather).
void expectBytes(Communicator& c, Checks& ck, const std::string& at, std::vector<int64_t> filled, size_t count,
                 size_t block, size_t es, const SparseAllreduceStats& st) {
  const int n = c.size(), r = c.rank();
  const std::vector<int64_t> mine = filled;
  c.allreduceSum(filled.data(), filled.size(), DType::I64);  // now: how many ranks filled each block
  if (!st.sparse || n == 1) return;
  if (count == 0) return ck.expect(st.sent_bytes == 0, at + "an empty tensor sent bytes");
  const size_t B = filled.size();
  auto begin = [&](int q) { return B * static_cast<size_t>(q) / static_cast<size_t>(n); };
  auto bytes = [&](size_t k) { return 4 + std::min(block, count - k * block) * es; };
  uint64_t phase1 = 0, phase2 = 0, union_blocks = 0, counts = 8u * n * (n - 1);
  for (int q = 0; q < n; ++q)
    for (size_t k = begin(q); k < begin(q + 1); ++k) {
      if (mine[k] && q != r) phase1 += bytes(k);
      if (filled[k] && q != (r + 1) % n) phase2 += bytes(k);
      union_blocks += filled[k] != 0;
    }
  if (union_blocks) counts += 8u * (n - 1);  // the second count exchange
  ck.expect(st.union_blocks == union_blocks,
            at + "union_blocks " + std::to_string(st.union_blocks) + ", expected " + std::to_string(union_blocks));
  ck.expect(
      st.count_bytes == counts && st.phase1_bytes == phase1 && st.sent_bytes == counts + phase1 + phase2,
      at + "sent_bytes " + std::to_string(st.sent_bytes) + ", expected " + std::to_string(counts + phase1 + phase2));
}

// Runs one case on this rank: the sparse allreduce against the dense one on a
// copy, and the stats against what the test knows of the data.
SparseAllreduceStats runCase(Communicator& c, Checks& ck, const Case& k, uint32_t seed) {
  const int r = c.rank();
  const std::string at = std::string(k.name) + " " + std::string(dtypeName(k.dt)) + " density " +
                         std::to_string(k.density) + " rank " + std::to_string(r) + ": ";
  std::mt19937 rng(seed * 7919u + static_cast<uint32_t>(r));
  std::uniform_real_distribution<double> u(0, 1);
  Buf x(k.dt, k.count);
  size_t my_nnz = 0;
  std::vector<int64_t> filled((k.count + k.block - 1) / k.block, 0);
  for (size_t s = 0; s < k.count; s += k.block) {
    const size_t len = std::min(k.block, k.count - s);
    if (r == k.zero_rank || u(rng) >= k.density) continue;
    ++my_nnz;
    filled[s / k.block] = 1;
    for (size_t i = 0; i < len; ++i) {
      if (k.fill == Fill::Randoms) {
        x.set(s + i, 2 * u(rng) - 1);
      } else if (u(rng) < 0.7) {
        x.set(s + i, std::floor(u(rng) * 17) - 8);  // -8..8: every sum exact
      }
    }
    x.set(s + static_cast<size_t>(u(rng) * len), r + 1.0);  // never an all-zero "non-zero" block
  }
  Buf ref = x, abs_sum = x;
  for (size_t i = 0; i < k.count; ++i) abs_sum.set(i, std::fabs(x.get(i)));
  c.allreduceSum(ref.data(), k.count, k.dt);
  if (k.fill == Fill::Randoms) c.allreduceSum(abs_sum.data(), k.count, k.dt);

  const SparseAllreduceStats st = sparseBlockAllreduce(c, x.data(), k.count, k.dt, k.block, k.max_ratio);

  if (k.fill == Fill::Ints) {
    ck.expect(x.sameBits(ref), at + "differs from the dense allreduce");
  } else {
    const double tol = k.dt == DType::F32 ? 1e-6 : 1e-14;  // of the sum of |x|, any order
    for (size_t i = 0; i < k.count; ++i)
      if (!(std::fabs(x.get(i) - ref.get(i)) <= tol * abs_sum.get(i))) {
        ck.expect(false, at + "element " + std::to_string(i) + " is " + std::to_string(x.get(i)) + ", dense gives " +
                             std::to_string(ref.get(i)));
        break;
      }
  }
  // Every rank must hold the same bits, not merely values close to dense.
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (size_t i = 0; i < k.count * dtypeSize(k.dt); ++i)
    h = (h ^ reinterpret_cast<const uint8_t*>(x.mem.data())[i]) * 1099511628211ull;
  std::vector<int64_t> hashes(c.size(), 0);
  hashes[r] = static_cast<int64_t>(h);
  c.allGather(hashes.data(), std::vector<size_t>(c.size(), 1), DType::I64);
  for (int64_t other : hashes) ck.expect(other == hashes[0], at + "ranks hold different bits");
  const size_t blocks = (k.count + k.block - 1) / k.block;
  ck.expect(st.blocks == blocks, at + "blocks " + std::to_string(st.blocks));
  ck.expect(st.nonzero_blocks == my_nnz, at + "nonzero_blocks " + std::to_string(st.nonzero_blocks));
  const int64_t all = sumOverRanks(c, static_cast<int64_t>(my_nnz));
  ck.expect(st.nonzero_blocks_all == static_cast<size_t>(all), at + "nonzero_blocks_all");
  ck.expect(st.dense_bytes == k.count * dtypeSize(k.dt), at + "dense_bytes");
  const int64_t sparse_ranks = sumOverRanks(c, st.sparse ? 1 : 0);
  ck.expect(sparse_ranks == 0 || sparse_ranks == c.size(), at + "ranks disagree on sparse vs dense");
  if (k.expect != Expect::Any)
    ck.expect(st.sparse == (k.expect == Expect::Sparse), at + (st.sparse ? "went sparse" : "fell back to dense"));
  if (!st.sparse) {
    const uint64_t ring = ringAllreduceBytes(st.dense_bytes, c.size());
    ck.expect(st.sent_bytes == ring + 8u * c.size() * (c.size() - 1), at + "dense sent_bytes");
  }
  expectBytes(c, ck, at, std::move(filled), k.count, k.block, dtypeSize(k.dt), st);
  return st;
}

// The checks every communicator must pass (see the file comment).
void suite(Communicator& c) {
  Checks ck;
  const int n = c.size();
  uint32_t seed = 1;
  // (a) integer-valued data, bit for bit, forced sparse and with the default
  //     ratio; (c) the default ratio goes sparse at 1% and dense at 100%.
  for (DType dt : {DType::F32, DType::F64, DType::I64, DType::I32})
    for (double d : {0.0, 0.01, 0.5, 1.0}) {
      runCase(c, ck, {"ints forced-sparse", dt, 4099, 32, d}, seed++);
      const Expect e = d <= 0.01 ? Expect::Sparse : d == 1.0 ? Expect::Dense : Expect::Any;
      runCase(c, ck, {"ints default-ratio", dt, 4099, 32, d, Fill::Ints, 1.0, e}, seed++);
    }
  // (b) random floats: within rounding of the dense ring.
  for (DType dt : {DType::F32, DType::F64})
    for (double d : {0.01, 0.5, 1.0}) {
      runCase(c, ck, {"randoms forced-sparse", dt, 10007, 64, d, Fill::Randoms}, seed++);
      runCase(c, ck, {"randoms default-ratio", dt, 10007, 64, d, Fill::Randoms, 1.0}, seed++);
    }
  // (d) uneven shapes, one rank all zero, max_ratio 0 (dense unless nothing
  //     at all is non-zero).
  runCase(c, ck, {"count < block", DType::F32, 5, 16, 1.0}, seed++);
  runCase(c, ck, {"count 0", DType::F64, 0, 16, 1.0}, seed++);
  runCase(c, ck, {"count multiple of block", DType::F32, 4096, 32, 0.3}, seed++);
  runCase(c, ck, {"block 1", DType::I64, 333, 1, 0.2}, seed++);
  runCase(c, ck, {"one element", DType::F32, 1, 1, 1.0}, seed++);
  runCase(c, ck, {"block > count/2", DType::F32, 100, 60, 0.6}, seed++);
  runCase(c, ck, {"rank 1 all zero", DType::F32, 999, 10, 0.5, Fill::Ints, kForceSparse, Expect::Sparse, 1}, seed++);
  runCase(c, ck, {"max_ratio 0", DType::F32, 999, 10, 0.1, Fill::Ints, 0.0, Expect::Dense}, seed++);
  runCase(c, ck, {"max_ratio 0 all zero", DType::F32, 999, 10, 0.0, Fill::Ints, 0.0, Expect::Sparse}, seed++);

  // (f) NaN travels; -0.0 counts as zero (and comes back as +0.0).
  {
    std::vector<double> v(100, 0.0);
    if (c.rank() == 0) v[42] = std::nan("");
    if (c.rank() == n - 1) v[7] = -0.0;
    const SparseAllreduceStats st = sparseBlockAllreduce(c, v.data(), v.size(), DType::F64, 16);
    ck.expect(std::isnan(v[42]) && !std::isnan(v[41]), "NaN did not travel");
    ck.expect(st.nonzero_blocks == (c.rank() == 0 ? 1u : 0u) && st.nonzero_blocks_all == 1, "NaN / -0.0 blocks");
    ck.expect(v[7] == 0.0 && !std::signbit(v[7]), "-0.0 should come back as +0.0");
  }
  // (g) A block every rank sends but whose sum is exactly 0 (it travels in
  //     phase 2 as zeros): the result is +0 there, as the dense sum gives.
  for (DType dt : {DType::F32, DType::I64}) {
    Buf x(dt, 50), ref(dt, 50);
    for (size_t i = 12; i < 16; ++i) x.set(i, (c.rank() == 0 ? 1.0 - n : 1.0) * double(i));
    x.set(40, c.rank() + 1.0);
    ref = x;
    c.allreduceSum(ref.data(), 50, dt);
    const SparseAllreduceStats st = sparseBlockAllreduce(c, x.data(), 50, dt, 4, kForceSparse);
    ck.expect(x.sameBits(ref) && !std::signbit(x.get(12)), "zero-sum block differs from the dense allreduce");
    ck.expect(n == 1 || st.union_blocks == 2, "zero-sum block: union_blocks " + std::to_string(st.union_blocks));
  }
  ck.throwIfFailed();
}

TEST(SparseAllreduce, RingBytes) {
  EXPECT_EQ(ringAllreduceBytes(1000, 1), 0u);
  EXPECT_EQ(ringAllreduceBytes(1000, 2), 1000u);
  EXPECT_EQ(ringAllreduceBytes(1000, 4), 1500u);
  EXPECT_EQ(ringAllreduceBytes(1000, 3), 1333u);                                      // floor(4000 / 3)
  EXPECT_EQ(ringAllreduceBytes(uint64_t{1} << 62, 8), (uint64_t{1} << 62) / 8 * 14);  // no overflow
}

TEST(SparseAllreduce, RejectsBadArguments) {
  testing::ThreadGroup group(1);
  testing::ThreadCommunicator c(group, 0);
  std::vector<uint16_t> h(8, 1);
  try {
    sparseBlockAllreduce(c, h.data(), h.size(), DType::BF16, 4);
    FAIL() << "bf16 accepted";
  } catch (const KilnException& e) {
    EXPECT_NE(std::string(e.what()).find("bf16 is not supported"), std::string::npos) << e.what();
  }
  std::vector<float> f(8, 1.f);
  EXPECT_THROW(sparseBlockAllreduce(c, f.data(), f.size(), DType::F32, 0), KilnException);
}

TEST(SparseAllreduce, OneRankLeavesTheTensor) {
  testing::ThreadGroup group(1);
  testing::ThreadCommunicator c(group, 0);
  std::vector<float> f = {1.f, -0.f, 0.f, 0.f, std::nanf(""), 3.f};
  const SparseAllreduceStats st = sparseBlockAllreduce(c, f.data(), f.size(), DType::F32, 2);
  EXPECT_EQ(st.blocks, 3u);
  EXPECT_EQ(st.nonzero_blocks, 2u);
  EXPECT_EQ(st.sent_bytes, 0u);
  EXPECT_TRUE(std::signbit(f[1]) && std::isnan(f[4]) && f[5] == 3.f);
}

TEST(SparseAllreduce, Threads2) {
  expectAllOk(testing::runThreadRanks(2, suite));
}
TEST(SparseAllreduce, Threads3) {
  expectAllOk(testing::runThreadRanks(3, suite));
}
TEST(SparseAllreduce, Threads4) {
  expectAllOk(testing::runThreadRanks(4, suite));
}
TEST(SparseAllreduce, Gloo2) {
  expectAllOk(glooRanks(2, suite));
}
TEST(SparseAllreduce, Gloo4) {
  expectAllOk(glooRanks(4, suite));
}
}  // namespace
}  // namespace kiln
