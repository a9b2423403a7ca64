// Block-sparse allreduce (after OmniReduce): a gradient that is mostly zero
// (embedding rows no token of the batch touched, frozen slices) is cut into
// B blocks of `block` elements and only the blocks holding a non-zero
// element travel, each with its index. The result is the dense allreduce's:
// each element is the sum of the ranks' values, added in rank order 0..N-1
// into +0 (exact on integer-valued data, within float rounding of the dense
// ring's order otherwise), and every rank ends with the same bits.
//
// Two phases, so that no rank sends more than about its share of the summed
// non-zero blocks, however much the ranks' blocks overlap:
//  1. sparse reduce-scatter: rank q owns the blocks [q B / N, (q+1) B / N);
//     every rank sends each owner its non-zero blocks of that range (one
//     all-to-all), and each owner adds what it received in rank order;
//  2. all-gather of each owner's summed non-zero blocks (the union of what
//     it received), which every rank writes into its zeroed tensor.
// Before phase 1 the ranks all-gather how many blocks each sends each owner
// (an N x N matrix), before phase 2 how many blocks each owner's sum has.
//
// Bytes, per rank r (what `sent_bytes` reports), with idx = 4 (8 from 2^32
// blocks on), pack(k) = k x idx + the elements of those k blocks x esize,
// c[p][q] = rank p's non-zero blocks in owner q's range, u[q] = owner q's
// summed non-zero blocks, D = the tensor's bytes:
//   counts   N (N-1) x 8, then (N-1) x 8 unless every rank is all zero
//            (two ring all-gathers of i64 words)
//   phase 1  sum_{q != r} pack(c[r][q])
//   phase 2  sum_{q != (r+1) mod N} pack(u[q])   (Gloo's ring allgatherv:
//            rank r forwards every slot but that of rank r+1)
// against ringAllreduceBytes(D, N) = 2 (N-1)/N x D for the dense ring.
// Decision (the same on every rank: it uses only the all-gathered matrix):
// go sparse iff  sum_{p != q} pack(c[p][q]) + (N-1) sum_q pack(ub[q])
// <= max_ratio x N x ring(D, N), with ub[q] = min(sum_p c[p][q], blocks in
// q's range) >= u[q]: an upper bound of the total bytes on the wire, so a
// sparse exchange never costs more than max_ratio x the dense ring's total
// (the count words aside). Otherwise every rank takes the dense allreduce
// and reports ring(D, N) + N (N-1) x 8 bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/comm/communicator.h"
#include "core/collective_layout.h"  // ringAllreduceBytes

namespace kiln {

struct SparseAllreduceStats {
  size_t blocks = 0;              ///< blocks the tensor is cut into
  size_t nonzero_blocks = 0;      ///< of them, this rank's with a non-zero element
  size_t nonzero_blocks_all = 0;  ///< summed over the ranks
  size_t union_blocks = 0;        ///< blocks of the sum that travel in phase 2 (0 when dense)
  bool sparse = false;            ///< false: it fell back to the dense allreduce
  uint64_t dense_bytes = 0;       ///< the tensor's bytes
  uint64_t sent_bytes = 0;        ///< bytes this rank sent: count_bytes + phase 1 + phase 2, or the ring's
  uint64_t count_bytes = 0;       ///< of them, the count exchanges' (row-sparse: the row lists')
  uint64_t phase1_bytes = 0;      ///< of them, the reduce-scatter's (this rank's blocks to other owners)
  bool row_allgather = false;     ///< row-sparse: the values were all-gathered (else owner sums)
};

/// Sum `count` elements of `dtype` (f32, f64, i32, i64) at `data` over every
/// rank of `comm`, in place, sending only non-zero blocks (see above). Same
/// errors as the communicator's collectives.
SparseAllreduceStats sparseBlockAllreduce(Communicator& comm, void* data, size_t count, DType dtype, size_t block,
                                          double max_ratio = 1.0);

/// A row-sparse tensor (core/ops/row_sparse.cpp): `capacity` rows, the real
/// ones first (ascending, distinct, in range), then -1; row j's `dim`
/// elements at values + j x dim x the element size.
struct RowSparse {
  const int64_t* rows;
  const uint8_t* values;
  size_t capacity, dim;
};
struct RowSparseOut {
  int64_t* rows;
  uint8_t* values;
  size_t capacity;
};

/// The allreduce of a row-sparse tensor of a [num_rows, dim] table
/// (sparse_row_allreduce.cpp): this rank's non-zero blocks are the rows it
/// lists, nothing scans the table and nothing dense is written. `out` gets
/// the rows of the sum, ascending (the union of the ranks' rows), then -1
/// and zeros; on the dense fallback, the non-zero rows of the dense ring's
/// sum. The values are the rank-order sums into +0, the block exchange's
/// bits. Two collectives: the row lists (in.capacity words of 4 bytes, 8
/// from 2^32 - 1 rows on, per rank: `in.capacity` must be the same on every
/// rank), then the values without indices, either
///   all-gather  every rank's rows to every rank, summed there;
///               sent: lists + sum_{q != r+1} K_q x row bytes
///   owner sums  rank r sends owner q (the rows [q R / N, (q+1) R / N)) its
///               rows there (all-to-all), q sums them, the sums are
///               all-gathered; sent: lists + sum_{q != r} c[r][q] x row
///               bytes + sum_{q != r+1} u[q] x row bytes
/// with K_q rank q's rows, c[p][q] rank p's rows in q's range, u[q] the
/// union's rows there, U the union's size. Every rank computes, from the
/// lists, the bytes on the wire: all-gather (N-1) sum_q K_q, owner sums
/// sum_{p != q} c[p][q] + (N-1) U (x row bytes), and takes the all-gather
/// when it is not more, the dense ring over the table when both exceed
/// max_ratio x N x ring(D, N) (the lists are sent already and not counted).
/// Fails when the sum does not fit out.capacity (min(N x in.capacity,
/// num_rows) always fits; every rank fails together) or a row is out of
/// range or out of order.
SparseAllreduceStats sparseRowAllreduce(Communicator& comm, const RowSparse& in, const RowSparseOut& out,
                                        size_t num_rows, DType dtype, double max_ratio = 1.0);

}  // namespace kiln
