// Tests of what the block-sparse allreduce (backend/comm/sparse_allreduce.h)
// puts on the wire: sent_bytes of a small case counted by hand, the project's
// target on an embedding gradient (bytes sent <= 1.1 x the summed gradient's
// non-zero-block fraction x the dense ring allreduce's bytes, plus the count
// words) whatever the ranks' overlap (independent rows, the same rows on
// every rank, disjoint blocks), and, over real Gloo processes, that the bytes
// the process really wrote (wchar of /proc/self/io) are sent_bytes plus a
// header per message. Each embedding case prints its numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backend/comm/sparse_allreduce.h"
#include "tests/comm/sparse_test_helpers.h"
#include "tests/comm/thread_communicator.h"

namespace kiln {
namespace {

using sparse_test::bytesWritten;
using sparse_test::Checks;
using sparse_test::expectAllOk;
using sparse_test::glooRanks;

// f32, block 8, 40 full blocks and a 3-element last one (B = 41); rank r
// fills blocks r, r+N, r+2N, rank 0 also the last. A full block travels as
// 4 + 32 bytes, the last as 4 + 12. With N = 4 the owners hold blocks 0-9,
// 10-19, 20-29 and 30-40, so owner 0 sums blocks 0-9 (360 B), owner 1 blocks
// 10-11 (72 B), owner 2 nothing, owner 3 block 40 (16 B); rank 1 sends owner
// 0 blocks 1, 5, 9 (108 B) and in phase 2 all owners' sums but rank 2's
// empty one (448 B), after 4 x 3 x 8 + 3 x 8 = 120 B of counts: 676 B.
void handCounted(Communicator& c) {
  static const std::vector<uint64_t> expected[] = {{}, {}, {256, 148}, {420, 496, 188}, {512, 676, 660, 316}};
  Checks ck;
  const size_t block = 8, count = 40 * block + 3;
  const int n = c.size(), r = c.rank();
  std::vector<float> v(count, 0.f);
  for (int j = 0; j < 3; ++j) v[(r + j * n) * block + 1] = 1.f;
  if (r == 0) v[count - 1] = 2.f;
  const SparseAllreduceStats st = sparseBlockAllreduce(c, v.data(), count, DType::F32, block);
  ck.expect(
      st.sparse && st.sent_bytes == expected[n][r],
      "hand-counted sent_bytes: got " + std::to_string(st.sent_bytes) + ", expected " + std::to_string(expected[n][r]));
  ck.expect(v[count - 1] == 2.f && v[1] == 1.f && v[(3 * n - 1) * block + 1] == 1.f && v[3 * n * block + 1] == 0.f,
            "hand-counted case: wrong sum");
  ck.throwIfFailed();
}

enum class Overlap { Independent, Full, None };

const char* overlapName(Overlap o) {
  return o == Overlap::Full ? "full" : o == Overlap::None ? "none" : "independent";
}

// An embedding gradient, 50257 x 64 f32, block 256 (4 rows), each rank
// touching ~1% of the rows: Independent draws each rank's rows on its own;
// Full gives every rank the same rows (frequent tokens), with its own values;
// None draws 1% x N of the rows once and gives each row to one rank by its
// block, so no two ranks share a block.
void embedding(Communicator& c, Overlap overlap) {
  Checks ck;
  const size_t rows = 50257, dim = 64, block = 256, count = rows * dim;
  const int n = c.size(), r = c.rank();
  std::vector<float> g(count, 0.f);
  std::mt19937 rows_rng(overlap == Overlap::Independent ? 1234 + r : 1234), values_rng(99 + r);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::bernoulli_distribution touched(overlap == Overlap::None ? 0.01 * n : 0.01);
  for (size_t row = 0; row < rows; ++row) {
    if (!touched(rows_rng)) continue;
    if (overlap == Overlap::None && (row * dim / block) % n != static_cast<size_t>(r)) continue;
    for (size_t j = 0; j < dim; ++j) g[row * dim + j] = u(values_rng);
  }
  std::vector<float> ref = g;
  c.allreduceSum(ref.data(), count, DType::F32);
  const long w0 = bytesWritten();
  const SparseAllreduceStats st = sparseBlockAllreduce(c, g.data(), count, DType::F32, block);
  const long wire = bytesWritten() - w0;

  size_t union_blocks = 0;  // non-zero blocks of the summed gradient
  for (size_t s = 0; s < count; s += block)
    for (size_t i = s; i < std::min(count, s + block); ++i)
      if (ref[i] != 0.f) {
        ++union_blocks;
        break;
      }
  size_t bad = 0;
  for (size_t i = 0; i < count; ++i) bad += std::fabs(g[i] - ref[i]) > 1e-6f * (1 + std::fabs(ref[i]));
  const uint64_t ring = ringAllreduceBytes(st.dense_bytes, n);
  const double f_union = double(union_blocks) / st.blocks;
  const double bound = 1.1 * f_union * ring + double(st.count_bytes);
  // Every rank's bytes, for the print (the bound is checked on each rank).
  std::vector<int64_t> sent(n, 0);
  sent[r] = static_cast<int64_t>(st.sent_bytes);
  c.allGather(sent.data(), std::vector<size_t>(n, 1), DType::I64);
  if (r == 0) {
    int64_t most = 0;
    std::string each;
    for (int64_t s : sent) {
      most = std::max(most, s);
      each += (each.empty() ? "" : " ") + std::to_string(s);
    }
    std::fprintf(
        stderr,
        "[embedding %s, %d ranks, overlap %-11s] non-zero blocks: rank 0 %.2f%%, sum %.2f%%; dense ring %llu B;"
        " sent max %lld B (ranks: %s) = %.3fx the sum's fraction of the ring (counts %llu B); wrote %ld B\n",
        c.backend().c_str(), n, overlapName(overlap), 100.0 * st.nonzero_blocks / st.blocks, 100 * f_union,
        (unsigned long long)ring, (long long)most, each.c_str(),
        double(most - int64_t(st.count_bytes)) / (f_union * ring), (unsigned long long)st.count_bytes, wire);
    std::fflush(stderr);
  }
  ck.expect(st.sparse, "embedding: fell back to dense");
  ck.expect(st.union_blocks == union_blocks, "embedding: union_blocks " + std::to_string(st.union_blocks) +
                                                 ", the sum has " + std::to_string(union_blocks));
  ck.expect(bad == 0, "embedding: " + std::to_string(bad) + " elements differ from the dense allreduce");
  ck.expect(double(st.sent_bytes) <= bound, "embedding: rank " + std::to_string(r) + " sent " +
                                                std::to_string(st.sent_bytes) + " B > bound " +
                                                std::to_string(static_cast<uint64_t>(bound)) + " B");
  // Gloo's TCP pairs write each message with a header (144 bytes in the
  // Gloo we build against) on top of what sent_bytes counts; there are at
  // most 4 (N-1) messages: two count all-gathers, the all-to-all, the final
  // all-gather (which sends empty messages too).
  if (c.backend() == "gloo" && w0 >= 0)
    ck.expect(wire >= long(st.sent_bytes) && wire <= long(st.sent_bytes) + 256 * 4 * (n - 1),
              "embedding: wrote " + std::to_string(wire) + " B, sent_bytes says " + std::to_string(st.sent_bytes));
  ck.throwIfFailed();
}

void embeddingAll(Communicator& c) {
  for (Overlap o : {Overlap::Independent, Overlap::Full, Overlap::None}) embedding(c, o);
}

TEST(SparseAllreduceBytes, HandCountedThreads) {
  for (int n : {2, 3, 4}) expectAllOk(testing::runThreadRanks(n, handCounted));
}
TEST(SparseAllreduceBytes, HandCountedGloo4) {
  expectAllOk(glooRanks(4, handCounted));
}
TEST(SparseAllreduceBytes, EmbeddingThreads4) {
  expectAllOk(testing::runThreadRanks(4, embeddingAll));
}
TEST(SparseAllreduceBytes, EmbeddingGloo2) {
  expectAllOk(glooRanks(2, embeddingAll));
}
TEST(SparseAllreduceBytes, EmbeddingGloo4) {
  expectAllOk(glooRanks(4, embeddingAll));
}

}  // namespace
}  // namespace kiln
