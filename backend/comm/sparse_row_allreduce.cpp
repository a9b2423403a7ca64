// Row-sparse allreduce of an embedding gradient (sparse_allreduce.h has the
// exchanges, the byte formulas and the rule). The ranks first all-gather
// their row lists, in fixed slots of the tensor's capacity, so that every
// rank knows every rank's rows, the union and how they overlap before any
// value moves. The values then travel without indices, as one of:
//   all-gather   every rank's rows to every rank, each rank sums them
//                (fewest messages; pays when the ranks' rows barely overlap)
//   owner sums   each rank sends the owner of a row range its rows there
//                (all-to-all), the owner sums them and an all-gather hands
//                out the owners' sums (pays when the rows overlap: each sum
//                travels once instead of once per rank that holds the row)
// or, when both would send more than the dense ring, the dense allreduce of
// the table. That is two collectives where the block exchange needs four
// (two of them count exchanges), which matters most where ranks share
// cores and each hop waits to be scheduled.
//
// Every exchange adds the ranks' rows in rank order 0..N-1 into +0, so the
// values are the block-sparse allreduce's bits, and the same on every rank.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend/comm/sparse_allreduce.h"
#include "backend/comm/sparse_blocks.h"
#include "core/result.h"

namespace kiln {

namespace {

/// The row lists' word: 4 bytes while the rows fit below the all-ones
/// padding word, else 8.
size_t listWordBytes(size_t num_rows) {
  return num_rows < 0xFFFFFFFFull ? 4 : 8;
}

/// Rank `rank`'s rows from its gathered slot of `capacity` words: the prefix
/// before the first all-ones word, checked ascending and in range.
std::vector<uint64_t> readList(const uint8_t* slot, size_t capacity, size_t word, size_t num_rows, int rank) {
  const uint64_t padding = word == 4 ? 0xFFFFFFFFull : ~uint64_t{0};
  std::vector<uint64_t> rows;
  for (size_t j = 0; j < capacity; ++j) {
    const uint64_t r = sparse_blocks::getWord(slot, j, word);
    if (r == padding) break;
    if (r >= num_rows || (!rows.empty() && r <= rows.back()))
      fail("sparseRowAllreduce: rank " + std::to_string(rank) + " listed row " + std::to_string(r) + " at " +
           std::to_string(j) + ", " + (r >= num_rows ? "out of range" : "out of order"));
    rows.push_back(r);
  }
  return rows;
}

/// Add rows `rows` (ascending, all in `uni`) of `src` into their slots of
/// `dst`, which holds the rows uni[first..] (ascending).
void addRowsInto(uint8_t* dst, const std::vector<uint64_t>& uni, size_t first, const uint64_t* rows, size_t k,
                 const uint8_t* src, size_t row_bytes, size_t dim, sparse_blocks::AddFn add) {
  size_t slot = first;
  for (size_t j = 0; j < k; ++j) {
    while (uni[slot] < rows[j]) ++slot;
    add(dst + (slot - first) * row_bytes, src + j * row_bytes, dim);
  }
}

}  // namespace

SparseAllreduceStats sparseRowAllreduce(Communicator& comm, const RowSparse& in, const RowSparseOut& out,
                                        size_t num_rows, DType dtype, double max_ratio) {
  const size_t dim = in.dim, esize = dtypeSize(dtype), row_bytes = dim * esize;
  if (dim == 0) fail("sparseRowAllreduce: rows of 0 elements");
  const sparse_blocks::AddFn add = sparse_blocks::adderFor(dtype, "sparseRowAllreduce");
  // This rank's rows: the valid prefix, ascending and in range.
  std::vector<uint64_t> mine;
  for (size_t j = 0; j < in.capacity && in.rows[j] >= 0; ++j) {
    const auto r = static_cast<uint64_t>(in.rows[j]);
    if (r >= num_rows || (!mine.empty() && r <= mine.back()))
      fail("sparseRowAllreduce: row " + std::to_string(in.rows[j]) + " at " + std::to_string(j) +
           (r >= num_rows ? " is out of range for " + std::to_string(num_rows) + " rows"
                          : " does not ascend from " + std::to_string(mine.back())));
    mine.push_back(r);
  }
  SparseAllreduceStats st;
  st.blocks = num_rows;
  st.sparse = true;
  st.dense_bytes = static_cast<uint64_t>(num_rows) * row_bytes;
  st.nonzero_blocks = st.nonzero_blocks_all = st.union_blocks = mine.size();
  auto finish = [&](size_t filled) {
    for (size_t j = filled; j < out.capacity; ++j) out.rows[j] = -1;
    std::memset(out.values + filled * row_bytes, 0, (out.capacity - filled) * row_bytes);
  };
  auto tooMany = [&](size_t rows) {
    fail("sparseRowAllreduce: the sum has " + std::to_string(rows) + " rows, more than the " +
         std::to_string(out.capacity) + " it has room for");
  };
  const int n = comm.size(), rank = comm.rank();
  if (n <= 1) {  // the sum is this rank's rows
    if (mine.size() > out.capacity) tooMany(mine.size());
    for (size_t j = 0; j < mine.size(); ++j) out.rows[j] = static_cast<int64_t>(mine[j]);
    std::memcpy(out.values, in.values, mine.size() * row_bytes);
    finish(mine.size());
    return st;
  }
  const size_t nn = static_cast<size_t>(n);

  // 1. The row lists, each in a slot of `capacity` words (the same on every
  // rank: the graph is), padded with all-ones words.
  const size_t word = listWordBytes(num_rows), slot_bytes = in.capacity * word;
  std::vector<uint8_t> lists(nn * slot_bytes, 0xFF);
  for (size_t j = 0; j < mine.size(); ++j) sparse_blocks::putWord(lists.data() + rank * slot_bytes, j, mine[j], word);
  if (slot_bytes > 0) comm.allGather(lists.data(), std::vector<size_t>(nn, slot_bytes), DType::U8);
  st.count_bytes = static_cast<uint64_t>(n - 1) * slot_bytes;
  std::vector<std::vector<uint64_t>> rows_of(nn);
  std::vector<uint64_t> uni;
  for (int q = 0; q < n; ++q) {
    rows_of[q] = q == rank ? mine : readList(lists.data() + q * slot_bytes, in.capacity, word, num_rows, q);
    uni.insert(uni.end(), rows_of[q].begin(), rows_of[q].end());
  }
  lists = {};
  std::sort(uni.begin(), uni.end());
  uni.erase(std::unique(uni.begin(), uni.end()), uni.end());
  // Every rank knows the union, so all fail here together or none does.
  if (uni.size() > out.capacity) tooMany(uni.size());

  // 2. The plan: rank q owns rows [ownerBegin(q), ownerBegin(q+1)); at[p][q] is where
  // rank p's rows in q's range start in its list, owned[q] where q's union
  // rows start in `uni`.
  std::vector<std::vector<size_t>> at(nn, std::vector<size_t>(nn + 1));
  std::vector<size_t> owned(nn + 1);
  for (int q = 0; q <= n; ++q) {
    const uint64_t first_row = sparse_blocks::ownerBegin(num_rows, q, n);
    for (int p = 0; p < n; ++p)
      at[p][q] =
          static_cast<size_t>(std::lower_bound(rows_of[p].begin(), rows_of[p].end(), first_row) - rows_of[p].begin());
    owned[q] = static_cast<size_t>(std::lower_bound(uni.begin(), uni.end(), first_row) - uni.begin());
  }
  uint64_t listed = 0;
  uint64_t scattered = 0;  // rows that leave their rank in the owners' all-to-all
  for (int p = 0; p < n; ++p) {
    listed += rows_of[p].size();
    for (int q = 0; q < n; ++q)
      if (q != p) scattered += at[p][q + 1] - at[p][q];
  }
  st.nonzero_blocks_all = listed;
  const double gather_wire = double(n - 1) * double(listed) * double(row_bytes);
  const double owner_wire = (double(scattered) + double(n - 1) * double(uni.size())) * double(row_bytes);
  const uint64_t ring = ringAllreduceBytes(st.dense_bytes, n);
  if (std::min(gather_wire, owner_wire) > max_ratio * double(n) * double(ring)) {
    // Too dense to pay: the dense ring over the whole table, then its
    // non-zero rows (a row summing to exactly zero changes nothing that
    // reads the result, dense or row by row).
    st.sparse = false;
    st.union_blocks = 0;
    st.sent_bytes = st.count_bytes + ring;
    std::vector<uint8_t> dense(num_rows * row_bytes, 0);
    for (size_t j = 0; j < mine.size(); ++j)
      std::memcpy(dense.data() + mine[j] * row_bytes, in.values + j * row_bytes, row_bytes);
    comm.allreduceSum(dense.data(), num_rows * dim, dtype);
    size_t filled = 0;
    for (uint64_t r : sparse_blocks::nonZeroBlocks(dense.data(), num_rows * dim, dim, dtype)) {
      out.rows[filled] = static_cast<int64_t>(r);
      std::memcpy(out.values + filled * row_bytes, dense.data() + r * row_bytes, row_bytes);
      ++filled;
    }
    finish(filled);
    return st;
  }
  st.union_blocks = uni.size();
  st.row_allgather = gather_wire <= owner_wire;
  for (size_t j = 0; j < uni.size(); ++j) out.rows[j] = static_cast<int64_t>(uni[j]);
  std::memset(out.values, 0, uni.size() * row_bytes);  // the adds' +0
  finish(uni.size());
  const size_t next = static_cast<size_t>((rank + 1) % n);  // the ring all-gather sends every slice but its
  std::vector<size_t> counts(nn);
  if (listed == 0) {  // every rank empty: nothing to send (they all know)
    st.sent_bytes = st.count_bytes;
    return st;
  }

  if (st.row_allgather) {
    // 3a. Every rank's rows to every rank; each sums them in rank order.
    std::vector<size_t> first(nn + 1, 0);
    for (size_t q = 0; q < nn; ++q) {
      counts[q] = rows_of[q].size() * dim;
      first[q + 1] = first[q] + rows_of[q].size();
    }
    std::vector<uint8_t> all(listed * row_bytes);
    std::memcpy(all.data() + first[rank] * row_bytes, in.values, mine.size() * row_bytes);
    comm.allGather(all.data(), counts, dtype);
    for (size_t p = 0; p < nn; ++p)
      addRowsInto(out.values, uni, 0, rows_of[p].data(), rows_of[p].size(), all.data() + first[p] * row_bytes,
                  row_bytes, dim, add);
    st.sent_bytes = st.count_bytes + (listed - rows_of[next].size()) * row_bytes;
    return st;
  }

  // 3b. Owner sums: this rank's rows in q's range go to q (they are
  // contiguous in its values, owners in rank order), q adds them into its
  // slice of the output in rank order, and the slices are all-gathered in
  // place (owners in rank order, so the whole is `uni`'s order).
  std::vector<size_t> send_counts(nn), recv_counts(nn);
  size_t received = 0;
  for (int q = 0; q < n; ++q) {
    send_counts[q] = (at[rank][q + 1] - at[rank][q]) * dim;
    recv_counts[q] = (at[q][rank + 1] - at[q][rank]) * dim;
    received += recv_counts[q];
    if (q != rank) st.phase1_bytes += send_counts[q] * esize;
  }
  std::vector<uint8_t> recv(received * esize);
  comm.allToAll(in.values, send_counts, recv.data(), recv_counts, dtype);
  uint8_t* slice = out.values + owned[rank] * row_bytes;
  size_t off = 0;
  for (int p = 0; p < n; ++p) {
    const size_t k = at[p][rank + 1] - at[p][rank];
    addRowsInto(slice, uni, owned[rank], rows_of[p].data() + at[p][rank], k, recv.data() + off, row_bytes, dim, add);
    off += k * row_bytes;
  }
  recv = {};
  for (int q = 0; q < n; ++q) counts[q] = (owned[q + 1] - owned[q]) * dim;
  comm.allGather(out.values, counts, dtype);
  st.sent_bytes = st.count_bytes + st.phase1_bytes + (uni.size() - (owned[next + 1] - owned[next])) * row_bytes;
  return st;
}

}  // namespace kiln
