// CUDA kernels of the optimizer ops ("cuda", priority 0): sgd_update and
// adam_update (multi-tensor, in place like the CPU's: updates_in_place), and
// global_norm. The formulas are backend/cpu/kernels_optim.cpp's, in the same
// order of operations and precision: element math in the parameter's dtype,
// every product and sum rounded on its own (the __f*_rn / __d*_rn
// intrinsics: nvcc would otherwise fuse them into FMAs, which the CPU build,
// -ffp-contract=off, does not), the hyper-parameters rounded to it where the
// CPU rounds them, and what the CPU computes in double from the step's
// scalars (bias corrections, step size, weight decay factor) computed in
// double once per thread block.
//
// Everything that changes from step to step (lr, step, grad_scale) is a
// device tensor read inside the kernels; skip_nonfinite's decision (a
// non-finite grad_scale: every output is its input) is taken there too.
// See kernels_optim.h for the multi-tensor launch layout and its limits;
// optim_device.cuh holds the scalar loads and rounded arithmetic that
// sgd_update_rows (kernels_optim_rows.cu) shares.
//
// global_norm: deterministic. Each thread block sums the squares of one
// chunk in double (any floating input dtype; the CPU sums in double too), in
// a fixed order, and adds it to its own slot of kMultiTensorBlocks partial
// sums in the workspace (zeroed first; successive launches on the stream add
// to the same slots in order); one block then sums the slots in a fixed tree
// and writes the square root in the output's dtype.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_dtype.cuh"
#include "backend/cuda/cuda_kernel.h"
#include "backend/cuda/kernels_optim.h"
#include "backend/cuda/optim_device.cuh"

namespace kiln::cuda {
namespace {

constexpr int kUpdateThreads = 512;
constexpr int kNormThreads = 256;

// ---- the launch table ---------------------------------------------------------------------

/// Up to NT tensors of D pointers each and NB blocks (tensor slot, chunk).
template <int D, int NT, int NB>
struct TensorTable {
  static_assert(NT <= 255, "tensor slots are uint8_t");
  void* ptr[D][NT];
  int64_t numel[NT];
  int32_t chunk_of[NB];
  uint8_t tensor_of[NB];
  uint8_t dtype[NT];
};

/// One tensor's pointers (up to 7), size and dtype, before it goes into a table.
struct TensorRef {
  void* ptr[7] = {};
  int64_t numel = 0;
  uint8_t dtype = kF32;
};

/// Fills `t` with `refs` chunk by chunk and calls launch(t, blocks) whenever
/// the table is full and at the end; a tensor cut by a full block table
/// continues from slot 0 of the next one.
template <int D, int NT, int NB, typename Launch>
void forEachLaunch(const std::vector<TensorRef>& refs, TensorTable<D, NT, NB>& t, Launch&& launch) {
  int nt = 0, nb = 0;
  for (const TensorRef& ref : refs) {
    if (ref.numel == 0) continue;
    int slot = nt++;
    for (int d = 0; d < D; ++d) t.ptr[d][slot] = ref.ptr[d];
    t.numel[slot] = ref.numel;
    t.dtype[slot] = ref.dtype;
    const int64_t chunks = (ref.numel + kMultiTensorChunk - 1) / kMultiTensorChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      t.tensor_of[nb] = static_cast<uint8_t>(slot);
      t.chunk_of[nb] = static_cast<int32_t>(c);
      ++nb;
      const bool last_chunk = c == chunks - 1;
      if (nb == NB || (nt == NT && last_chunk)) {
        launch(t, nb);
        nb = 0;
        nt = 0;
        if (!last_chunk) {  // carry the tensor over to slot 0
          for (int d = 0; d < D; ++d) t.ptr[d][0] = t.ptr[d][slot];
          t.numel[0] = t.numel[slot];
          t.dtype[0] = t.dtype[slot];
          slot = 0;
          nt = 1;
        }
      }
    }
  }
  if (nb > 0) launch(t, nb);
}

// ---- device helpers ----------------------------------------------------------------------------

/// [begin, end) of this block's chunk.
template <typename Table>
__device__ __forceinline__ void blockChunk(const Table& t, int& slot, int64_t& begin, int64_t& end) {
  slot = t.tensor_of[blockIdx.x];
  begin = static_cast<int64_t>(t.chunk_of[blockIdx.x]) * kMultiTensorChunk;
  end = min(begin + kMultiTensorChunk, t.numel[slot]);
}

// ---- Adam / AdamW -------------------------------------------------------------------------------

using AdamTable = TensorTable<7, kAdamTensorsPerLaunch, kMultiTensorBlocks>;

template <typename T>
struct AdamArgs {
  AdamTable t;
  ScalarRefs s;
  double beta1, beta2, weight_decay;
  T tb1, tb2, c1, c2, eps, twd;
  bool decoupled, skip_nonfinite;
};
static_assert(sizeof(AdamArgs<double>) <= 4000, "kernel parameters over 4 KB");

template <typename T>
__global__ void __launch_bounds__(kUpdateThreads) adamKernel(const AdamArgs<T> a) {
  __shared__ T step_size, bias2_sqrt, decay, scale;
  __shared__ bool skip;
  if (threadIdx.x == 0) {
    // What the CPU computes in double from the scalars (as Python does).
    const double lr = loadScalar(a.s.p[0], a.s.dtype[0]), step = loadScalar(a.s.p[1], a.s.dtype[1]);
    const double gs = loadScalar(a.s.p[2], a.s.dtype[2]);
    const double bias1 = 1 - pow(a.beta1, step), bias2 = 1 - pow(a.beta2, step);
    step_size = static_cast<T>(-(lr / bias1));
    bias2_sqrt = static_cast<T>(sqrt(bias2));
    decay = static_cast<T>(1 - lr * a.weight_decay);
    scale = static_cast<T>(gs);
    skip = a.skip_nonfinite && !isfinite(gs);
  }
  __syncthreads();
  int slot;
  int64_t begin, end;
  blockChunk(a.t, slot, begin, end);
  const T* pp = static_cast<const T*>(a.t.ptr[0][slot]);
  const T* gp = static_cast<const T*>(a.t.ptr[1][slot]);
  const T* mp = static_cast<const T*>(a.t.ptr[2][slot]);
  const T* vp = static_cast<const T*>(a.t.ptr[3][slot]);
  T* po = static_cast<T*>(a.t.ptr[4][slot]);
  T* mo = static_cast<T*>(a.t.ptr[5][slot]);
  T* vo = static_cast<T*>(a.t.ptr[6][slot]);
  if (skip) {  // a gradient overflowed: every output is its input, bit for bit
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      if (po != pp) po[i] = pp[i];
      if (mo != mp) mo[i] = mp[i];
      if (vo != vp) vo[i] = vp[i];
    }
    return;
  }
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    T grad = kmul(gp[i], scale);
    T param = pp[i];
    if (a.decoupled)
      param = kmul(param, decay);
    else if (a.twd != T(0))
      grad = kadd(grad, kmul(a.twd, param));                              // grad.add(param, alpha=weight_decay)
    const T mi = kadd(kmul(mp[i], a.tb1), kmul(a.c1, grad));              // exp_avg.mul_(beta1).add_(grad, 1 - beta1)
    const T vi = kadd(kmul(vp[i], a.tb2), kmul(kmul(a.c2, grad), grad));  // exp_avg_sq.mul_(beta2).addcmul_(...)
    const T denom = kadd(divide(root(vi), bias2_sqrt), a.eps);            // (sqrt(v) / bias_correction2_sqrt).add_(eps)
    po[i] = kadd(param, kmul(step_size, divide(mi, denom)));              // param.addcdiv_(m, denom, -step_size)
    mo[i] = mi;
    vo[i] = vi;
  }
}

// ---- SGD ----------------------------------------------------------------------------------------

using SgdTable = TensorTable<5, kSgdTensorsPerLaunch, kMultiTensorBlocks>;

template <typename T>
struct SgdArgs {
  SgdTable t;
  ScalarRefs s;
  T momentum, keep, wd;
  bool has_momentum, nesterov, skip_nonfinite;
};
static_assert(sizeof(SgdArgs<double>) <= 4000, "kernel parameters over 4 KB");

template <typename T>
__global__ void __launch_bounds__(kUpdateThreads) sgdKernel(const SgdArgs<T> a) {
  __shared__ T neg_lr, scale;
  __shared__ bool first, skip;
  if (threadIdx.x == 0) {
    const double lr = loadScalar(a.s.p[0], a.s.dtype[0]), step = loadScalar(a.s.p[1], a.s.dtype[1]);
    const double gs = loadScalar(a.s.p[2], a.s.dtype[2]);
    neg_lr = static_cast<T>(-lr);
    scale = static_cast<T>(gs);
    first = step <= 1;
    skip = a.skip_nonfinite && !isfinite(gs);
  }
  __syncthreads();
  int slot;
  int64_t begin, end;
  blockChunk(a.t, slot, begin, end);
  const T* pp = static_cast<const T*>(a.t.ptr[0][slot]);
  const T* gp = static_cast<const T*>(a.t.ptr[1][slot]);
  const T* bp = static_cast<const T*>(a.t.ptr[2][slot]);
  T* po = static_cast<T*>(a.t.ptr[3][slot]);
  T* bo = static_cast<T*>(a.t.ptr[4][slot]);
  if (skip) {
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      if (po != pp) po[i] = pp[i];
      if (a.has_momentum && bo != bp) bo[i] = bp[i];
    }
    return;
  }
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    T d = kmul(gp[i], scale);
    if (a.wd != T(0)) d = kadd(d, kmul(a.wd, pp[i]));  // grad.add(param, alpha=weight_decay)
    if (a.has_momentum) {
      // First step: buf = clone(d_p); later: buf.mul_(momentum).add_(d_p, alpha=1 - dampening).
      const T b = first ? d : kadd(kmul(bp[i], a.momentum), kmul(a.keep, d));
      bo[i] = b;
      d = a.nesterov ? kadd(d, kmul(a.momentum, b)) : b;
    }
    po[i] = kadd(pp[i], kmul(neg_lr, d));  // param.add_(d_p, alpha=-lr)
  }
}

// ---- global_norm --------------------------------------------------------------------------------

using NormTable = TensorTable<1, kNormTensorsPerLaunch, kMultiTensorBlocks>;

struct NormArgs {
  NormTable t;
  double* partial;  ///< kMultiTensorBlocks slots
};
static_assert(sizeof(NormArgs) <= 4000, "kernel parameters over 4 KB");

/// Sum of `v` over the block, the same tree every time; the result in thread 0.
template <int kThreads>
__device__ double blockSum(double v) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps");
  __shared__ double warp_sums[kThreads / 32];
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  v = 0;
  if (warp == 0) {
    v = lane < kThreads / 32 ? warp_sums[lane] : 0.0;
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  }
  return v;
}

template <typename T>
__device__ __forceinline__ double squares(const void* p, int64_t begin, int64_t end) {
  const T* x = static_cast<const T*>(p);
  double acc = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    double v;
    if constexpr (std::is_same_v<T, double>)
      v = x[i];
    else
      v = static_cast<double>(toFloat(x[i]));
    acc = __dadd_rn(acc, __dmul_rn(v, v));
  }
  return acc;
}

__global__ void __launch_bounds__(kNormThreads) normPartialKernel(const NormArgs a) {
  int slot;
  int64_t begin, end;
  blockChunk(a.t, slot, begin, end);
  const void* p = a.t.ptr[0][slot];
  double acc;
  switch (a.t.dtype[slot]) {
    case kF64:
      acc = squares<double>(p, begin, end);
      break;
    case kF16:
      acc = squares<__half>(p, begin, end);
      break;
    case kBF16:
      acc = squares<__nv_bfloat16>(p, begin, end);
      break;
    default:
      acc = squares<float>(p, begin, end);
      break;
  }
  acc = blockSum<kNormThreads>(acc);
  if (threadIdx.x == 0) a.partial[blockIdx.x] += acc;  // this block's slot; launches run in stream order
}

template <typename T>
__global__ void __launch_bounds__(kNormThreads) normFinishKernel(const double* partial, T* out) {
  double acc = 0;
  for (int i = threadIdx.x; i < kMultiTensorBlocks; i += kNormThreads) acc += partial[i];
  acc = blockSum<kNormThreads>(acc);
  if (threadIdx.x == 0) {
    if constexpr (std::is_same_v<T, double>)
      *out = sqrt(acc);
    else
      *out = fromFloat<T>(static_cast<float>(sqrt(acc)));
  }
}

size_t normWorkspace(const Node&) {
  return kMultiTensorBlocks * sizeof(double);
}

void globalNorm(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out, CudaContext& ctx) {
  if (ctx.workspace_bytes < normWorkspace(n))
    fail(n.describe() + ": global_norm needs " + std::to_string(normWorkspace(n)) + " bytes of workspace");
  auto* partial = static_cast<double*>(ctx.workspace);
  check(cudaMemsetAsync(partial, 0, normWorkspace(n), ctx.stream), "global_norm: clear partial sums", &n);
  std::vector<TensorRef> refs;
  for (const DeviceTensor& t : in) {
    TensorRef r;
    r.ptr[0] = t.data;
    r.numel = t.numel();
    r.dtype = dtypeCode(t.dtype());
    refs.push_back(r);
  }
  NormArgs args{};
  args.partial = partial;
  forEachLaunch(refs, args.t, [&](const NormTable&, int blocks) {
    normPartialKernel<<<blocks, kNormThreads, 0, ctx.stream>>>(args);
    checkLaunch("global_norm", &n);
  });
  dispatchFloating(out[0].dtype(), "global_norm", [&](auto z) {
    using T = decltype(z);
    normFinishKernel<T><<<1, kNormThreads, 0, ctx.stream>>>(partial, out[0].as<T>());
    checkLaunch("global_norm (finish)", &n);
  });
}

// ---- multi-tensor entry -------------------------------------------------------------------------

bool isAdam(const Node& n) {
  return n.is(Op::adam_update);
}

/// A launch group: nodes reading the same scalar tensors, parameters of one dtype.
struct Group {
  ScalarRefs s{};
  DType dtype = DType::F32;
  std::vector<TensorRef> refs;
};

bool sameScalars(const ScalarRefs& a, const ScalarRefs& b) {
  for (size_t i = 0; i < kScalars; ++i)
    if (a.p[i] != b.p[i] || a.dtype[i] != b.dtype[i]) return false;
  return true;
}

template <typename T>
void launchAdam(const Node& n, const Group& grp, CudaContext& ctx) {
  AdamArgs<T> a{};
  a.s = grp.s;
  a.beta1 = n.f("beta1");
  a.beta2 = n.f("beta2");
  a.weight_decay = n.f("weight_decay");
  a.tb1 = static_cast<T>(a.beta1);
  a.tb2 = static_cast<T>(a.beta2);
  a.c1 = static_cast<T>(1 - a.beta1);
  a.c2 = static_cast<T>(1 - a.beta2);
  a.eps = static_cast<T>(n.f("eps"));
  a.twd = static_cast<T>(a.weight_decay);
  a.decoupled = n.i("decoupled") != 0;
  a.skip_nonfinite = n.i("skip_nonfinite") != 0;
  forEachLaunch(grp.refs, a.t, [&](const AdamTable&, int blocks) {
    adamKernel<T><<<blocks, kUpdateThreads, 0, ctx.stream>>>(a);
    checkLaunch("adam_update", &n);
  });
}

template <typename T>
void launchSgd(const Node& n, const Group& grp, CudaContext& ctx) {
  SgdArgs<T> a{};
  a.s = grp.s;
  a.momentum = static_cast<T>(n.f("momentum"));
  a.keep = static_cast<T>(1.0 - n.f("dampening"));
  a.wd = static_cast<T>(n.f("weight_decay"));
  a.has_momentum = n.f("momentum") != 0;
  a.nesterov = n.i("nesterov") != 0;
  a.skip_nonfinite = n.i("skip_nonfinite") != 0;
  forEachLaunch(grp.refs, a.t, [&](const SgdTable&, int blocks) {
    sgdKernel<T><<<blocks, kUpdateThreads, 0, ctx.stream>>>(a);
    checkLaunch("sgd_update", &n);
  });
}

void updateKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                  CudaContext& ctx) {
  enqueueMultiTensor({&n}, {std::vector<DeviceTensor>(in.begin(), in.end())},
                     {std::vector<DeviceTensor>(out.begin(), out.end())}, ctx);
}

/// The fast loops handle f32/f64 parameters (as the CPU's).
bool floatParams(const Node& n) {
  for (size_t i = kScalars; i < n.numInputs(); ++i) {
    const DType t = n.input(i)->dtype();
    if (t != DType::F32 && t != DType::F64) return false;
  }
  return true;
}

}  // namespace

bool multiTensorCompatible(const Node& a, const Node& b) {
  if (a.op() != b.op() || (!a.is(Op::adam_update) && !a.is(Op::sgd_update))) return false;
  if (isAdam(a)) {
    for (const char* f : {"beta1", "beta2", "eps", "weight_decay"})
      if (a.f(f) != b.f(f)) return false;
    for (const char* i : {"decoupled", "skip_nonfinite"})
      if (a.i(i) != b.i(i)) return false;
    return true;
  }
  for (const char* f : {"momentum", "dampening", "weight_decay"})
    if (a.f(f) != b.f(f)) return false;
  for (const char* i : {"nesterov", "skip_nonfinite"})
    if (a.i(i) != b.i(i)) return false;
  return true;
}

void enqueueMultiTensor(const std::vector<const Node*>& nodes, const std::vector<std::vector<DeviceTensor>>& inputs,
                        const std::vector<std::vector<DeviceTensor>>& outputs, CudaContext& ctx) {
  if (nodes.empty()) return;
  const Node& first = *nodes.front();
  if (inputs.size() != nodes.size() || outputs.size() != nodes.size())
    fail(first.describe() + ": enqueueMultiTensor got " + std::to_string(nodes.size()) + " nodes but " +
         std::to_string(inputs.size()) + " input and " + std::to_string(outputs.size()) + " output lists");
  const bool adam = isAdam(first);
  const bool momentum = !adam && first.f("momentum") != 0;
  const size_t per = adam ? 4 : momentum ? 3 : 2, out_per = adam ? 3 : momentum ? 2 : 1;
  std::vector<Group> groups;
  for (size_t k = 0; k < nodes.size(); ++k) {
    const Node& n = *nodes[k];
    if (!multiTensorCompatible(first, n))
      fail(n.describe() + ": cannot share a multi-tensor launch with " + first.describe() +
           " (another op or other attributes)");
    const std::vector<DeviceTensor>& in = inputs[k];
    const std::vector<DeviceTensor>& out = outputs[k];
    if (in.size() < kScalars || (in.size() - kScalars) % per != 0 ||
        out.size() != (in.size() - kScalars) / per * out_per)
      fail(n.describe() + ": enqueueMultiTensor got " + std::to_string(in.size()) + " inputs and " +
           std::to_string(out.size()) + " outputs");
    const ScalarRefs s = scalarRefs(in);
    for (size_t g = kScalars, o = 0; g < in.size(); g += per, o += out_per) {
      const DType t = in[g].dtype();
      if (t != DType::F32 && t != DType::F64)
        fail(n.describe() + ": parameter " + in[g].type.str() + " is not f32 or f64");
      TensorRef r;
      r.numel = in[g].numel();
      r.dtype = dtypeCode(t);
      if (adam) {  // p, g, m, v, p', m', v'
        for (size_t j = 0; j < 4; ++j) r.ptr[j] = in[g + j].data;
        for (size_t j = 0; j < 3; ++j) r.ptr[4 + j] = out[o + j].data;
      } else {  // p, g, buf, p', buf'
        r.ptr[0] = in[g].data;
        r.ptr[1] = in[g + 1].data;
        r.ptr[2] = momentum ? in[g + 2].data : nullptr;
        r.ptr[3] = out[o].data;
        r.ptr[4] = momentum ? out[o + 1].data : nullptr;
      }
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const Group& grp) { return grp.dtype == t && sameScalars(grp.s, s); });
      if (it == groups.end()) {
        groups.push_back(Group{s, t, {}});
        it = groups.end() - 1;
      }
      it->refs.push_back(r);
    }
  }
  for (const Group& grp : groups) {
    if (grp.dtype == DType::F64) {
      if (adam)
        launchAdam<double>(first, grp, ctx);
      else
        launchSgd<double>(first, grp, ctx);
    } else {
      if (adam)
        launchAdam<float>(first, grp, ctx);
      else
        launchSgd<float>(first, grp, ctx);
    }
  }
}

void registerCudaOptimizerKernels(CudaKernelRegistry& r) {
  // In place: each element of every input is read before the same element of
  // the outputs is written, by the same thread.
  for (const char* op : {"sgd_update", "adam_update"}) {
    CudaKernelDef k;
    k.op = op;
    k.dialect = "cuda";
    k.name = std::string("cuda.") + op;
    k.priority = 0;
    k.supports = floatParams;
    k.fn = updateKernel;
    k.updates_in_place = true;
    r.add(std::move(k));
  }
  CudaKernelDef norm;
  norm.op = "global_norm";
  norm.dialect = "cuda";
  norm.name = "cuda.global_norm";
  norm.priority = 0;
  norm.fn = globalNorm;
  norm.workspace = normWorkspace;
  r.add(std::move(norm));
}

}  // namespace kiln::cuda
