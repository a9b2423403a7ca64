// Block-sparse allreduce (OmniReduce-style) over any Communicator, in two
// phases (sparse_allreduce.h has the algorithm, the byte formulas and the
// sparse/dense rule): a sparse reduce-scatter to the owners of contiguous
// block ranges through one all-to-all, then a ring all-gather of each
// owner's summed non-zero blocks. Each rank sends about its own non-zero
// blocks once plus its share of the summed ones, instead of (N-1) times its
// own blocks as an all-gather of every rank's blocks would.
//
// A pack is [k block indices | the k blocks back to back], indices ascending.
// Only the tensor's last block may be short, and it is the highest index, so
// block j of a pack starts at j x block elements.
//
// Zeros: a float element counts as zero when `v == 0`, so -0.0 is zero and NaN
// is non-zero (it must travel: a NaN gradient has to reach every rank). A
// result element that no rank sent is +0.0, where the dense allreduce could
// give -0.0 (only if every rank held -0.0 there); values are otherwise the
// rank-order sums. A block whose sum is exactly zero still travels in phase
// 2 (the owner's set is the union of the indices it received); it carries
// the zeros every rank would write anyway.
#include "backend/comm/sparse_allreduce.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend/comm/sparse_blocks.h"
#include "core/result.h"

namespace kiln {

namespace {

using sparse_blocks::AddFn;

// How the tensor is cut into blocks and owner ranges, and what a pack weighs.
struct Layout {
  size_t count, block, esize, blocks, idx_bytes;
  int n;
  /// The first block rank q owns (q = n: one past the last block).
  uint64_t begin(int q) const { return sparse_blocks::ownerBegin(blocks, q, n); }
  /// Elements of block k.
  size_t len(uint64_t k) const { return std::min(block, count - k * block); }
  /// Bytes of a pack of k blocks, the short last block among them if `tail`.
  uint64_t pack(uint64_t k, bool tail) const {
    if (k == 0) return 0;
    return k * idx_bytes + (tail ? (k - 1) * block + len(blocks - 1) : k * block) * esize;
  }
  void putIndex(uint8_t* p, size_t j, uint64_t k) const { sparse_blocks::putWord(p, j, k, idx_bytes); }
  uint64_t index(const uint8_t* p, size_t j) const { return sparse_blocks::getWord(p, j, idx_bytes); }
  /// Where block j of a pack of k blocks starts.
  template <typename Byte>
  Byte* blockAt(Byte* pack, size_t k, size_t j) const {
    return pack + k * idx_bytes + j * block * esize;
  }
};

/// What the sparse exchange left on every rank: each owner's pack of summed
/// non-zero blocks (ascending indices within the pack, owners in rank order,
/// so the whole is ascending).
struct SummedPacks {
  bool sparse = false;  ///< false: the rule chose the dense allreduce; nothing was exchanged but the counts
  std::vector<uint8_t> gathered;
  std::vector<size_t> offset;   ///< owner q's pack at gathered[offset[q]]
  std::vector<int64_t> blocks;  ///< blocks in owner q's pack
};

/// The exchange of sparse_allreduce.h on this rank's non-zero blocks `mine`
/// (ascending), block j's elements at block_at(j). Fills the statistics;
/// with n > 1 ranks only.
template <typename BlockAt>
SummedPacks exchangeBlocks(Communicator& comm, const Layout& L, const std::vector<uint64_t>& mine, BlockAt block_at,
                           AddFn add, double max_ratio, SparseAllreduceStats& st) {
  const int n = comm.size();
  const int rank = comm.rank();
  const size_t nn = static_cast<size_t>(n);
  SummedPacks out;

  // Counts: word [p][q] = (rank p's non-zero blocks in q's range) << 1 | "the
  // short last block is among them", so every rank knows every pack's bytes.
  std::vector<size_t> first(nn + 1, mine.size());  // mine[first[q]..first[q+1]): q's range
  for (int q = 0; q < n; ++q)
    first[q] = static_cast<size_t>(std::lower_bound(mine.begin(), mine.end(), L.begin(q)) - mine.begin());
  std::vector<int64_t> words(nn * nn, 0);
  for (int q = 0; q < n; ++q) {
    const bool tail = first[q + 1] > first[q] && mine[first[q + 1] - 1] == st.blocks - 1;
    words[rank * nn + q] = static_cast<int64_t>((first[q + 1] - first[q]) << 1 | (tail ? 1u : 0u));
  }
  comm.allGather(words.data(), std::vector<size_t>(nn, nn), DType::I64);
  st.count_bytes = static_cast<uint64_t>(n - 1) * nn * sizeof(int64_t);
  auto nnz = [&](int p, int q) { return static_cast<uint64_t>(words[p * nn + q] >> 1); };
  auto tail = [&](int p, int q) { return (words[p * nn + q] & 1) != 0; };
  auto pack1 = [&](int p, int q) { return L.pack(nnz(p, q), tail(p, q)); };

  // The rule (sparse_allreduce.h): phase 1 exactly, phase 2 bounded above.
  double wire = 0;
  std::vector<bool> tail_of(nn, false);  // the owner's sum holds the last block
  st.nonzero_blocks_all = 0;
  for (int q = 0; q < n; ++q) {
    uint64_t sum = 0;
    for (int p = 0; p < n; ++p) {
      sum += nnz(p, q);
      tail_of[q] = tail_of[q] || tail(p, q);
      if (p != q) wire += static_cast<double>(pack1(p, q));
    }
    st.nonzero_blocks_all += sum;
    wire += static_cast<double>(n - 1) *
            static_cast<double>(L.pack(std::min(sum, L.begin(q + 1) - L.begin(q)), tail_of[q]));
  }
  const uint64_t ring = ringAllreduceBytes(st.dense_bytes, n);
  if (wire > max_ratio * static_cast<double>(n) * static_cast<double>(ring)) {
    st.sparse = false;
    st.union_blocks = 0;
    st.sent_bytes = ring + st.count_bytes;
    return out;
  }
  out.sparse = true;
  out.offset.assign(nn + 1, 0);
  out.blocks.assign(nn, 0);
  if (st.nonzero_blocks_all == 0) {  // every rank all zero: nothing to send (they all know)
    st.union_blocks = 0;
    st.sent_bytes = st.count_bytes;
    return out;
  }

  // Phase 1: each owner's blocks to it, packed in owner order.
  std::vector<size_t> send_counts(nn), recv_counts(nn);
  size_t send_total = 0, recv_total = 0;
  for (int q = 0; q < n; ++q) {
    send_counts[q] = pack1(rank, q);
    recv_counts[q] = pack1(q, rank);
    send_total += send_counts[q];
    recv_total += recv_counts[q];
    if (q != rank) st.phase1_bytes += send_counts[q];
  }
  std::vector<uint8_t> send(send_total), recv(recv_total);
  uint8_t* w = send.data();
  for (int q = 0; q < n; ++q) {
    const size_t k = first[q + 1] - first[q];
    for (size_t j = 0; j < k; ++j) {
      const uint64_t b = mine[first[q] + j];
      L.putIndex(w, j, b);
      std::memcpy(L.blockAt(w, k, j), block_at(first[q] + j), L.len(b) * L.esize);
    }
    w += send_counts[q];
  }
  comm.allToAll(send.data(), send_counts, recv.data(), recv_counts, DType::U8);
  send = {};

  // The owner's non-zero set: the union of the (ascending) indices received.
  const uint64_t lo = L.begin(rank), hi = L.begin(rank + 1);
  std::vector<uint64_t> uni;
  size_t off = 0;
  for (int p = 0; p < n; off += recv_counts[p], ++p)
    for (size_t j = 0; j < nnz(p, rank); ++j) {
      const uint64_t k = L.index(recv.data() + off, j);
      if (k < lo || k >= hi)
        fail("sparse allreduce: rank " + std::to_string(p) + " sent block " + std::to_string(k) + " to rank " +
             std::to_string(rank) + ", which owns blocks " + std::to_string(lo) + ".." + std::to_string(hi));
      uni.push_back(k);
    }
  std::sort(uni.begin(), uni.end());
  uni.erase(std::unique(uni.begin(), uni.end()), uni.end());

  // Phase 2 counts, then the summed packs: this rank's written straight into
  // its slot of the all-gather buffer (zeroed), adding in rank order 0..N-1.
  out.blocks[rank] = static_cast<int64_t>(uni.size());
  comm.allGather(out.blocks.data(), std::vector<size_t>(nn, 1), DType::I64);
  st.count_bytes += static_cast<uint64_t>(n - 1) * sizeof(int64_t);
  std::vector<size_t> counts2(nn);
  st.union_blocks = 0;
  for (int q = 0; q < n; ++q) {
    if (out.blocks[q] < 0 || static_cast<uint64_t>(out.blocks[q]) > L.begin(q + 1) - L.begin(q))
      fail("sparse allreduce: rank " + std::to_string(q) + " announced " + std::to_string(out.blocks[q]) +
           " summed blocks for its range of " + std::to_string(L.begin(q + 1) - L.begin(q)));
    counts2[q] = L.pack(static_cast<uint64_t>(out.blocks[q]), tail_of[q]);
    out.offset[q + 1] = out.offset[q] + counts2[q];
    st.union_blocks += static_cast<size_t>(out.blocks[q]);
  }
  out.gathered.assign(out.offset[nn], 0);
  uint8_t* own = out.gathered.data() + out.offset[rank];
  for (size_t j = 0; j < uni.size(); ++j) L.putIndex(own, j, uni[j]);
  off = 0;
  for (int p = 0; p < n; off += recv_counts[p], ++p) {
    const size_t k = nnz(p, rank);
    for (size_t j = 0; j < k; ++j) {
      const uint64_t b = L.index(recv.data() + off, j);
      const size_t slot = static_cast<size_t>(std::lower_bound(uni.begin(), uni.end(), b) - uni.begin());
      add(L.blockAt(own, uni.size(), slot), L.blockAt(recv.data() + off, k, j), L.len(b));
    }
  }
  recv = {};
  comm.allGather(out.gathered.data(), counts2, DType::U8);
  st.sent_bytes = st.count_bytes + st.phase1_bytes + out.offset[nn] - counts2[(rank + 1) % n];
  return out;
}

/// Call fn(index, elements) for every block of the summed packs, in
/// ascending index order; checks each owner sent back only its range.
template <typename Fn>
void forEachSummedBlock(const Layout& L, const SummedPacks& s, Fn fn) {
  for (int q = 0; q < L.n; ++q) {
    const uint8_t* pack = s.gathered.data() + s.offset[q];
    const size_t k = static_cast<size_t>(s.blocks[q]);
    for (size_t j = 0; j < k; ++j) {
      const uint64_t b = L.index(pack, j);
      if (b < L.begin(q) || b >= L.begin(q + 1))
        fail("sparse allreduce: rank " + std::to_string(q) + " sent back block " + std::to_string(b) +
             " outside its range");
      fn(b, L.blockAt(pack, k, j));
    }
  }
}

SparseAllreduceStats baseStats(size_t count, size_t block, DType dtype) {
  SparseAllreduceStats st;
  st.blocks = count == 0 ? 0 : (count + block - 1) / block;
  st.sparse = true;
  st.dense_bytes = static_cast<uint64_t>(count) * dtypeSize(dtype);
  return st;
}

Layout layoutFor(const SparseAllreduceStats& st, size_t count, size_t block, DType dtype, int n) {
  return Layout{count, block, dtypeSize(dtype), st.blocks, st.blocks <= (uint64_t{1} << 32) ? 4u : 8u, n};
}

}  // namespace

SparseAllreduceStats sparseBlockAllreduce(Communicator& comm, void* data, size_t count, DType dtype, size_t block,
                                          double max_ratio) {
  if (block == 0) fail("sparseBlockAllreduce: block must be at least 1 element");
  const AddFn add = sparse_blocks::adderFor(dtype, "sparseBlockAllreduce");
  const std::vector<uint64_t> mine = sparse_blocks::nonZeroBlocks(data, count, block, dtype);
  SparseAllreduceStats st = baseStats(count, block, dtype);
  st.nonzero_blocks = st.nonzero_blocks_all = st.union_blocks = mine.size();
  // Nothing to exchange: one rank (the sum is the tensor itself, left as it
  // is, -0.0 included), or an empty tensor (count matches on every rank).
  if (comm.size() <= 1 || count == 0) return st;
  const Layout L = layoutFor(st, count, block, dtype, comm.size());
  auto* bytes = static_cast<uint8_t*>(data);
  const SummedPacks s = exchangeBlocks(
      comm, L, mine, [&](size_t j) { return bytes + mine[j] * block * L.esize; }, add, max_ratio, st);
  if (!s.sparse) {
    comm.allreduceSum(data, count, dtype);
    return st;
  }
  // All-zero bits are +0 for every supported dtype: what nobody sent.
  std::memset(data, 0, st.dense_bytes);
  forEachSummedBlock(
      L, s, [&](uint64_t b, const uint8_t* src) { std::memcpy(bytes + b * block * L.esize, src, L.len(b) * L.esize); });
  return st;
}

}  // namespace kiln
