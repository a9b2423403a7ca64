// CPU kernels of conv2d's backward ops (core/ops/nn_grad.cpp):
//   conv2d_input_backward(g, weight) {input_shape, ...}  -> dL/dx
//   conv2d_weight_backward(g, x) {weight_shape, ...}     -> dL/dweight
//
// "onednn" (f32, and bf16 natively): oneDNN's convolution backward-data and
// backward-weights primitives, cached per shape/attribute/dtype combination
// and thread count like the forward (kernels_conv.cpp): plain NCHW/OIHW
// buffers are reordered into the layouts the primitive prefers and the
// result back on every call, in a per-thread workspace. The predicate builds
// the primitive, so a config oneDNN rejects falls through. amp's bf16
// gradients are computed from the bf16 tensors directly (f32 accumulation
// inside oneDNN), 1x1 convolutions included.
// Measured on one shared AVX2 core (batch 4, ms, oneDNN vs im2col+GEMM;
// input grad / weight grad): 3x3 64ch@56 44/40 vs 58/52, 3x3 128ch@28 29/35
// vs 35/35, 3x3 512ch@7 44/58 vs 65/39, depthwise 3x3 64ch@56 4.1/0.8 vs
// 24/27, 7x7/2 stem 73/60 vs 82/101; but 1x1 convs lose to the GEMM path
// (64->256@56 49/30 vs 23/21, 256->512/2@14 3.5/3.7 vs 2.5/0.9), so
// ungrouped 1x1 convolutions stay on blas on CPUs without AVX-512.
//
// "blas" (f32/f64, f16/bf16 in f32): the reference, and what the
// finite-difference tests (f64) exercise. Per image and group, with
// col = im2col(x) ([cg*kh*kw, oh*ow]):
//   dx:      col = W_g^T * g_g, then col2im adds every column entry back to
//            the input pixel it was read from (zero-padding reads vanish);
//   dweight: dW_g += g_g * col^T, summed over the batch.
// A 1x1, stride-1, unpadded convolution skips im2col/col2im.
#include <omp.h>
#include <dnnl.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cpu/build_once_cache.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/conv_layout.h"
#include "backend/cpu/cpu_loops.h"
#include "backend/cpu/dnnl_common.h"
#include "backend/cpu/float_kernel.h"
#include "core/ops/op_helpers.h"

namespace kiln::cpu {
namespace {

/// Convolution geometry of a backward node (x, weight and g shapes).
struct ConvGeom {
  int64_t n, c, h, w;     // input
  int64_t o, cg, kh, kw;  // weight (cg = input channels per group)
  int64_t groups;
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t oh, ow;     // output (the gradient g)
  bool nhwc = false;  // channels_last: activations [N, H, W, C]
};

ConvGeom convGeom(const Node& n) {
  const bool weight_grad = n.is(Op::conv2d_weight_backward);
  const bool nhwc = channelsLast(n);
  auto nchw = [nhwc](const Shape& s) { return nhwc ? nchwFromNhwc(s) : s; };
  const Shape x = nchw(weight_grad ? n.input(1)->shape() : n.is("input_shape"));
  const Shape wt = weight_grad ? n.is("weight_shape") : n.input(1)->shape();
  const Shape g = nchw(n.input(0)->shape());
  auto stride = pair(n, "stride"), pad = pair(n, "padding"), dil = pair(n, "dilation");
  ConvGeom c;
  c.n = x[0], c.c = x[1], c.h = x[2], c.w = x[3];
  c.o = wt[0], c.cg = wt[1], c.kh = wt[2], c.kw = wt[3];
  c.groups = n.i("groups");
  c.sh = stride[0], c.sw = stride[1], c.ph = pad[0], c.pw = pad[1], c.dh = dil[0], c.dw = dil[1];
  c.oh = g[2], c.ow = g[3];
  c.nhwc = nhwc;
  return c;
}

// ---- im2col / col2im + GEMM --------------------------------------------------

/// Row-major c[m,p] = a^T * b + beta * c, with a [k,m] and b [k,p].
inline void gemmTransA(int64_t m, int64_t p, int64_t k, const float* a, const float* b, float* c, float beta) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(p), static_cast<int>(k),
              1.0f, a, static_cast<int>(m), b, static_cast<int>(p), beta, c, static_cast<int>(p));
}
inline void gemmTransA(int64_t m, int64_t p, int64_t k, const double* a, const double* b, double* c, double beta) {
  cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(p), static_cast<int>(k),
              1.0, a, static_cast<int>(m), b, static_cast<int>(p), beta, c, static_cast<int>(p));
}

/// col[(c*kh + i)*kw + j][oy*ow + ox] = x[c][oy*sh - ph + i*dh][ox*sw - pw + j*dw] (0 outside).
template <typename T>
void im2col(const ConvGeom& g, const T* x, T* col) {
  const int64_t rows = g.cg * g.kh * g.kw, len = g.oh * g.ow;
#pragma omp parallel for if (rows * len > kOmpMinWork)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t c = r / (g.kh * g.kw), i = (r / g.kw) % g.kh, j = r % g.kw;
    const T* plane = x + c * g.h * g.w;
    T* dst = col + r * len;
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      const int64_t iy = oy * g.sh - g.ph + i * g.dh;
      T* row = dst + oy * g.ow;
      if (iy < 0 || iy >= g.h) {
        std::fill(row, row + g.ow, T(0));
        continue;
      }
      const T* src = plane + iy * g.w;
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const int64_t ix = ox * g.sw - g.pw + j * g.dw;
        row[ox] = ix >= 0 && ix < g.w ? src[ix] : T(0);
      }
    }
  }
}

/// The adjoint of im2col: x[c][iy][ix] += col[...] for every entry im2col
/// read from inside the input. `x` must be zeroed. Channels are independent
/// (their rows write only their own plane), so they run in parallel.
template <typename T>
void col2im(const ConvGeom& g, const T* col, T* x) {
  const int64_t len = g.oh * g.ow;
#pragma omp parallel for if (g.cg * g.kh * g.kw * len > kOmpMinWork)
  for (int64_t c = 0; c < g.cg; ++c) {
    T* plane = x + c * g.h * g.w;
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        const T* src = col + ((c * g.kh + i) * g.kw + j) * len;
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          const int64_t iy = oy * g.sh - g.ph + i * g.dh;
          if (iy < 0 || iy >= g.h) continue;
          T* row = plane + iy * g.w;
          const T* s = src + oy * g.ow;
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            const int64_t ix = ox * g.sw - g.pw + j * g.dw;
            if (ix >= 0 && ix < g.w) row[ix] += s[ox];
          }
        }
      }
  }
}

bool isDirect(const ConvGeom& g) {
  return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
}

template <typename T>
void inputBackwardGemmImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const ConvGeom g = convGeom(n);
  Tensor& dxt = allocAs(n, out, 0, in[0].dtype());
  const T* go = in[0].data<T>();
  const T* wt = in[1].data<T>();
  T* dx = dxt.data<T>();
  std::fill(dx, dx + dxt.numel(), T(0));
  const int64_t og = g.o / g.groups, k = g.cg * g.kh * g.kw, len = g.oh * g.ow;
  if (dxt.numel() == 0 || k == 0 || len == 0 || og == 0) return;
  const bool direct = isDirect(g);
  std::vector<T> col(direct ? 0 : static_cast<size_t>(k * len));
  for (int64_t i = 0; i < g.n; ++i)
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      T* dst = dx + (i * g.c + grp * g.cg) * g.h * g.w;
      // [k, len] = W_g^T [k, og] * g_g [og, len]
      gemmTransA(k, len, og, wt + grp * og * k, go + (i * g.o + grp * og) * len, direct ? dst : col.data(), T(0));
      if (!direct) col2im(g, col.data(), dst);
    }
}

template <typename T>
void weightBackwardGemmImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const ConvGeom g = convGeom(n);
  Tensor& dwt = allocAs(n, out, 0, in[0].dtype());
  const T* go = in[0].data<T>();
  const T* x = in[1].data<T>();
  T* dw = dwt.data<T>();
  std::fill(dw, dw + dwt.numel(), T(0));
  const int64_t og = g.o / g.groups, k = g.cg * g.kh * g.kw, len = g.oh * g.ow;
  if (dwt.numel() == 0 || len == 0) return;
  const bool direct = isDirect(g);
  std::vector<T> col(direct ? 0 : static_cast<size_t>(k * len));
  for (int64_t i = 0; i < g.n; ++i)
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const T* src = x + (i * g.c + grp * g.cg) * g.h * g.w;
      if (!direct) im2col(g, src, col.data());
      // dW_g [og, k] += g_g [og, len] * col^T [len, k]
      gemm(true, og, k, len, go + (i * g.o + grp * og) * len, direct ? src : col.data(), dw + grp * og * k, T(1));
    }
}

void inputBackwardGemmKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { inputBackwardGemmImpl<decltype(t)>(n, in, out); });
}
void weightBackwardGemmKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { weightBackwardGemmImpl<decltype(t)>(n, in, out); });
}

// ---- oneDNN ------------------------------------------------------------------

using dnnl::memory;
using tag = memory::format_tag;

/// Plain (user) descriptors and the oneDNN convolution parameters of `g`.
struct ConvDescs {
  memory::desc src, wei, dst;
  memory::dims strides, dil, pad_l, pad_r;
};

ConvDescs convDescs(const ConvGeom& g, bool any, memory::data_type dt) {
  memory::dims src{g.n, g.c, g.h, g.w}, dst{g.n, g.o, g.oh, g.ow};
  memory::dims wei =
      g.groups == 1 ? memory::dims{g.o, g.cg, g.kh, g.kw} : memory::dims{g.groups, g.o / g.groups, g.cg, g.kh, g.kw};
  ConvDescs d;
  // channels_last activations are NHWC for the primitive too: oneDNN runs
  // its nxc implementations on them in place, with no reorder either way.
  const tag act = g.nhwc ? tag::nhwc : any ? tag::any : tag::nchw;
  d.src = memory::desc(src, dt, act);
  d.dst = memory::desc(dst, dt, act);
  d.wei = memory::desc(wei, dt, any ? tag::any : g.groups == 1 ? tag::oihw : tag::goihw);
  // oneDNN's dilation counts the gaps (0 = dense). The right padding is what
  // the last window actually reaches (PyTorch's mkldnn path does the same):
  // with floor-rounded output sizes the symmetric padding would claim input
  // rows no window reads.
  d.strides = {g.sh, g.sw};
  d.dil = {g.dh - 1, g.dw - 1};
  d.pad_l = {g.ph, g.pw};
  d.pad_r = {(g.oh - 1) * g.sh + (g.kh - 1) * g.dh + 1 - g.h - g.ph,
             (g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1 - g.w - g.pw};
  return d;
}

/// The forward primitive_desc oneDNN wants as a hint for the backward ones.
dnnl::convolution_forward::primitive_desc forwardHint(const ConvDescs& a) {
  dnnl::convolution_forward::desc fwd(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, a.src,
                                      a.wei, a.dst, a.strides, a.dil, a.pad_l, a.pad_r);
  return dnnl::convolution_forward::primitive_desc(fwd, dnnlEngine());
}

/// A reorder from `from` to `to`, or none when the layouts agree.
struct MaybeReorder {
  bool needed = false;
  dnnl::reorder r;
  void build(const memory::desc& from, const memory::desc& to) {
    if (from == to) return;
    needed = true;
    r = dnnl::reorder(dnnl::reorder::primitive_desc(dnnlEngine(), from, dnnlEngine(), to));
  }
};

/// One built backward primitive: `in0`/`in1` are the two inputs (diff_dst
/// plus weights or src) and `res` the result, each with its user layout, the
/// primitive's layout and the reorder between them.
struct DnnlConvBackward {
  dnnl::primitive prim;
  memory::desc scratch;
  int arg0, arg1, arg_res;
  memory::desc user0, user1, user_res, prim0, prim1, prim_res;
  MaybeReorder r0, r1, r_res;
};

std::unique_ptr<DnnlConvBackward> buildBackward(const ConvGeom& g, bool weights, memory::data_type dt) {
  const ConvDescs user = convDescs(g, false, dt), any = convDescs(g, true, dt);
  auto hint = forwardHint(any);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  auto b = std::make_unique<DnnlConvBackward>();
  b->user0 = user.dst;
  if (weights) {
    dnnl::convolution_backward_weights::desc d(dnnl::algorithm::convolution_direct, any.src, any.wei, any.dst,
                                               any.strides, any.dil, any.pad_l, any.pad_r);
    dnnl::convolution_backward_weights::primitive_desc pd(d, attr, dnnlEngine(), hint);
    b->prim = dnnl::convolution_backward_weights(pd);
    b->scratch = pd.scratchpad_desc();
    b->arg0 = DNNL_ARG_DIFF_DST, b->arg1 = DNNL_ARG_SRC, b->arg_res = DNNL_ARG_DIFF_WEIGHTS;
    b->user1 = user.src, b->user_res = user.wei;
    b->prim0 = pd.diff_dst_desc(), b->prim1 = pd.src_desc(), b->prim_res = pd.diff_weights_desc();
  } else {
    dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, any.src, any.wei, any.dst, any.strides,
                                            any.dil, any.pad_l, any.pad_r);
    dnnl::convolution_backward_data::primitive_desc pd(d, attr, dnnlEngine(), hint);
    b->prim = dnnl::convolution_backward_data(pd);
    b->scratch = pd.scratchpad_desc();
    b->arg0 = DNNL_ARG_DIFF_DST, b->arg1 = DNNL_ARG_WEIGHTS, b->arg_res = DNNL_ARG_DIFF_SRC;
    b->user1 = user.wei, b->user_res = user.src;
    b->prim0 = pd.diff_dst_desc(), b->prim1 = pd.weights_desc(), b->prim_res = pd.diff_src_desc();
  }
  b->r0.build(b->user0, b->prim0);
  b->r1.build(b->user1, b->prim1);
  b->r_res.build(b->prim_res, b->user_res);
  return b;
}

/// The cached primitive for (`g`, which gradient), building it on first use;
/// nullptr when oneDNN has no implementation (remembered too). oneDNN bakes
/// the OpenMP thread count into a primitive, so it is part of the key.
const DnnlConvBackward* dnnlBackwardFor(const ConvGeom& g, bool weights, memory::data_type dt) {
  static BuildOnceCache<DnnlConvBackward> cache;
  std::string key = std::string(weights ? "w:" : "x:") + dnnlKeyPrefix() + std::to_string(static_cast<int>(dt)) + ':';
  for (int64_t v : {g.n, g.c, g.h, g.w, g.o, g.cg, g.kh, g.kw, g.groups, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.oh, g.ow,
                    int64_t{g.nhwc}})
    key += std::to_string(v) + ',';
  return cache.get(key, [&]() -> std::unique_ptr<DnnlConvBackward> {
    try {
      return buildBackward(g, weights, dt);
    } catch (const dnnl::error&) {
      return nullptr;
    }
  });
}

/// The one dtype oneDNN computes node `n` in (f32 or bf16: inputs and
/// output all of it); nullopt otherwise.
std::optional<memory::data_type> gradType(const Node& n) {
  const DType t = n.output()->dtype();
  if (t != DType::F32 && t != DType::BF16) return std::nullopt;
  for (Value* v : n.inputs())
    if (v->dtype() != t) return std::nullopt;
  return dnnlDataType(t);
}

bool dnnlSupports(const Node& n) {
  auto dt = gradType(n);
  if (!dt) return false;
  if (n.output()->type().numel() == 0 || n.input(0)->type().numel() == 0) return false;
  const ConvGeom g = convGeom(n);
  // Ungrouped f32 1x1 convolutions are plain GEMMs, which OpenBLAS runs on
  // the user's layout with no reorders: faster with AVX2 only (the timings
  // at the top), slower with AVX-512, where oneDNN's 1x1 backward kernels
  // win (ResNet-50 at batch 8, 224, Zen 4: the 36 1x1 convolutions'
  // backward 762 ms on blas, about 640 ms on oneDNN). bf16 ones stay in
  // oneDNN, which computes bf16 without converting.
  if (g.kh == 1 && g.kw == 1 && g.groups == 1 && *dt == memory::data_type::f32 && !cpuHasAvx512()) return false;
  return dnnlBackwardFor(g, n.is(Op::conv2d_weight_backward), *dt) != nullptr;
}

void dnnlBackwardKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  const bool weights = n.is(Op::conv2d_weight_backward);
  auto dt = gradType(n);
  const DnnlConvBackward* b = dt ? dnnlBackwardFor(convGeom(n), weights, *dt) : nullptr;
  if (!b) opFail(n, "oneDNN has no convolution backward for this configuration");
  Tensor& res = allocOutput(n, out, 0);
  auto& eng = dnnlEngine();
  dnnl::stream s(eng);
  // The reordered copies and the scratchpad share one per-thread workspace.
  DnnlWorkspace ws({b->r0.needed ? b->prim0.get_size() : 0, b->r1.needed ? b->prim1.get_size() : 0,
                    b->r_res.needed ? b->prim_res.get_size() : 0, b->scratch.get_size()});
  // oneDNN never writes through its inputs; the casts only satisfy its API.
  memory user0(b->user0, eng, const_cast<void*>(in[0].raw()));
  memory user1(b->user1, eng, const_cast<void*>(in[1].raw()));
  memory user_res(b->user_res, eng, res.raw());
  memory m0 = user0, m1 = user1, mres = user_res;
  if (b->r0.needed) {
    m0 = memory(b->prim0, eng, ws.part(0));
    b->r0.r.execute(s, user0, m0);
  }
  if (b->r1.needed) {
    m1 = memory(b->prim1, eng, ws.part(1));
    b->r1.r.execute(s, user1, m1);
  }
  if (b->r_res.needed) mres = memory(b->prim_res, eng, ws.part(2));
  memory scratch(b->scratch, eng, ws.part(3));
  b->prim.execute(s, {{b->arg0, m0}, {b->arg1, m1}, {b->arg_res, mres}, {DNNL_ARG_SCRATCHPAD, scratch}});
  if (b->r_res.needed) b->r_res.r.execute(s, mres, user_res);
  s.wait();
}

}  // namespace

void registerCpuConvGradKernels(KernelRegistry& r) {
  for (const char* op : {"conv2d_input_backward", "conv2d_weight_backward"}) {
    const std::string name(op);
    // oneDNN splits its work by the thread count: never beside other nodes.
    KernelDef dnnl{name, "onednn", "onednn." + name, 30, dnnlSupports, dnnlBackwardKernel};
    dnnl.runs_beside_others = false;
    r.add(std::move(dnnl));
    // The reference loops read NCHW: channels_last nodes run on transposed copies.
    r.add({name, "blas", "blas." + name, 20, nullptr,
           name == "conv2d_input_backward" ? viaNchw<viaComputeType<inputBackwardGemmKernel>>
                                           : viaNchw<viaComputeType<weightBackwardGemmKernel>>});
  }
}

}  // namespace kiln::cpu
