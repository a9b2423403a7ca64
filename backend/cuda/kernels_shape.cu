// CUDA kernels of the layout ops (core/ops/shape.cpp, core/ops/shape_grad.cpp):
//   reshape                      an alias (output_views_input0: no work)
//   permute expand slice select flip split
//                                one strided copy each: output index ->
//                                input offset (by element size, any dtype);
//                                a transpose of the innermost dim runs in
//                                shared-memory tiles (coalesced both ways)
//   cat                          a strided copy per input (converting when
//                                the input's dtype is not the promoted one)
//   roll repeat pad              a per-dim coordinate map (shift modulo the
//   slice_backward select_backward  size, repeat, padding modes, the inverse
//                                of a slice or select with 0 outside)
//   pad_backward                 per input element, the sum of the gradient
//                                at every position F.pad copied it to
// Semantics are the CPU reference's (backend/cpu/kernels_shape*.cpp).
// pad_backward sums per element, axis by axis as the CPU does, so results
// match it bit for bit. The index ops and cumsum are in kernels_index.cu.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_dtype.cuh"
#include "backend/cuda/cuda_kernel.h"
#include "backend/cuda/shape_common.cuh"
#include "core/ops/op_helpers.h"

namespace kiln::cuda {
namespace {

using namespace shape;

// ---- strided copy: dst[walk index] = src[walk index], both strided ------------

struct CopyGeometry {
  int rank = 0;
  int64_t size[kMaxDims] = {};
  int64_t dst[kMaxDims] = {};
  int64_t src[kMaxDims] = {};
};

template <class I>
__device__ __forceinline__ void copyOffsets(const CopyGeometry& g, I i, int64_t& od, int64_t& os) {
  od = 0;
  os = 0;
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {
    if (d >= g.rank) continue;
    const I sz = static_cast<I>(g.size[d]);
    const int64_t c = static_cast<int64_t>(i % sz);
    i /= sz;
    od += c * g.dst[d];
    os += c * g.src[d];
  }
}

template <class E>
__global__ void __launch_bounds__(kThreads) stridedCopyKernel(E* dst, const E* src, CopyGeometry g, int64_t n) {
  const bool narrow = n <= INT32_MAX;
  for (int64_t i = firstIndex(); i < n; i += gridStride()) {
    int64_t od, os;
    if (narrow)
      copyOffsets<uint32_t>(g, static_cast<uint32_t>(i), od, os);
    else
      copyOffsets<uint64_t>(g, static_cast<uint64_t>(i), od, os);
    dst[od] = src[os];
  }
}

constexpr int kTile = 32, kTileRows = 8;

/// A copy whose source walks dim q contiguously while the destination walks
/// its last dim l contiguously; the other dims are batches.
struct TransposeGeometry {
  int batch_rank = 0;
  int64_t batch_size[kMaxDims] = {};
  int64_t batch_src[kMaxDims] = {}, batch_dst[kMaxDims] = {};
  int64_t q_size = 0, l_size = 0;  ///< the tiled dims
  int64_t q_dst = 0, l_src = 0;    ///< their strides on the side that does not walk them contiguously
  int64_t batches = 1;
};

/// 32 x 32 tiles staged through shared memory: reads run along q (contiguous
/// in the source), writes along l (contiguous in the destination), so both
/// are coalesced where a plain gather would read with a stride.
template <class E>
__global__ void __launch_bounds__(kTile* kTileRows) transposeKernel(E* dst, const E* src, TransposeGeometry g) {
  __shared__ E tile[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t l0 = static_cast<int64_t>(blockIdx.x) * kTile, q0 = static_cast<int64_t>(blockIdx.y) * kTile;
  for (int64_t b = blockIdx.z; b < g.batches; b += gridDim.z) {
    int64_t rem = b, os = 0, od = 0;
    for (int d = g.batch_rank - 1; d >= 0; --d) {
      const int64_t c = rem % g.batch_size[d];
      rem /= g.batch_size[d];
      os += c * g.batch_src[d];
      od += c * g.batch_dst[d];
    }
    for (int j = ty; j < kTile; j += kTileRows) {
      const int64_t l = l0 + j, q = q0 + tx;
      if (l < g.l_size && q < g.q_size) tile[j][tx] = src[os + q + l * g.l_src];
    }
    __syncthreads();
    for (int j = ty; j < kTile; j += kTileRows) {
      const int64_t q = q0 + j, l = l0 + tx;
      if (l < g.l_size && q < g.q_size) dst[od + q * g.q_dst + l] = tile[tx][j];
    }
    __syncthreads();
  }
}

/// The tiled path of stridedCopy (coalesced dims sz with destination and
/// source strides sd, ss), when the destination's last dim is contiguous,
/// the source's is not, and some other dim is contiguous in the source
/// (x.T, permutes that move the innermost dim). False: not such a copy.
bool tiledTranspose(void* dst, const void* src, const std::vector<int64_t>& sz, const std::vector<int64_t>& sd,
                    const std::vector<int64_t>& ss, size_t es, CudaContext& ctx) {
  const auto r = static_cast<int>(sz.size());
  if (r < 2 || sd[r - 1] != 1 || ss[r - 1] == 1) return false;
  int q = -1;
  for (int d = 0; d < r - 1; ++d)
    if (ss[d] == 1) q = d;
  if (q < 0) return false;
  // Thin tiles waste most of their threads: the plain gather does as well there.
  if (sz[q] < kTile / 2 || sz[r - 1] < kTile / 2 || (sz[q] + kTile - 1) / kTile > 65535) return false;
  TransposeGeometry g;
  g.q_size = sz[q];
  g.l_size = sz[r - 1];
  g.q_dst = sd[q];
  g.l_src = ss[r - 1];
  for (int d = 0; d < r - 1; ++d) {
    if (d == q) continue;
    g.batch_size[g.batch_rank] = sz[d];
    g.batch_src[g.batch_rank] = ss[d];
    g.batch_dst[g.batch_rank] = sd[d];
    ++g.batch_rank;
    g.batches *= sz[d];
  }
  const dim3 grid(static_cast<unsigned>((g.l_size + kTile - 1) / kTile),
                  static_cast<unsigned>((g.q_size + kTile - 1) / kTile),
                  static_cast<unsigned>(std::min<int64_t>(g.batches, 65535)));
  const dim3 block(kTile, kTileRows);
  dispatchBySize(es, ctx.node, [&](auto tag) {
    using E = decltype(tag);
    transposeKernel<E><<<grid, block, 0, ctx.stream>>>(static_cast<E*>(dst), static_cast<const E*>(src), g);
  });
  checkLaunch("cuda.transpose", ctx.node);
  return true;
}

/// Copy the `shape` walk: element idx goes from src[sum idx*src_st] to
/// dst[sum idx*dst_st] (pointers already at their offsets; strides in
/// elements, 0 to broadcast, negative to flip). Dims of size 1 are dropped
/// and dims both sides walk contiguously merged; a plain run is a memcpy, a
/// transpose of the innermost dim goes through shared-memory tiles.
void stridedCopy(void* dst, const Shape& dst_st, const void* src, const Shape& src_st, const Shape& shape, size_t es,
                 CudaContext& ctx) {
  const int64_t n = numelOf(shape);
  if (n == 0) return;
  std::vector<int64_t> sz, sd, ss;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!sz.empty() && sd.back() == dst_st[d] * shape[d] && ss.back() == src_st[d] * shape[d]) {
      sz.back() *= shape[d];
      sd.back() = dst_st[d];
      ss.back() = src_st[d];
    } else {
      sz.push_back(shape[d]);
      sd.push_back(dst_st[d]);
      ss.push_back(src_st[d]);
    }
  }
  if (sz.empty()) sz = {1}, sd = {1}, ss = {1};
  if (sz.size() == 1 && sd[0] == 1 && ss[0] == 1) {
    check(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * es, cudaMemcpyDeviceToDevice, ctx.stream), "copy",
          ctx.node);
    return;
  }
  if (sz.size() > static_cast<size_t>(kMaxDims))
    fail((ctx.node ? ctx.node->describe() + ": " : std::string()) + "a copy over more than " +
         std::to_string(kMaxDims) + " non-mergeable dims is not supported by the CUDA kernels");
  if (tiledTranspose(dst, src, sz, sd, ss, es, ctx)) return;
  CopyGeometry g;
  g.rank = static_cast<int>(sz.size());
  for (int d = 0; d < g.rank; ++d) g.size[d] = sz[d], g.dst[d] = sd[d], g.src[d] = ss[d];
  dispatchBySize(es, ctx.node, [&](auto tag) {
    using E = decltype(tag);
    stridedCopyKernel<E>
        <<<gridFor(n, kThreads), kThreads, 0, ctx.stream>>>(static_cast<E*>(dst), static_cast<const E*>(src), g, n);
  });
  checkLaunch("cuda.strided_copy", ctx.node);
}

/// out (contiguous) = in read at in_offset + sum idx[d] * in_strides[d].
void gatherStrided(const DeviceTensor& out, const DeviceTensor& in, int64_t in_offset, const Shape& in_strides,
                   CudaContext& ctx) {
  const size_t es = dtypeSize(out.dtype());
  stridedCopy(out.data, contiguousStrides(out.shape()), bytes(in) + in_offset * static_cast<int64_t>(es), in_strides,
              out.shape(), es, ctx);
}

/// Reshape reuses the input buffer (output_views_input0): nothing to do.
void reshapeKernel(const Node&, Ins, Outs, CudaContext&) {}

void permuteKernel(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const Shape contig = contiguousStrides(in[0].shape());
  Shape st;
  for (int64_t d : n.is("dims")) st.push_back(contig[normalizeAxis(d, static_cast<int64_t>(in[0].shape().size()))]);
  gatherStrided(out[0], in[0], 0, st, ctx);
}

Shape broadcastStrides(const Shape& in, const Shape& out) {
  const Shape contig = contiguousStrides(in);
  Shape st(out.size(), 0);
  const size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) st[off + i] = in[i] == 1 ? 0 : contig[i];
  return st;
}

void expandKernel(const Node&, Ins in, Outs out, CudaContext& ctx) {
  gatherStrided(out[0], in[0], 0, broadcastStrides(in[0].shape(), out[0].shape()), ctx);
}

void sliceKernel(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const Shape& xs = in[0].shape();
  const int64_t axis = normalizeAxis(n.i("dim"), static_cast<int64_t>(xs.size()));
  const SliceBounds b = normalizeSlice(xs[axis], n.i("start"), n.i("end"), n.i("step"));
  Shape st = contiguousStrides(xs);
  const int64_t offset = b.length > 0 ? b.start * st[axis] : 0;
  st[axis] *= b.step;
  gatherStrided(out[0], in[0], offset, st, ctx);
}

/// `index` normalized against `size` (negative counts from the end); out of range fails.
int64_t selectIndex(const Node& n, int64_t size) {
  int64_t idx = n.i("index");
  if (idx < -size || idx >= size)
    opFail(n, "index " + std::to_string(idx) + " is out of range for size " + std::to_string(size));
  return idx < 0 ? idx + size : idx;
}

void selectKernel(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const Shape& xs = in[0].shape();
  const int64_t axis = normalizeAxis(n.i("dim"), static_cast<int64_t>(xs.size()));
  const int64_t idx = selectIndex(n, xs[axis]);
  Shape st = contiguousStrides(xs);
  const int64_t offset = idx * st[axis];
  st.erase(st.begin() + axis);
  gatherStrided(out[0], in[0], offset, st, ctx);
}

/// Flip walks the flipped dims backwards: start at their last element, negative stride.
void flipKernel(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const Shape& xs = in[0].shape();
  const auto rank = static_cast<int64_t>(xs.size());
  Shape st = contiguousStrides(xs);
  std::vector<bool> flipped(static_cast<size_t>(std::max<int64_t>(rank, 1)));
  int64_t offset = 0;
  for (int64_t d : n.is("dims")) {
    const int64_t a = normalizeAxis(d, rank);
    if (flipped[a]) opFail(n, "dim " + std::to_string(d) + " appears more than once in dims");
    flipped[a] = true;
    if (rank == 0 || xs[a] == 0) continue;
    offset += (xs[a] - 1) * st[a];
    st[a] = -st[a];
  }
  gatherStrided(out[0], in[0], offset, st, ctx);
}

void splitKernel(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const Shape& xs = in[0].shape();
  const int64_t axis = normalizeAxis(n.i("dim"), static_cast<int64_t>(xs.size()));
  const Shape st = contiguousStrides(xs);
  int64_t start = 0;
  for (const DeviceTensor& o : out) {
    gatherStrided(o, in[0], start * st[axis], st, ctx);
    start += o.shape()[axis];
  }
}

/// dst[k * dst_row + c] = convert(src[k * row + c]) for a source of another dtype.
template <class To>
__global__ void __launch_bounds__(kThreads)
    convertRowsKernel(To* dst, int64_t dst_row, const void* src, DType from, int64_t row, int64_t n) {
  for (int64_t t = firstIndex(); t < n; t += gridStride()) {
    const int64_t k = t / row, c = t % row;
    dst[k * dst_row + c] = loadAs<To>(src, from, t);
  }
}

/// Each input lands in its column range of the output viewed as
/// [outer, total * inner]; inputs of another dtype convert on the way.
void catKernel(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const DeviceTensor& o = out[0];
  const int64_t axis = normalizeAxis(n.i("dim"), static_cast<int64_t>(o.shape().size()));
  const AxisSplit os = splitAt(o.shape(), axis);
  const size_t es = dtypeSize(o.dtype());
  const int64_t out_row = os.size * os.inner;
  int64_t col = 0;
  for (const DeviceTensor& t : in) {
    const int64_t row = splitAt(t.shape(), axis).size * os.inner;
    if (row > 0 && os.outer > 0) {
      if (t.dtype() == o.dtype()) {
        stridedCopy(bytes(o) + col * static_cast<int64_t>(es), {out_row, 1}, t.data, {row, 1}, {os.outer, row}, es,
                    ctx);
      } else {
        const int64_t count = os.outer * row;
        dispatchAll(o.dtype(), "cat", [&](auto tag) {
          using To = decltype(tag);
          convertRowsKernel<To><<<gridFor(count, kThreads), kThreads, 0, ctx.stream>>>(
              static_cast<To*>(o.data) + col, out_row, t.data, t.dtype(), row, count);
        });
        checkLaunch("cuda.cat", ctx.node);
      }
    }
    col += row;
  }
}

// ---- coordinate-map copy: roll, repeat, pad, slice_backward, select_backward ---

/// How output coordinate o maps to an input coordinate j along one dim
/// (n = the input size there, a and b the mode's parameters); j < 0: fill.
enum MapMode : int {
  kIdentity,   ///< j = o
  kConstant,   ///< j = o - a inside [0, n), else fill (constant padding, crops too)
  kReflect,    ///< o - a reflected at the borders (reflect padding)
  kReplicate,  ///< o - a clamped to [0, n)
  kCircular,   ///< o - a modulo n
  kRoll,       ///< o - a modulo n, with 0 <= a < n
  kRepeat,     ///< o modulo n
  kSliceInv,   ///< (o - a) / b where o - a is a multiple of b below n * b, else fill
  kSelectInv,  ///< 0 where o == a, else fill
};

struct MapGeometry {
  int rank = 0;
  int64_t out_size[kMaxDims] = {};
  int64_t in_size[kMaxDims] = {};
  int64_t in_stride[kMaxDims] = {};
  int64_t a[kMaxDims] = {};
  int64_t b[kMaxDims] = {};
  int mode[kMaxDims] = {};
};

__device__ __forceinline__ int64_t mapCoord(int mode, int64_t o, int64_t n, int64_t a, int64_t b) {
  switch (mode) {
    case kIdentity:
      return o;
    case kConstant: {
      const int64_t j = o - a;
      return j >= 0 && j < n ? j : -1;
    }
    case kReflect: {
      const int64_t j = o - a;
      return j < 0 ? -j : (j >= n ? 2 * (n - 1) - j : j);
    }
    case kReplicate: {
      const int64_t j = o - a;
      return j < 0 ? 0 : (j >= n ? n - 1 : j);
    }
    case kCircular:
      return ((o - a) % n + n) % n;
    case kRoll: {
      const int64_t j = o - a;
      return j < 0 ? j + n : j;
    }
    case kRepeat:
      return o % n;
    case kSliceInv: {
      const int64_t j = o - a;
      if (j < 0 || j % b != 0 || j / b >= n) return -1;
      return j / b;
    }
    default:
      return o == a ? 0 : -1;  // kSelectInv
  }
}

template <class E>
__global__ void __launch_bounds__(kThreads) mapCopyKernel(E* dst, const E* src, MapGeometry g, E fill, int64_t n) {
  for (int64_t i = firstIndex(); i < n; i += gridStride()) {
    int64_t rem = i, off = 0;
    bool inside = true;
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d) {
      if (d >= g.rank) continue;
      const int64_t o = rem % g.out_size[d];
      rem /= g.out_size[d];
      const int64_t j = mapCoord(g.mode[d], o, g.in_size[d], g.a[d], g.b[d]);
      inside = inside && j >= 0;
      off += j * g.in_stride[d];
    }
    dst[i] = inside ? src[off] : fill;
  }
}

/// One dim of a coordinate map.
struct DimMap {
  int mode = kIdentity;
  int64_t in_size = 1, in_stride = 0, a = 0, b = 1;
};

/// out[idx] = in[sum map_d(idx[d]) * stride_d], or `fill_bits` (the fill
/// value's bytes) where some dim maps outside the input.
void mapCopy(const DeviceTensor& out, const void* src, const std::vector<DimMap>& dims, uint64_t fill_bits,
             CudaContext& ctx) {
  const int64_t n = out.numel();
  if (n == 0) return;
  if (dims.size() > static_cast<size_t>(kMaxDims))
    fail((ctx.node ? ctx.node->describe() + ": " : std::string()) + "more than " + std::to_string(kMaxDims) +
         " dims are not supported by the CUDA kernels");
  MapGeometry g;
  g.rank = static_cast<int>(dims.size());
  for (int d = 0; d < g.rank; ++d) {
    g.out_size[d] = out.shape()[d];
    g.in_size[d] = dims[d].in_size;
    g.in_stride[d] = dims[d].in_stride;
    g.a[d] = dims[d].a;
    g.b[d] = dims[d].b;
    g.mode[d] = dims[d].mode;
  }
  dispatchBySize(dtypeSize(out.dtype()), ctx.node, [&](auto tag) {
    using E = decltype(tag);
    E fill;
    std::memcpy(&fill, &fill_bits, sizeof(E));
    mapCopyKernel<E><<<gridFor(n, kThreads), kThreads, 0, ctx.stream>>>(static_cast<E*>(out.data),
                                                                        static_cast<const E*>(src), g, fill, n);
  });
  checkLaunch("cuda.map_copy", ctx.node);
}

/// roll with dims rolls each listed dim (shifts of a repeated dim add up);
/// without dims it rolls the flattened tensor.
void rollKernel(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const DeviceTensor& x = in[0];
  const Shape& xs = x.shape();
  const auto& shifts = n.is("shifts");
  const auto& dims_attr = n.is("dims");
  const int64_t count = x.numel();
  if (count == 0) return;
  if (dims_attr.empty()) {
    if (shifts.empty()) {
      check(cudaMemcpyAsync(out[0].data, x.data, x.bytes(), cudaMemcpyDeviceToDevice, ctx.stream), "roll copy",
            ctx.node);
      return;
    }
    DimMap m{kRoll, count, 1, ((shifts[0] % count) + count) % count, 1};
    DeviceTensor flat = out[0];
    flat.type.shape = {count};
    mapCopy(flat, x.data, {m}, 0, ctx);
    return;
  }
  const Shape st = contiguousStrides(xs);
  std::vector<DimMap> dims(xs.size());
  for (size_t d = 0; d < xs.size(); ++d) dims[d] = {kRoll, xs[d], st[d], 0, 1};
  for (size_t i = 0; i < dims_attr.size(); ++i) {
    const int64_t axis = normalizeAxis(dims_attr[i], static_cast<int64_t>(xs.size()));
    if (xs.empty()) continue;
    dims[axis].a = ((dims[axis].a + shifts[i] % xs[axis]) % xs[axis] + xs[axis]) % xs[axis];
  }
  mapCopy(out[0], x.data, dims, 0, ctx);
}

/// Tensor.repeat: output coordinate o along dim d reads input coordinate
/// o mod size (the input padded with leading 1s to the repeats' length).
void repeatKernel(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const Shape& xs0 = in[0].shape();
  const auto& reps = n.is("repeats");
  Shape xs(reps.size() - xs0.size(), 1);
  xs.insert(xs.end(), xs0.begin(), xs0.end());
  const Shape st = contiguousStrides(xs);
  std::vector<DimMap> dims(xs.size());
  for (size_t d = 0; d < xs.size(); ++d) dims[d] = {kRepeat, xs[d], st[d], 0, 1};
  mapCopy(out[0], in[0].data, dims, 0, ctx);
}

/// The checks of cpu padMap for one padded axis.
void checkPad(const Node& n, const std::string& mode, int64_t size, int64_t lo, int64_t hi) {
  if (mode == "constant") return;
  if (size == 0) opFail(n, mode + " padding needs a non-empty dimension");
  if (mode == "reflect" && (lo >= size || hi >= size))
    opFail(n, "reflect padding (" + std::to_string(lo) + ", " + std::to_string(hi) +
                  ") must be smaller than the dimension size " + std::to_string(size));
  if (mode == "circular" && (lo > size || hi > size))
    opFail(n, "circular padding (" + std::to_string(lo) + ", " + std::to_string(hi) +
                  ") must be at most the dimension size " + std::to_string(size));
}

int padMode(const std::string& mode) {
  if (mode == "reflect") return kReflect;
  if (mode == "replicate") return kReplicate;
  if (mode == "circular") return kCircular;
  return kConstant;
}

/// F.pad: pads run from the last dim backwards; each padded dim maps through its mode.
void padKernel(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const DeviceTensor& x = in[0];
  const Shape& xs = x.shape();
  if (xs.empty()) {
    check(cudaMemcpyAsync(out[0].data, x.data, x.bytes(), cudaMemcpyDeviceToDevice, ctx.stream), "pad copy", ctx.node);
    return;
  }
  const auto& pads = n.is("pads");
  const std::string& mode = n.s("mode");
  const auto rank = static_cast<int64_t>(xs.size());
  const Shape st = contiguousStrides(xs);
  std::vector<DimMap> dims(xs.size());
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t i = rank - 1 - d;
    const int64_t lo = 2 * i < static_cast<int64_t>(pads.size()) ? pads[2 * i] : 0;
    const int64_t hi = 2 * i + 1 < static_cast<int64_t>(pads.size()) ? pads[2 * i + 1] : 0;
    checkPad(n, mode, xs[d], lo, hi);
    dims[d] = {padMode(mode), xs[d], st[d], lo, 1};
  }
  uint64_t fill = 0;
  dispatchAll(out[0].dtype(), "pad", [&](auto tag) {
    using T = decltype(tag);
    const T v = conv<T>(n.f("value"));
    std::memcpy(&fill, &v, sizeof(T));
  });
  mapCopy(out[0], x.data, dims, fill, ctx);
}

/// Zeros with g at [start:end:step] along dim.
void sliceBackwardKernel(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const Shape& os = out[0].shape();
  const auto rank = static_cast<int64_t>(os.size());
  const int64_t axis = normalizeAxis(n.i("dim"), rank);
  const SliceBounds b = normalizeSlice(os[axis], n.i("start"), n.i("end"), n.i("step"));
  const Shape gst = contiguousStrides(in[0].shape());
  std::vector<DimMap> dims(os.size());
  for (int64_t d = 0; d < rank; ++d) dims[d] = {kIdentity, os[d], gst[d], 0, 1};
  dims[axis] = {kSliceInv, b.length, gst[axis], b.start, b.step};
  mapCopy(out[0], in[0].data, dims, 0, ctx);
}

/// Zeros with g at `index` along dim.
void selectBackwardKernel(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const Shape& os = out[0].shape();
  const auto rank = static_cast<int64_t>(os.size());
  const int64_t axis = normalizeAxis(n.i("dim"), rank);
  const int64_t idx = selectIndex(n, os[axis]);
  const Shape gst = contiguousStrides(in[0].shape());
  std::vector<DimMap> dims(os.size());
  for (int64_t d = 0; d < rank; ++d) {
    if (d == axis)
      dims[d] = {kSelectInv, 1, 0, idx, 1};
    else
      dims[d] = {kIdentity, os[d], gst[d < axis ? d : d - 1], 0, 1};
  }
  mapCopy(out[0], in[0].data, dims, 0, ctx);
}

// ---- pad_backward --------------------------------------------------------------

/// One padded axis of pad_backward, in the CPU's order (last dim first).
struct PadLevel {
  int axis = 0;
  int mode = kConstant;
  int64_t size = 0, lo = 0, len = 0;  ///< input size, low padding, padded size
};

struct PadGeometry {
  int rank = 0, levels = 0;
  int64_t size[kMaxDims] = {};      ///< output (unpadded) shape
  int64_t g_stride[kMaxDims] = {};  ///< the gradient's contiguous strides
  PadLevel level[kMaxDims];
};

/// The padded positions i (ascending) F.pad read input position j from, along one axis.
struct Sources {
  int64_t first = 0, step = 1, count = 0;
  int64_t point[3] = {};
  bool points = false;
  __device__ int64_t at(int64_t k) const { return points ? point[k] : first + k * step; }
};

__device__ __forceinline__ Sources sourcesOf(const PadLevel& L, int64_t j) {
  Sources s;
  switch (L.mode) {
    case kConstant: {
      const int64_t i = j + L.lo;
      if (i >= 0 && i < L.len) s.first = i, s.count = 1;
      break;
    }
    case kReplicate: {
      if (L.size == 1) {
        s.first = 0, s.count = L.len;
      } else if (j == 0) {  // every i with i - lo <= 0
        s.first = 0, s.count = L.lo < 0 ? 0 : (L.lo + 1 < L.len ? L.lo + 1 : L.len);
      } else if (j == L.size - 1) {  // every i with i - lo >= size - 1
        s.first = L.lo + L.size - 1 > 0 ? L.lo + L.size - 1 : 0;
        s.count = L.len > s.first ? L.len - s.first : 0;
      } else {
        const int64_t i = j + L.lo;
        if (i >= 0 && i < L.len) s.first = i, s.count = 1;
      }
      break;
    }
    case kCircular: {
      s.first = ((j + L.lo) % L.size + L.size) % L.size;
      s.step = L.size;
      s.count = s.first < L.len ? (L.len - 1 - s.first) / L.size + 1 : 0;
      break;
    }
    default: {  // reflect: i - lo is j, -j or 2 (size - 1) - j, ascending in that order
      s.points = true;
      const int64_t cand[3] = {L.lo - j, L.lo + j, L.lo + 2 * (L.size - 1) - j};
      for (int k = 0; k < 3; ++k) {
        const int64_t i = cand[k];
        if (i < 0 || i >= L.len || (s.count > 0 && s.point[s.count - 1] == i)) continue;
        if (mapCoord(kReflect, i, L.size, L.lo, 1) == j) s.point[s.count++] = i;
      }
      break;
    }
  }
  return s;
}

/// out[j] = the sum of g over every padded position F.pad copied j to: the
/// last padded axis summed first into its own accumulator, that sum then
/// summed over the next axis, and so on (the CPU's axis-by-axis passes,
/// each rounded to the compute type), in ascending positions.
template <class T>
__global__ void __launch_bounds__(kThreads) padBackwardKernel(T* out, const T* g, PadGeometry geo, int64_t n) {
  using C = Cmp<T>;
  for (int64_t t = firstIndex(); t < n; t += gridStride()) {
    int64_t coord[kMaxDims];
    int64_t rem = t;
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d) {
      if (d >= geo.rank) continue;
      coord[d] = rem % geo.size[d];
      rem /= geo.size[d];
    }
    // Offset of the unpadded dims; the padded ones come from their sources.
    int64_t base = 0;
    bool padded[kMaxDims] = {};
    for (int l = 0; l < geo.levels; ++l) padded[geo.level[l].axis] = true;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d)
      if (d < geo.rank && !padded[d]) base += coord[d] * geo.g_stride[d];
    Sources src[kMaxDims];
    bool empty = false;
    for (int l = 0; l < geo.levels; ++l) {
      src[l] = sourcesOf(geo.level[l], coord[geo.level[l].axis]);
      empty = empty || src[l].count == 0;
    }
    C result = C(0);
    if (geo.levels == 0) {
      result = C(ld(g[base]));
    } else if (!empty) {
      C acc[kMaxDims + 1] = {};
      int64_t k[kMaxDims] = {};
      while (true) {
        int64_t off = base;
        for (int l = 0; l < geo.levels; ++l) off += src[l].at(k[l]) * geo.g_stride[geo.level[l].axis];
        acc[0] += C(ld(g[off]));
        int l = 0;
        for (; l < geo.levels; ++l) {  // odometer: a finished level folds into the next
          if (++k[l] < src[l].count) break;
          acc[l + 1] += acc[l];
          acc[l] = C(0);
          k[l] = 0;
        }
        if (l == geo.levels) break;
      }
      result = acc[geo.levels];
    }
    out[t] = st<T>(result);
  }
}

void padBackwardKernelFn(const Node& n, Ins in, Outs out, CudaContext& ctx) {
  const DeviceTensor& o = out[0];
  const Shape& xs = o.shape();
  const auto& pads = n.is("pads");
  const std::string& mode = n.s("mode");
  const auto rank = static_cast<int64_t>(xs.size());
  PadGeometry geo;
  geo.rank = static_cast<int>(rank);
  const Shape gst = contiguousStrides(in[0].shape());
  for (int64_t d = 0; d < rank; ++d) geo.size[d] = xs[d], geo.g_stride[d] = gst[d];
  for (int64_t i = 0; 2 * i + 1 < static_cast<int64_t>(pads.size()); ++i) {
    const int64_t lo = pads[2 * i], hi = pads[2 * i + 1], axis = rank - 1 - i;
    if (lo == 0 && hi == 0) continue;
    checkPad(n, mode, xs[axis], lo, hi);
    PadLevel& L = geo.level[geo.levels++];
    L.axis = static_cast<int>(axis);
    L.mode = padMode(mode);
    L.size = xs[axis];
    L.lo = lo;
    L.len = xs[axis] + lo + hi;
  }
  const int64_t count = o.numel();
  if (count == 0) return;
  dispatchFloating(o.dtype(), "pad_backward", [&](auto tag) {
    using T = decltype(tag);
    padBackwardKernel<T><<<gridFor(count, kThreads), kThreads, 0, ctx.stream>>>(
        static_cast<T*>(o.data), static_cast<const T*>(in[0].data), geo, count);
  });
  checkLaunch("cuda.pad_backward", ctx.node);
}

}  // namespace

void registerCudaShapeKernels(CudaKernelRegistry& r) {
  CudaKernelDef reshape;
  reshape.op = "reshape";
  reshape.dialect = "cuda";
  reshape.name = "cuda.reshape";
  reshape.fn = reshapeKernel;
  reshape.output_views_input0 = true;
  CudaKernelDef detach = reshape;  // x itself (same shape): the same alias
  detach.op = "detach";
  detach.name = "cuda.detach";
  r.add(std::move(reshape));
  r.add(std::move(detach));

  r.add(ownCudaKernel("permute", permuteKernel, nullptr, ranksFit));
  r.add(ownCudaKernel("expand", expandKernel, nullptr, ranksFit));
  r.add(ownCudaKernel("slice", sliceKernel, nullptr, ranksFit));
  r.add(ownCudaKernel("select", selectKernel, nullptr, ranksFit));
  r.add(ownCudaKernel("flip", flipKernel, nullptr, ranksFit));
  r.add(ownCudaKernel("split", splitKernel, nullptr, ranksFit));
  r.add(ownCudaKernel("cat", catKernel));
  r.add(ownCudaKernel("roll", rollKernel, nullptr, ranksFit));
  r.add(ownCudaKernel("repeat", repeatKernel, nullptr, ranksFit));
  r.add(ownCudaKernel("pad", padKernel, nullptr, ranksFit));
  r.add(ownCudaKernel("slice_backward", sliceBackwardKernel, nullptr, ranksFit));
  r.add(ownCudaKernel("select_backward", selectBackwardKernel, nullptr, ranksFit));
  r.add(ownCudaKernel("pad_backward", padBackwardKernelFn, nullptr, ranksFit));
}

}  // namespace kiln::cuda
