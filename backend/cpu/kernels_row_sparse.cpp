// CPU kernels of the row-sparse gradient ops (core/ops/row_sparse.cpp), f32
// and f64. Each is as exact as the dense path it replaces:
//  - embedding_backward_rows sums a row's positions in index order from +0,
//    as embedding_backward does (rows_to_dense of it has the same bits);
//  - sgd_update_rows computes sgdGroup's p + (-lr) x (g x scale) on the
//    listed rows; on every other row the dense update would compute
//    p + (-lr) x (0 x scale) = p, so leaving it untouched is the same
//    (a non-finite scale makes that NaN: then every row gets it).
// The sizes are the batch's, never the table's: nothing here walks all of
// an embedding except rows_to_dense, which is there for the readers that
// need the dense gradient.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_loops.h"
#include "backend/cpu/float_kernel.h"
#include "core/ops/op_helpers.h"

namespace kiln {
namespace {

/// The real rows of a row-sparse tensor: its prefix before the first -1.
size_t realRows(const Tensor& rows) {
  const int64_t* r = rows.data<int64_t>();
  const auto c = static_cast<size_t>(rows.numel());
  size_t k = 0;
  while (k < c && r[k] >= 0) ++k;
  return k;
}

template <typename T, typename I>
void embeddingRows(const Node& n, const Tensor& g, const Tensor& idx, Tensor& rows_out, Tensor& values_out) {
  const int64_t num = n.i("num_weights"), pad = n.i("padding_idx"), count = idx.numel();
  const int64_t dim = g.shape().back();
  const I* ids = idx.data<I>();
  // Positions by row, each row's in index order (the sort is stable).
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const auto id = static_cast<int64_t>(ids[i]);
    if (id < 0 || id >= num)
      opFail(n, "index " + std::to_string(id) + " at position " + std::to_string(i) +
                    " is out of range for an embedding with " + std::to_string(num) + " rows");
    if (id != pad) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return ids[a] < ids[b]; });
  std::vector<size_t> starts;  // order[starts[u]..starts[u+1]): unique row u's positions
  for (size_t k = 0; k < order.size(); ++k)
    if (k == 0 || ids[order[k]] != ids[order[k - 1]]) starts.push_back(k);
  const size_t unique = starts.size();
  starts.push_back(order.size());
  int64_t* rows = rows_out.data<int64_t>();
  T* values = values_out.data<T>();
  const T* gp = g.data<T>();
  cpu::parallelFor(static_cast<int64_t>(unique), std::max<int64_t>(1, 16384 / std::max<int64_t>(dim, 1)),
                   [&](int64_t b, int64_t e) {
                     for (int64_t u = b; u < e; ++u) {
                       rows[u] = static_cast<int64_t>(ids[order[starts[u]]]);
                       T* dst = values + u * dim;
                       std::fill(dst, dst + dim, T(0));
                       for (size_t k = starts[u]; k < starts[u + 1]; ++k) {
                         const T* src = gp + order[k] * dim;
                         for (int64_t d = 0; d < dim; ++d) dst[d] += src[d];
                       }
                     }
                   });
  std::fill(rows + unique, rows + count, int64_t{-1});
  std::fill(values + static_cast<int64_t>(unique) * dim, values + count * dim, T(0));
}

void embeddingBackwardRowsKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  Tensor& rows = allocOutput(n, out, 0);
  Tensor& values = allocOutput(n, out, 1);
  cpu::dispatchFloat(in[0].dtype(), [&](auto t) {
    using T = decltype(t);
    switch (in[1].dtype()) {
      case DType::I64:
        return embeddingRows<T, int64_t>(n, in[0], in[1], rows, values);
      case DType::I32:
        return embeddingRows<T, int32_t>(n, in[0], in[1], rows, values);
      case DType::I16:
        return embeddingRows<T, int16_t>(n, in[0], in[1], rows, values);
      case DType::I8:
        return embeddingRows<T, int8_t>(n, in[0], in[1], rows, values);
      case DType::U8:
        return embeddingRows<T, uint8_t>(n, in[0], in[1], rows, values);
      default:
        opFail(n, "indices must be integers, got " + in[1].type().str());
    }
  });
}

/// Check the real rows of input `at` against a table of `num` rows.
size_t checkedRows(const Node& n, const Tensor& rows, int64_t num) {
  const size_t k = realRows(rows);
  const int64_t* r = rows.data<int64_t>();
  for (size_t j = 0; j < k; ++j)
    if (r[j] >= num || (j && r[j] <= r[j - 1]))
      opFail(n, "row " + std::to_string(r[j]) + " at " + std::to_string(j) +
                    (r[j] >= num ? " is out of range for " + std::to_string(num) + " rows" : " does not ascend"));
  return k;
}

void rowsToDenseKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  Tensor& dense = allocOutput(n, out, 0);
  const size_t k = checkedRows(n, in[0], n.i("num_rows"));
  const size_t row_bytes = static_cast<size_t>(in[1].shape()[1]) * dtypeSize(in[1].dtype());
  auto* d = static_cast<uint8_t*>(dense.raw());
  std::memset(d, 0, dense.bytes());
  const int64_t* r = in[0].data<int64_t>();
  const auto* v = static_cast<const uint8_t*>(in[1].raw());
  for (size_t j = 0; j < k; ++j) std::memcpy(d + static_cast<size_t>(r[j]) * row_bytes, v + j * row_bytes, row_bytes);
}

template <typename T>
void sgdRows(const Tensor& p, const Tensor& rows, size_t k, const Tensor& values, Tensor& p_out, double lr,
             double grad_scale) {
  const int64_t dim = p.shape()[1];
  const T neg_lr = static_cast<T>(-lr), scale = static_cast<T>(grad_scale);
  const int64_t* r = rows.data<int64_t>();
  const T* pp = p.data<T>();
  const T* gp = values.data<T>();
  T* po = p_out.data<T>();
  cpu::parallelFor(static_cast<int64_t>(k), std::max<int64_t>(1, 16384 / std::max<int64_t>(dim, 1)),
                   [&](int64_t b, int64_t e) {
                     for (int64_t j = b; j < e; ++j) {
                       const int64_t at = r[j] * dim;
                       for (int64_t d = 0; d < dim; ++d) po[at + d] = pp[at + d] + neg_lr * (gp[j * dim + d] * scale);
                     }
                   });
}

void sgdUpdateRowsKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  const Tensor& p = in[3];
  Tensor& p_out = allocOutput(n, out, 0);
  // Bound to the parameter's own buffer (the executor donates it), the
  // other rows are already right; else they are copied first.
  if (p_out.raw() != p.raw()) std::memcpy(p_out.raw(), p.raw(), p.bytes());
  const double lr = in[0].at(0), scale = in[2].at(0);
  if (n.i("skip_nonfinite") && !std::isfinite(scale)) return;  // amp's overflow: the step is skipped
  const size_t k = checkedRows(n, in[4], p.shape()[0]);
  cpu::dispatchFloat(p.dtype(), [&](auto t) {
    using T = decltype(t);
    // A non-finite scale (clipping after a NaN or infinite norm) makes the
    // dense update's 0 x scale NaN on every row: so here too.
    sgdRows<T>(p, in[4], k, in[5], p_out, lr, scale);
    if (!std::isfinite(static_cast<T>(scale))) {
      const int64_t dim = p.shape()[1];
      const int64_t* listed = in[4].data<int64_t>();
      const T step = static_cast<T>(-lr) * (T(0) * static_cast<T>(scale));
      T* po = p_out.data<T>();
      for (int64_t r = 0, j = 0; r < p.shape()[0]; ++r) {
        if (j < static_cast<int64_t>(k) && listed[j] == r) {
          ++j;
          continue;
        }
        for (int64_t d = 0; d < dim; ++d) po[r * dim + d] = po[r * dim + d] + step;
      }
    }
  });
}

bool f32OrF64(const Node& n, size_t input) {
  const DType t = n.input(input)->dtype();
  return t == DType::F32 || t == DType::F64;
}

}  // namespace

void registerCpuRowSparseKernels(KernelRegistry& r) {
  r.add({"embedding_backward_rows", "cpu", "cpu.embedding_backward_rows", 0,
         [](const Node& n) { return f32OrF64(n, 0); }, embeddingBackwardRowsKernel});
  r.add({"rows_to_dense", "cpu", "cpu.rows_to_dense", 0, nullptr, rowsToDenseKernel});
  // In place: each listed row of p is read before the same row of p' is written.
  r.add({"sgd_update_rows", "cpu", "cpu.sgd_update_rows", 0, [](const Node& n) { return f32OrF64(n, 3); },
         sgdUpdateRowsKernel, false, /*updates_in_place=*/true});
}

}  // namespace kiln
