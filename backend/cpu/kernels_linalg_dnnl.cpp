// oneDNN kernels for amp's bf16 GEMMs: `matmul`, `gemm` and `linear` with bf16
// operands run oneDNN's matmul on the bf16 data itself (f32 accumulation
// inside oneDNN) and write the node's output dtype directly; `linear`'s bias
// and ReLU run in the GEMM's epilogue. No f32 copy of an operand or of the
// result is made, which is what the f32 fallback (blas.*_lowp: convert,
// SGEMM, convert back) pays on every call. On CPUs with AVX512_BF16 or AMX
// oneDNN's brgemm kernels run at about twice the f32 GEMM rate.
//
// Shapes: a linear is one 2-D product ([M, K] x W[N, K]^T, W read through
// transposed strides). A matmul is one 2-D product when the right operand
// has no batch (the left one's batch folds into M), one 3-D batched product
// when both batches agree or one side is a single matrix; other broadcasts
// fall through to the next kernel. gemm's transposed operands are read
// through transposed strides (no copy). Primitives are built once per
// shape and thread count (oneDNN bakes the thread count in) and cached; the
// predicate builds them, so a shape oneDNN rejects falls through too.
#include <dnnl.hpp>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "backend/cpu/build_once_cache.h"
#include "backend/cpu/cpu_loops.h"
#include "backend/cpu/dnnl_common.h"
#include "backend/cpu/float_kernel.h"
#include "core/ops/op_helpers.h"

namespace kiln::cpu {
namespace {

using dnnl::memory;

/// One oneDNN matmul problem: src [B, m, k] x wei [B or 1, k, n] -> dst,
/// or the same without B (rank 2); either operand dense or transposed.
struct GemmProblem {
  memory::dims src, wei, dst;
  bool src_transposed = false;  ///< src is stored [.., k, m]
  bool wei_transposed = false;  ///< wei is stored [.., n, k] (linear's W)
  memory::data_type src_t, wei_t, dst_t, bias_t;
  bool bias = false;
  bool relu = false;

  std::string key() const {
    std::string k = dnnlKeyPrefix();
    for (const memory::dims* d : {&src, &wei, &dst}) {
      for (int64_t v : *d) k += std::to_string(v) + ',';
      k += ';';
    }
    for (auto t : {src_t, wei_t, dst_t, bias_t}) k += std::to_string(static_cast<int>(t)) + ',';
    return k + (src_transposed ? "T" : "N") + (wei_transposed ? "T" : "N") + (bias ? "b" : "") + (relu ? "r" : "");
  }
};

struct DnnlGemm {
  dnnl::matmul prim;
  memory::desc src, wei, dst, bias, scratch;
};

/// Row-major strides of `dims`.
memory::dims denseStrides(const memory::dims& dims) {
  memory::dims st(dims.size(), 1);
  for (size_t i = dims.size() - 1; i-- > 0;) st[i] = st[i + 1] * dims[i + 1];
  return st;
}

/// Strides of the logical matrices `dims` [.., r, c] stored as [.., c, r].
memory::dims transposedStrides(const memory::dims& dims) {
  memory::dims st = denseStrides(dims);
  const size_t r = dims.size();
  st[r - 2] = 1;
  st[r - 1] = dims[r - 2];
  return st;
}

std::unique_ptr<DnnlGemm> buildGemm(const GemmProblem& p) {
  auto g = std::make_unique<DnnlGemm>();
  g->src = memory::desc(p.src, p.src_t, p.src_transposed ? transposedStrides(p.src) : denseStrides(p.src));
  g->dst = memory::desc(p.dst, p.dst_t, denseStrides(p.dst));
  g->wei = memory::desc(p.wei, p.wei_t, p.wei_transposed ? transposedStrides(p.wei) : denseStrides(p.wei));
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (p.relu) {
    dnnl::post_ops po;
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    attr.set_post_ops(po);
  }
  std::optional<dnnl::matmul::desc> d;
  if (p.bias) {
    memory::dims bd(p.dst.size(), 1);
    bd.back() = p.dst.back();
    g->bias = memory::desc(bd, p.bias_t, denseStrides(bd));
    d.emplace(g->src, g->wei, g->bias, g->dst);
  } else {
    d.emplace(g->src, g->wei, g->dst);
  }
  dnnl::matmul::primitive_desc pd(*d, attr, dnnlEngine());
  g->prim = dnnl::matmul(pd);
  g->scratch = pd.scratchpad_desc();
  return g;
}

/// The cached primitive for `p`; nullptr when oneDNN has none (remembered).
const DnnlGemm* gemmFor(const GemmProblem& p) {
  static BuildOnceCache<DnnlGemm> cache;
  return cache.get(p.key(), [&]() -> std::unique_ptr<DnnlGemm> {
    try {
      return buildGemm(p);
    } catch (const dnnl::error&) {
      return nullptr;
    }
  });
}

bool allBf16Inputs(const Node& n, const Value* except = nullptr) {
  for (Value* v : n.inputs())
    if (v != except && v->dtype() != DType::BF16) return false;
  return true;
}

/// The linear's GEMM: with a residual epilogue its own bf16 result (the
/// residual, bf16 or f32, is added afterwards, as the separate add would).
std::optional<GemmProblem> linearProblem(const Node& n) {
  const Value* residual = linearResidual(n);
  if (!allBf16Inputs(n, residual) || (n.s("activation") != "none" && n.s("activation") != "relu"))
    return std::nullopt;
  if (residual && residual->dtype() != DType::BF16 && residual->dtype() != DType::F32) return std::nullopt;
  auto dst_t = residual ? std::optional(memory::data_type::bf16) : dnnlDataType(n.output()->dtype());
  if (!dst_t) return std::nullopt;
  const int64_t k = n.input(1)->shape()[1], p = n.input(1)->shape()[0];
  const int64_t m = n.output()->type().numel() / std::max<int64_t>(p, 1);
  if (m == 0 || p == 0 || k == 0) return std::nullopt;  // empty products: the generic kernels
  GemmProblem g;
  g.src = {m, k};
  g.wei = {k, p};
  g.dst = {m, p};
  g.wei_transposed = true;
  g.src_t = g.wei_t = g.bias_t = memory::data_type::bf16;
  g.dst_t = *dst_t;
  g.bias = linearBias(n) != nullptr;
  g.relu = n.s("activation") == "relu";
  return g;
}

/// `s` as [batch..., rows, cols] with 1-D operands promoted as torch.matmul
/// does (a vector on the left is a row, on the right a column).
Shape asMatrix(const Shape& s, bool left) {
  if (s.size() != 1) return s;
  return left ? Shape{1, s[0]} : Shape{s[0], 1};
}

/// matmul (flags false) or gemm as one oneDNN problem.
std::optional<GemmProblem> productProblem(const Node& n, bool ta, bool tb) {
  if (!allBf16Inputs(n)) return std::nullopt;
  auto dst_t = dnnlDataType(n.output()->dtype());
  if (!dst_t) return std::nullopt;
  const Shape a = asMatrix(n.input(0)->shape(), true), b = asMatrix(n.input(1)->shape(), false);
  const int64_t m = ta ? a.back() : a[a.size() - 2], k = ta ? a[a.size() - 2] : a.back();
  const int64_t p = tb ? b[b.size() - 2] : b.back();
  if (m == 0 || k == 0 || p == 0) return std::nullopt;
  const Shape ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  const int64_t na = numelOf(ab), nb = numelOf(bb);
  GemmProblem g;
  g.src_t = g.wei_t = g.bias_t = memory::data_type::bf16;
  g.dst_t = *dst_t;
  g.src_transposed = ta;
  g.wei_transposed = tb;
  if (nb == 1 && !ta) {  // one right matrix: the left batch folds into M
    g.src = {na * m, k};
    g.wei = {k, p};
    g.dst = {na * m, p};
  } else if (ab == bb || na == 1 || nb == 1) {  // equal batches, or one side a single matrix broadcast
    g.src = {na, m, k};
    g.wei = {nb, k, p};
    g.dst = {std::max(na, nb), m, p};
  } else {
    return std::nullopt;
  }
  return g;
}

std::optional<GemmProblem> matmulProblem(const Node& n) { return productProblem(n, false, false); }

std::optional<GemmProblem> gemmProblem(const Node& n) {
  return productProblem(n, n.i("trans_a") != 0, n.i("trans_b") != 0);
}

bool linearSupported(const Node& n) {
  auto p = linearProblem(n);
  return p && gemmFor(*p) != nullptr;
}

bool matmulSupported(const Node& n) {
  auto p = matmulProblem(n);
  return p && gemmFor(*p) != nullptr;
}

bool gemmSupported(const Node& n) {
  auto p = gemmProblem(n);
  return p && gemmFor(*p) != nullptr;
}

void runGemm(const Node& n, const GemmProblem& p, std::span<const Tensor> in, std::span<Tensor> out) {
  const DnnlGemm* g = gemmFor(p);
  if (!g) opFail(n, "oneDNN has no matmul for this configuration");
  Tensor& y = allocOutput(n, out, 0);
  auto& eng = dnnlEngine();
  DnnlWorkspace ws({g->scratch.get_size()});
  // oneDNN never writes through its sources; the casts only satisfy its API.
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(g->src, eng, const_cast<void*>(in[0].raw()))},
                                       {DNNL_ARG_WEIGHTS, memory(g->wei, eng, const_cast<void*>(in[1].raw()))},
                                       {DNNL_ARG_DST, memory(g->dst, eng, y.raw())},
                                       {DNNL_ARG_SCRATCHPAD, memory(g->scratch, eng, ws.part(0))}};
  if (p.bias) args.emplace(DNNL_ARG_BIAS, memory(g->bias, eng, const_cast<void*>(in[2].raw())));
  dnnl::stream s(eng);
  g->prim.execute(s, args);
  s.wait();
}

/// The residual epilogue: the GEMM's bf16 result (rounded by oneDNN, as the
/// separate linear's; staged when the output is amp's f32 stream) plus the
/// residual, added in f32 chunk by chunk and written in the output's dtype.
/// (Row panels of the GEMM, to add while its result is in cache, measured
/// no faster: oneDNN's per-call overhead ate the saved memory traffic.)
void linearResidualKernel(const Node& n, const GemmProblem& p, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor& res = in[in.size() - 1];
  Tensor& y = allocOutput(n, out, 0);
  const DnnlGemm* g = gemmFor(p);
  if (!g) opFail(n, "oneDNN has no matmul for this configuration");
  const int64_t count = p.dst[0] * p.dst[1];
  const bool bf16_out = y.dtype() == DType::BF16;
  std::vector<uint16_t> staging(bf16_out ? 0 : static_cast<size_t>(count));
  uint16_t* dst = bf16_out ? static_cast<uint16_t*>(y.raw()) : staging.data();
  auto& eng = dnnlEngine();
  DnnlWorkspace ws({g->scratch.get_size()});
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(g->src, eng, const_cast<void*>(in[0].raw()))},
                                       {DNNL_ARG_WEIGHTS, memory(g->wei, eng, const_cast<void*>(in[1].raw()))},
                                       {DNNL_ARG_DST, memory(g->dst, eng, dst)},
                                       {DNNL_ARG_SCRATCHPAD, memory(g->scratch, eng, ws.part(0))}};
  if (p.bias) args.emplace(DNNL_ARG_BIAS, memory(g->bias, eng, const_cast<void*>(in[2].raw())));
  dnnl::stream s(eng);
  g->prim.execute(s, args);
  s.wait();
  if (res.dtype() == DType::BF16) {
    const auto* r = static_cast<const uint16_t*>(res.raw());
    parallelFor(count, kParallelGrain, [=](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dst[i] = floatToBf16(bf16ToFloat(dst[i]) + bf16ToFloat(r[i]));
    });
  } else {
    const float* r = res.data<float>();
    float* o = y.data<float>();
    parallelFor(count, kParallelGrain, [=](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = bf16ToFloat(dst[i]) + r[i];
    });
  }
}

void linearKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  auto p = linearProblem(n);
  if (!p) opFail(n, "not a bf16 linear oneDNN runs");
  if (linearResidual(n))
    linearResidualKernel(n, *p, in, out);
  else
    runGemm(n, *p, in, out);
}

void matmulKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  auto p = matmulProblem(n);
  if (!p) opFail(n, "not a bf16 matmul oneDNN runs");
  runGemm(n, *p, in, out);
}

void gemmKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  auto p = gemmProblem(n);
  if (!p) opFail(n, "not a bf16 gemm oneDNN runs");
  runGemm(n, *p, in, out);
}

}  // namespace

void registerCpuDnnlLinalgKernels(KernelRegistry& r) {
  // Above blas.*_lowp (20), which converts to f32. oneDNN splits its work
  // by the thread count: never beside other nodes.
  for (KernelDef k : {KernelDef{"matmul", "onednn", "onednn.matmul_bf16", 30, matmulSupported, matmulKernel},
                      KernelDef{"gemm", "onednn", "onednn.gemm_bf16", 30, gemmSupported, gemmKernel},
                      KernelDef{"linear", "onednn", "onednn.linear_bf16", 30, linearSupported, linearKernel}}) {
    k.runs_beside_others = false;
    r.add(std::move(k));
  }
}

}  // namespace kiln::cpu
