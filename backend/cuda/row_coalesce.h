// Coalescing rows on the GPU: S source rows of `dim` elements, each with a
// key (the table row it belongs to, or `bound` to leave it out), become a
// row-sparse tensor (core/ops/row_sparse.cpp): the distinct keys ascending,
// each with the sum of its sources in source order from +0, then -1 rows
// and zero values up to the output's capacity.
//
// It serves embedding_backward_rows (the sources are the gradient's
// positions, the keys their indices) and the NCCL allreduce_rows (the
// sources are every rank's gathered rows, rank after rank, so each row is
// summed in rank order). Deterministic, no atomics, no host sync (it is
// captured into the step's CUDA graph), and linear in S x dim: nothing
// walks the table:
//   1. the keys are sorted with their source positions (CUB's stable
//      radix sort, so equal keys keep source order);
//   2. a flag marks the first source of each distinct key, and an
//      inclusive scan of the flags numbers the distinct keys;
//   3. each distinct key's run of sorted sources [start, end) is recorded
//      under its number;
//   4. a thread per (output row, column) sums its run in order (the CPU
//      kernels' order: f32 results equal theirs bit for bit).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/ir.h"

namespace kiln::cuda {

/// Bits of a radix-sort key below 2^bits that can hold every key up to and
/// including `bound` (the sentinel of left-out entries).
int keyBits(int64_t bound);

/// CUB's scratch for sorting `count` uint32 keys (with int32 values) below
/// 2^keyBits(bound). The query needs a device; without one (a plan made on
/// a host with no GPU) a generous bound: the alternate key/value buffers,
/// the digit histograms and the look-back state come to well under 24 bytes
/// per key plus 4 MiB.
size_t sortTempBytes(int64_t count, int64_t bound);

/// Where a coalesce's buffers sit in its workspace (256-byte aligned).
struct RowCoalesceLayout {
  int64_t sources = 0, capacity = 0, bound = 0;
  size_t keys = 0;  ///< uint32[sources]: the caller writes the keys here first
  size_t sorted_keys = 0, positions = 0, sorted_positions = 0, heads = 0, numbers = 0, starts = 0, ends = 0;
  size_t temp = 0, temp_bytes = 0, total = 0;
};

/// The layout for `sources` keyed rows, keys below `bound` kept, into an
/// output of `capacity` rows (at least the number of distinct kept keys:
/// min(sources, bound) always is). Fails past 2^31 - 1 sources or keys.
RowCoalesceLayout rowCoalesceLayout(int64_t sources, int64_t bound, int64_t capacity);

/// The keys buffer inside `workspace` (uint32[sources]).
inline uint32_t* coalesceKeys(void* workspace, const RowCoalesceLayout& l) {
  return reinterpret_cast<uint32_t*>(static_cast<unsigned char*>(workspace) + l.keys);
}

/// Enqueue steps 1-4 on `stream`: `values` holds the sources ([sources,
/// dim] of floating `dtype`), the keys are already in coalesceKeys(); the
/// result goes to rows_out (i64[capacity]) and values_out ([capacity, dim]).
/// `node` names the work in errors.
void enqueueRowCoalesce(void* workspace, const RowCoalesceLayout& l, const void* values, DType dtype, int64_t dim,
                        int64_t* rows_out, void* values_out, cudaStream_t stream, const Node* node);

}  // namespace kiln::cuda
