// CUDA kernels of conv2d and its backward ops through cuDNN's convolution
// API ("cudnn", priority 20; f32, f64, f16, bf16), NCHW tensors and OIHW
// filters, with stride, padding, dilation and groups:
//   conv2d(x, w[, b])                     cudnnConvolutionForward (+ cudnnAddTensor)
//   conv2d_input_backward(g, w)           cudnnConvolutionBackwardData
//   conv2d_weight_backward(g, x)          cudnnConvolutionBackwardFilter
// Semantics are backend/cpu/kernels_conv.cpp's and kernels_conv_grad.cpp's.
//
// Precision: f32 runs with CUDNN_FMA_MATH, which keeps cuDNN off TF32
// (CUDNN_DEFAULT_MATH lets it use TF32 on Ampere and later: PyTorch maps
// allow_tf32 = False to CUDNN_FMA_MATH the same way); f64 with the default
// math; f16/bf16 with tensor-op math and fp32 compute.
//
// Algorithms come from cuDNN's heuristics (cudnnGetConvolution*Algorithm_v7:
// host-only; cudnnFind* would allocate and synchronize), taking the first
// whose workspace fits kMaxConvWorkspace, preferring (f32) one without an FFT
// or Winograd transform, then a deterministic one (see choose()), cached per
// shape/attributes/dtype/device in a process-wide map.
// The kernel's WorkspaceFn fills the same cache (with a process-wide cuDNN
// handle of its own, created lazily per device, for planning only) and
// returns the chosen algorithm's workspace size, so enqueueing never plans.
//
// Bias: cudnnAddTensor onto the output; should cuDNN refuse it for a dtype
// (its legacy tensor ops and bf16), a plain CUDA kernel in kernels_pool.cu
// adds it instead. Not covered (predicate rejects): mixed input dtypes and
// tensors of 2^31 or more elements (cuDNN's legacy descriptors take int).
//
// This file also registers the pooling kernels (kernels_pool.cu).
#include <cuda_runtime.h>
#include <cudnn.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernel.h"
#include "backend/cuda/cuda_libraries.h"
#include "core/ops/op_helpers.h"

namespace kiln::cuda {

// kernels_pool.cu
void registerCudaPoolKernels(CudaKernelRegistry& r);
/// y[n, c, ...] += bias[c] for an NCHW y (the fallback when cudnnAddTensor
/// refuses the dtype).
void enqueueChannelBias(const DeviceTensor& y, const DeviceTensor& bias, CudaContext& ctx);

namespace {

constexpr size_t kMaxConvWorkspace = size_t{256} << 20;

enum class ConvKind { Forward, BackwardData, BackwardFilter };

ConvKind kindOf(const Node& n) {
  if (n.is(Op::conv2d_input_backward)) return ConvKind::BackwardData;
  if (n.is(Op::conv2d_weight_backward)) return ConvKind::BackwardFilter;
  return ConvKind::Forward;
}

/// Convolution geometry of any of the three ops (x, weight and y = g shapes).
struct ConvGeom {
  int64_t n, c, h, w;     // input
  int64_t o, cg, kh, kw;  // weight (cg = input channels per group)
  int64_t groups;
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t oh, ow;  // output
};

ConvGeom convGeom(const Node& n) {
  const ConvKind kind = kindOf(n);
  Shape x, wt, y;
  if (kind == ConvKind::Forward) {
    x = n.input(0)->shape(), wt = n.input(1)->shape(), y = n.output()->shape();
  } else if (kind == ConvKind::BackwardData) {
    const auto& s = n.is("input_shape");
    x = Shape(s.begin(), s.end()), wt = n.input(1)->shape(), y = n.input(0)->shape();
  } else {
    const auto& s = n.is("weight_shape");
    x = n.input(1)->shape(), wt = Shape(s.begin(), s.end()), y = n.input(0)->shape();
  }
  auto stride = pair(n, "stride"), pad = pair(n, "padding"), dil = pair(n, "dilation");
  ConvGeom g;
  g.n = x[0], g.c = x[1], g.h = x[2], g.w = x[3];
  g.o = wt[0], g.cg = wt[1], g.kh = wt[2], g.kw = wt[3];
  g.groups = n.i("groups");
  g.sh = stride[0], g.sw = stride[1], g.ph = pad[0], g.pw = pad[1], g.dh = dil[0], g.dw = dil[1];
  g.oh = y[2], g.ow = y[3];
  return g;
}

bool convSupports(const Node& n) {
  if (channelsLast(n)) return false;  // NCHW descriptors only (passes/channels_last.cpp is CPU-only)
  const DType t = n.input(0)->dtype();
  if (t != DType::F32 && t != DType::F64 && t != DType::F16 && t != DType::BF16) return false;
  for (const Value* v : n.inputs())
    if (v->dtype() != t || v->type().numel() > INT32_MAX) return false;
  if (n.output()->type().numel() > INT32_MAX) return false;
  const ConvGeom g = convGeom(n);
  for (int64_t v : {g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.groups})
    if (v > INT32_MAX) return false;
  return true;
}

// ---- descriptors ---------------------------------------------------------------------

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  explicit TensorDesc(const Node* n) { checkCudnn(cudnnCreateTensorDescriptor(&d), "cudnnCreateTensorDescriptor", n); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};
struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  explicit FilterDesc(const Node* n) { checkCudnn(cudnnCreateFilterDescriptor(&d), "cudnnCreateFilterDescriptor", n); }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};
struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  explicit ConvDesc(const Node* n) {
    checkCudnn(cudnnCreateConvolutionDescriptor(&d), "cudnnCreateConvolutionDescriptor", n);
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

cudnnDataType_t dnnType(DType t) {
  switch (t) {
    case DType::F64:
      return CUDNN_DATA_DOUBLE;
    case DType::F16:
      return CUDNN_DATA_HALF;
    case DType::BF16:
      return CUDNN_DATA_BFLOAT16;
    default:
      return CUDNN_DATA_FLOAT;
  }
}

/// The math type a dtype starts from (and f32 keeps: no TF32).
cudnnMathType_t baseMath(DType t) {
  if (t == DType::F32) return CUDNN_FMA_MATH;
  if (t == DType::F64) return CUDNN_DEFAULT_MATH;
  return CUDNN_TENSOR_OP_MATH;
}

/// x, w, y and the convolution descriptors of one node.
struct ConvDescs {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;

  ConvDescs(const ConvGeom& g, DType t, const Node* n) : x(n), y(n), w(n), conv(n) {
    const cudnnDataType_t dt = dnnType(t);
    auto i = [](int64_t v) { return static_cast<int>(v); };
    checkCudnn(cudnnSetTensor4dDescriptor(x.d, CUDNN_TENSOR_NCHW, dt, i(g.n), i(g.c), i(g.h), i(g.w)),
               "cudnnSetTensor4dDescriptor (input)", n);
    checkCudnn(cudnnSetTensor4dDescriptor(y.d, CUDNN_TENSOR_NCHW, dt, i(g.n), i(g.o), i(g.oh), i(g.ow)),
               "cudnnSetTensor4dDescriptor (output)", n);
    checkCudnn(cudnnSetFilter4dDescriptor(w.d, dt, CUDNN_TENSOR_NCHW, i(g.o), i(g.cg), i(g.kh), i(g.kw)),
               "cudnnSetFilter4dDescriptor", n);
    // f16/bf16 accumulate in f32 (as PyTorch's descriptors); f64 in f64.
    const cudnnDataType_t compute = t == DType::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    checkCudnn(cudnnSetConvolution2dDescriptor(conv.d, i(g.ph), i(g.pw), i(g.sh), i(g.sw), i(g.dh), i(g.dw),
                                               CUDNN_CROSS_CORRELATION, compute),
               "cudnnSetConvolution2dDescriptor", n);
    checkCudnn(cudnnSetConvolutionGroupCount(conv.d, i(g.groups)), "cudnnSetConvolutionGroupCount", n);
    checkCudnn(cudnnSetConvolutionMathType(conv.d, baseMath(t)), "cudnnSetConvolutionMathType", n);
  }
};

// ---- algorithm choice ----------------------------------------------------------------

/// The algorithm (as int, of the kind's enum), its math type and workspace.
struct ConvPlan {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
};

/// Algorithms that compute through a transform of the operands (FFT, the
/// non-fused Winograd) and round inside it: in f32 their error grows with
/// the transform's size, far past what another summation order gives. On an
/// H100, tv_alexnet's 5x5 weight gradient (64 -> 192 channels, 7x7 images)
/// came out 4.9e-4 of its largest element away from the CPU's, where
/// PyTorch's own float32 is 5.5e-7 from float64.
bool transformed(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool transformed(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool transformed(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

/// Which of the heuristic's results to run: each successful one is checked
/// with its math type (f32: always FMA) by a workspace query, which fails for
/// combinations cuDNN cannot run. Among those within the workspace cap, in
/// the heuristic's order: f32 wants an algorithm without a transform first,
/// then a deterministic one; other dtypes a deterministic one. KILN_CUDNN_LOG=1
/// prints every candidate and the choice on stderr (once per shape).
template <typename Perf, typename WsFn>
ConvPlan choose(const std::vector<Perf>& perf, int returned, ConvDescs& d, DType t, WsFn workspace, const Node* n,
                const char* what) {
  static const bool log = std::getenv("KILN_CUDNN_LOG") != nullptr;
  const bool exact_first = t == DType::F32;
  ConvPlan best;
  int best_score = -1;
  std::string seen;
  for (int i = 0; i < returned; ++i) {
    const Perf& p = perf[static_cast<size_t>(i)];
    if (p.status != CUDNN_STATUS_SUCCESS) continue;
    const cudnnMathType_t math = t == DType::F32 ? CUDNN_FMA_MATH : p.mathType;
    if (cudnnSetConvolutionMathType(d.conv.d, math) != CUDNN_STATUS_SUCCESS) continue;
    size_t bytes = 0;
    if (workspace(p.algo, &bytes) != CUDNN_STATUS_SUCCESS || bytes > kMaxConvWorkspace) continue;
    const bool det = p.determinism == CUDNN_DETERMINISTIC, exact = !transformed(p.algo);
    const int score = (exact_first && exact ? 2 : 0) + (det ? 1 : 0);
    if (log)
      seen += " " + std::to_string(static_cast<int>(p.algo)) + (exact ? "" : "(transform)") +
              (det ? "" : "(nondeterministic)");
    if (score > best_score) best = {static_cast<int>(p.algo), math, bytes}, best_score = score;
  }
  if (best_score < 0)
    fail((n ? n->describe() + ": " : std::string()) + "cuDNN's heuristics offer no usable " + what +
         " algorithm within " + std::to_string(kMaxConvWorkspace >> 20) + " MiB of workspace");
  if (log)
    std::fprintf(stderr, "kiln: cudnn %s %s: algorithms%s -> %d (workspace %zu bytes)\n", what,
                 n ? n->describe().c_str() : "", seen.c_str(), best.algo, best.workspace);
  return best;
}

ConvPlan findPlan(cudnnHandle_t h, ConvKind kind, const ConvGeom& g, DType t, const Node* n) {
  ConvDescs d(g, t, n);
  int max_count = 0, returned = 0;
  switch (kind) {
    case ConvKind::Forward: {
      checkCudnn(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max_count),
                 "cudnnGetConvolutionForwardAlgorithmMaxCount", n);
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(std::max(max_count, 1)));
      checkCudnn(
          cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.d, d.w.d, d.conv.d, d.y.d, max_count, &returned, perf.data()),
          "cudnnGetConvolutionForwardAlgorithm_v7", n);
      return choose(
          perf, returned, d, t,
          [&](cudnnConvolutionFwdAlgo_t a, size_t* b) {
            return cudnnGetConvolutionForwardWorkspaceSize(h, d.x.d, d.w.d, d.conv.d, d.y.d, a, b);
          },
          n, "forward convolution");
    }
    case ConvKind::BackwardData: {
      checkCudnn(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max_count),
                 "cudnnGetConvolutionBackwardDataAlgorithmMaxCount", n);
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<size_t>(std::max(max_count, 1)));
      checkCudnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w.d, d.y.d, d.conv.d, d.x.d, max_count, &returned,
                                                             perf.data()),
                 "cudnnGetConvolutionBackwardDataAlgorithm_v7", n);
      return choose(
          perf, returned, d, t,
          [&](cudnnConvolutionBwdDataAlgo_t a, size_t* b) {
            return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w.d, d.y.d, d.conv.d, d.x.d, a, b);
          },
          n, "backward-data convolution");
    }
    case ConvKind::BackwardFilter: {
      checkCudnn(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max_count),
                 "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount", n);
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<size_t>(std::max(max_count, 1)));
      checkCudnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x.d, d.y.d, d.conv.d, d.w.d, max_count, &returned,
                                                               perf.data()),
                 "cudnnGetConvolutionBackwardFilterAlgorithm_v7", n);
      return choose(
          perf, returned, d, t,
          [&](cudnnConvolutionBwdFilterAlgo_t a, size_t* b) {
            return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x.d, d.y.d, d.conv.d, d.w.d, a, b);
          },
          n, "backward-filter convolution");
    }
  }
  return {};
}

std::string planKey(int device, ConvKind kind, const ConvGeom& g, DType t) {
  std::string k = std::to_string(device) + ':' + std::to_string(static_cast<int>(kind)) + ':' +
                  std::to_string(static_cast<int>(t)) + ':';
  for (int64_t v :
       {g.n, g.c, g.h, g.w, g.o, g.cg, g.kh, g.kw, g.groups, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.oh, g.ow})
    k += std::to_string(v) + ',';
  return k;
}

struct PlanCache {
  std::mutex mu;
  std::map<std::string, ConvPlan> plans;
};
PlanCache& planCache() {
  static PlanCache* cache = new PlanCache();  // never torn down: used until exit
  return *cache;
}

/// The cached plan for `n`, found with handle `h` on first use.
ConvPlan planFor(cudnnHandle_t h, const Node& n) {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice", &n);
  const ConvKind kind = kindOf(n);
  const ConvGeom g = convGeom(n);
  const DType t = n.input(0)->dtype();
  const std::string key = planKey(device, kind, g, t);
  PlanCache& cache = planCache();
  std::lock_guard<std::mutex> lock(cache.mu);  // heuristics are host-only and quick: plan under the lock
  if (auto it = cache.plans.find(key); it != cache.plans.end()) return it->second;
  const ConvPlan plan = findPlan(h, kind, g, t, &n);
  cache.plans.emplace(key, plan);
  return plan;
}

/// A cuDNN handle per device for the WorkspaceFn's planning (it gets no
/// context); created on first use, kept until exit.
cudnnHandle_t planningHandle(const Node& n) {
  static std::mutex mu;
  static auto* handles = new std::map<int, cudnnHandle_t>();
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice", &n);
  std::lock_guard<std::mutex> lock(mu);
  cudnnHandle_t& h = (*handles)[device];
  if (!h) checkCudnn(cudnnCreate(&h), "cudnnCreate (convolution planning)", &n);
  return h;
}

bool anyEmpty(const ConvGeom& g) {
  for (int64_t v : {g.n, g.c, g.h, g.w, g.o, g.cg, g.kh, g.kw, g.oh, g.ow})
    if (v == 0) return true;
  return false;
}

size_t convWorkspace(const Node& n) {
  if (n.output()->type().numel() == 0 || anyEmpty(convGeom(n))) return 0;
  return planFor(planningHandle(n), n).workspace;
}

// ---- kernels -------------------------------------------------------------------------

void addBias(const DeviceTensor& y, const DeviceTensor& b, const ConvGeom& g, CudaContext& ctx) {
  const Node* n = ctx.node;
  const DType t = y.dtype();
  TensorDesc bd(n), yd(n);
  checkCudnn(cudnnSetTensor4dDescriptor(bd.d, CUDNN_TENSOR_NCHW, dnnType(t), 1, static_cast<int>(g.o), 1, 1),
             "cudnnSetTensor4dDescriptor (bias)", n);
  checkCudnn(cudnnSetTensor4dDescriptor(yd.d, CUDNN_TENSOR_NCHW, dnnType(t), static_cast<int>(g.n),
                                        static_cast<int>(g.o), static_cast<int>(g.oh), static_cast<int>(g.ow)),
             "cudnnSetTensor4dDescriptor (output)", n);
  const double one_d = 1.0;
  const float one_f = 1.0f;
  const void* one = t == DType::F64 ? static_cast<const void*>(&one_d) : &one_f;
  const cudnnStatus_t st = cudnnAddTensor(ctx.libs->dnn, one, bd.d, b.data, one, yd.d, y.data);
  if (st == CUDNN_STATUS_NOT_SUPPORTED || st == CUDNN_STATUS_BAD_PARAM) {
    enqueueChannelBias(y, b, ctx);  // cuDNN refused synchronously: nothing was enqueued
    return;
  }
  checkCudnn(st, "cudnnAddTensor (bias)", n);
}

void convKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out, CudaContext& ctx) {
  const DeviceTensor& res = out[0];
  if (res.numel() == 0) return;
  const ConvKind kind = kindOf(n);
  const ConvGeom g = convGeom(n);
  cudnnHandle_t h = ctx.libs->dnn;
  checkCudnn(cudnnSetStream(h, ctx.stream), "cudnnSetStream", &n);
  if (anyEmpty(g)) {
    // An empty reduction (no input channels, no images, no output channels): zeros.
    check(cudaMemsetAsync(res.data, 0, res.bytes(), ctx.stream), "zero fill (empty convolution)", &n);
    if (kind == ConvKind::Forward && in.size() == 3) addBias(res, in[2], g, ctx);
    return;
  }
  const DType t = in[0].dtype();
  const ConvPlan plan = planFor(h, n);
  if (plan.workspace > ctx.workspace_bytes)
    fail(n.describe() + ": cuDNN's algorithm needs " + std::to_string(plan.workspace) + " bytes of workspace, got " +
         std::to_string(ctx.workspace_bytes));
  ConvDescs d(g, t, &n);
  checkCudnn(cudnnSetConvolutionMathType(d.conv.d, plan.math), "cudnnSetConvolutionMathType", &n);
  const double one_d = 1.0, zero_d = 0.0;
  const float one_f = 1.0f, zero_f = 0.0f;
  const bool f64 = t == DType::F64;
  const void* one = f64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* zero = f64 ? static_cast<const void*>(&zero_d) : &zero_f;
  void* ws = plan.workspace ? ctx.workspace : nullptr;
  switch (kind) {
    case ConvKind::Forward:
      checkCudnn(cudnnConvolutionForward(h, one, d.x.d, in[0].data, d.w.d, in[1].data, d.conv.d,
                                         static_cast<cudnnConvolutionFwdAlgo_t>(plan.algo), ws, plan.workspace, zero,
                                         d.y.d, res.data),
                 "cudnnConvolutionForward", &n);
      if (in.size() == 3) addBias(res, in[2], g, ctx);
      break;
    case ConvKind::BackwardData:
      checkCudnn(cudnnConvolutionBackwardData(h, one, d.w.d, in[1].data, d.y.d, in[0].data, d.conv.d,
                                              static_cast<cudnnConvolutionBwdDataAlgo_t>(plan.algo), ws, plan.workspace,
                                              zero, d.x.d, res.data),
                 "cudnnConvolutionBackwardData", &n);
      break;
    case ConvKind::BackwardFilter:
      checkCudnn(cudnnConvolutionBackwardFilter(h, one, d.x.d, in[1].data, d.y.d, in[0].data, d.conv.d,
                                                static_cast<cudnnConvolutionBwdFilterAlgo_t>(plan.algo), ws,
                                                plan.workspace, zero, d.w.d, res.data),
                 "cudnnConvolutionBackwardFilter", &n);
      break;
  }
}

}  // namespace

void registerCudaConvKernels(CudaKernelRegistry& r) {
  for (const char* op : {"conv2d", "conv2d_input_backward", "conv2d_weight_backward"}) {
    CudaKernelDef k;
    k.op = op;
    k.dialect = "cudnn";
    k.name = std::string("cudnn.") + op;
    k.priority = 20;
    k.supports = convSupports;
    k.fn = convKernel;
    k.workspace = convWorkspace;
    r.add(std::move(k));
  }
  registerCudaPoolKernels(r);
}

}  // namespace kiln::cuda
