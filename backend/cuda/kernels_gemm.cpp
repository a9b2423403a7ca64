// CUDA kernels of the GEMM-shaped ops: `matmul` (torch.matmul semantics:
// 1-D operands promoted, batch dims broadcast), `gemm` (matrices with
// transpose flags, which passes/fold_transposes.cpp makes of a matmul of a
// transposed operand: the libraries read the operand transposed instead of
// a permute copying it) and `linear` (x W^T + b, then the fuse pass's relu
// epilogue). Semantics are backend/cpu/kernels_linalg.cpp's.
//
// "cublaslt" (priority 20; f32, f16, bf16): cublasLtMatmul with fp32 compute
// (CUBLAS_COMPUTE_32F: no TF32 for f32, as PyTorch's default 'highest'
// matmul precision; f16/bf16 accumulate in fp32 and, by the preference's
// reduction-scheme mask, split-K partial sums stay fp32 too, so the result is
// rounded once, as the CPU's). linear's bias and relu are the epilogue
// (CUBLASLT_EPILOGUE_BIAS / RELU_BIAS / RELU). The algorithm comes from
// cublasLtMatmulAlgoGetHeuristic, cached per problem (shapes, strides,
// epilogue, pointer alignments, workspace, device) in a process-wide map
// behind a mutex: a host-only lookup at enqueue time, no synchronization.
//
// "cublas" (priority 10; f32, f64, f16, bf16): cublasGemmStridedBatchedEx,
// for comparison with --dialects and for f64 (which cuBLASLt is not used
// for). linear's bias is copied into every output row first (device-to-device
// copies, doubling) and the GEMM accumulates onto it (beta = 1); its relu
// runs through cudnnActivationForward in place (f32/f64 only: a low-precision
// linear with relu is left to cublaslt).
//
// Row-major products go to the column-major libraries with the operands
// swapped: C[m,p] = A[m,k] B[k,p] is C^T = B^T A^T, where each row-major
// buffer already is its transpose in column-major order.
//
// Batched matmuls: the output batch (the broadcast of both batch parts) is
// one strided-batched launch when both operands step through it uniformly
// (dense batches, an operand without batch dims: stride 0, attention's
// [B,H,T,d] x [B,H,d,T]); a plain matrix B under a dense batched A folds the
// batch into M (one GEMM, as the CPU does). A broadcast the strided API cannot
// express (A [4,1,m,k] x B [1,3,k,p]) becomes one strided launch per entry of
// the outer batch dims, over the longest suffix of batch dims both operands
// step through uniformly: every shape is covered, some with several launches.
//
// Both need 32 MiB of scratch (cuBLASLt's heuristic budget; cuBLAS gets it
// through cublasSetWorkspace after each cublasSetStream, which resets it).
// Not covered (predicates reject): non-floating dtypes (the op forbids them),
// dims or batch counts beyond INT32_MAX, and for cublaslt a K = 0 linear with
// both a bias and relu.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernel.h"
#include "backend/cuda/cuda_libraries.h"

namespace kiln::cuda {
namespace {

constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;

// ---- planning: a matmul or linear as launches of row-major strided GEMMs ----------

/// Row-major C[m,p] = A[m,k] * B, A stored as [k,m] when `trans_a`, B being
/// [k,p] (or [p,k] when `trans_b`), run as `a_base.size()` launches of
/// `batch` products each. Launch l reads A from element a_base[l] (then every
/// stride_a), B from b_base[l] (every stride_b) and writes C from element
/// l * batch * m * p, densely.
struct GemmPlan {
  int64_t m = 0, p = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0;
  std::vector<int64_t> a_base, b_base;

  int64_t launches() const { return static_cast<int64_t>(a_base.size()); }
};

/// Output batch shape of a matmul (the broadcast of both batch parts).
Shape matmulBatch(const Shape& a, const Shape& b) {
  Shape ba = a.size() > 2 ? Shape(a.begin(), a.end() - 2) : Shape{};
  Shape bb = b.size() > 2 ? Shape(b.begin(), b.end() - 2) : Shape{};
  const size_t r = std::max(ba.size(), bb.size());
  Shape out(r, 1);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - ba.size() ? 1 : ba[i - (r - ba.size())];
    const int64_t db = i < r - bb.size() ? 1 : bb[i - (r - bb.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

/// Element offsets of each operand's matrix for every output batch entry
/// (broadcast dims repeat offsets), as the CPU's planMatmul.
void batchOffsets(const Shape& s, const Shape& out_batch, std::vector<int64_t>& off) {
  const size_t r = out_batch.size();
  std::vector<int64_t> st(r, 0);
  const size_t nb = s.size() - 2, shift = r - nb;
  int64_t acc = s[s.size() - 2] * s.back();
  for (size_t i = nb; i-- > 0;) {
    if (s[i] != 1) st[shift + i] = acc;
    acc *= s[i];
  }
  const int64_t count = numelOf(out_batch);
  off.assign(static_cast<size_t>(count), 0);
  std::vector<int64_t> idx(r, 0);
  for (int64_t e = 0; e < count; ++e) {
    int64_t o = 0;
    for (size_t d = 0; d < r; ++d) o += idx[d] * st[d];
    off[static_cast<size_t>(e)] = o;
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < out_batch[d]) break;
      idx[d] = 0;
    }
  }
}

/// Whether `off` steps uniformly (by off[1] - off[0]) within every run of
/// `len` consecutive entries; the step goes to `stride`.
bool uniformRuns(const std::vector<int64_t>& off, int64_t len, int64_t& stride) {
  stride = len > 1 ? off[1] - off[0] : 0;
  for (size_t e = 0; e < off.size(); ++e) {
    const int64_t j = static_cast<int64_t>(e) % len;
    if (off[e] != off[e - static_cast<size_t>(j)] + j * stride) return false;
  }
  return true;
}

/// matmul (trans flags 0; 1-D operands promoted) or gemm (matrices, flags).
GemmPlan planMatmul(const Shape& a_in, const Shape& b_in, bool trans_a = false, bool trans_b = false) {
  Shape a = a_in, b = b_in;
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  GemmPlan plan;
  plan.trans_a = trans_a;
  plan.trans_b = trans_b;
  plan.m = trans_a ? a.back() : a[a.size() - 2];
  plan.k = trans_a ? a[a.size() - 2] : a.back();
  plan.p = trans_b ? b[b.size() - 2] : b.back();
  const Shape batch = matmulBatch(a, b);
  const int64_t count = numelOf(batch);
  if (count == 0) return plan;  // no launches
  std::vector<int64_t> a_off, b_off;
  batchOffsets(a, batch, a_off);
  batchOffsets(b, batch, b_off);
  // B shared by every entry and A dense (its rows one after the other, so
  // not transposed): one GEMM with M = count * m.
  const bool b_shared = std::all_of(b_off.begin(), b_off.end(), [](int64_t o) { return o == 0; });
  bool a_dense = !trans_a;
  for (int64_t e = 0; e < count && a_dense; ++e) a_dense = a_off[static_cast<size_t>(e)] == e * plan.m * plan.k;
  if (b_shared && a_dense && count * plan.m <= INT32_MAX) {
    plan.m *= count;
    plan.a_base = {0};
    plan.b_base = {0};
    return plan;
  }
  // The longest suffix of batch dims over which both operands step uniformly
  // is one strided launch; the dims before it loop on the host.
  int64_t inner = count;
  for (size_t d = 0;; ++d) {
    if (count % inner == 0 && uniformRuns(a_off, inner, plan.stride_a) && uniformRuns(b_off, inner, plan.stride_b))
      break;
    inner /= batch[d];  // drop the outermost remaining dim (inner reaches 1, which always fits)
  }
  plan.batch = inner;
  for (int64_t l = 0; l < count / inner; ++l) {
    plan.a_base.push_back(a_off[static_cast<size_t>(l * inner)]);
    plan.b_base.push_back(b_off[static_cast<size_t>(l * inner)]);
  }
  return plan;
}

GemmPlan planLinear(const Node& n) {
  const Shape& x = n.input(0)->shape();
  const Shape& w = n.input(1)->shape();
  GemmPlan plan;
  plan.k = w[1];
  plan.p = w[0];
  plan.m = numelOf(Shape(x.begin(), x.end() - 1));
  plan.trans_b = true;
  plan.a_base = {0};
  plan.b_base = {0};
  return plan;
}

// ---- predicates -------------------------------------------------------------------

bool dimsFitInt(const Node& n) {
  for (const Value* v : n.inputs())
    for (int64_t d : v->shape())
      if (d > INT32_MAX) return false;
  return true;
}

bool sameDType(const Node& n) {
  for (const Value* v : n.inputs())
    if (v->dtype() != n.input(0)->dtype()) return false;
  return true;
}

bool isLowp(DType t) {
  return t == DType::F16 || t == DType::BF16;
}

/// A matmul's or a gemm's plan.
GemmPlan planProduct(const Node& n) {
  const bool gemm = n.is(Op::gemm);
  return planMatmul(n.input(0)->shape(), n.input(1)->shape(), gemm && n.i("trans_a") != 0,
                    gemm && n.i("trans_b") != 0);
}

/// The strided launches' batch count and folded M fit cuBLAS's int. The
/// CPU's residual epilogue (passes/fuse.cpp, CPU executors only) has no
/// CUDA kernel.
bool planFits(const Node& n) {
  if (n.is(Op::linear)) {
    if (n.i("residual") != 0) return false;
    const Shape& x = n.input(0)->shape();
    return numelOf(Shape(x.begin(), x.end() - 1)) <= INT32_MAX;
  }
  const GemmPlan plan = planProduct(n);
  return plan.m <= INT32_MAX && plan.batch <= INT32_MAX;
}

bool ltSupports(const Node& n) {
  const DType t = n.input(0)->dtype();
  if (t != DType::F32 && !isLowp(t)) return false;
  if (!sameDType(n) || !dimsFitInt(n) || !planFits(n)) return false;
  // K = 0 with a bias and relu would need an elementwise relu of the bias rows.
  if (n.is(Op::linear) && n.input(1)->shape()[1] == 0 && n.numInputs() == 3 && n.s("activation") == "relu")
    return false;
  return true;
}

bool cublasSupports(const Node& n) {
  const DType t = n.input(0)->dtype();
  if (t != DType::F32 && t != DType::F64 && !isLowp(t)) return false;
  if (!sameDType(n) || !dimsFitInt(n) || !planFits(n)) return false;
  // relu runs through cuDNN's activation, used here for f32/f64 only.
  if (n.is(Op::linear) && n.s("activation") == "relu" && isLowp(t)) return false;
  if (n.is(Op::linear) && n.s("activation") == "relu" && n.output()->type().numel() > INT32_MAX) return false;
  return true;
}

size_t gemmWorkspace(const Node&) {
  return kGemmWorkspaceBytes;
}

// ---- shared helpers ---------------------------------------------------------------

cudaDataType_t cudaType(DType t) {
  switch (t) {
    case DType::F32:
      return CUDA_R_32F;
    case DType::F64:
      return CUDA_R_64F;
    case DType::F16:
      return CUDA_R_16F;
    case DType::BF16:
      return CUDA_R_16BF;
    default:
      fail(std::string("GEMM: dtype ") + std::string(dtypeName(t)) + " is not floating");
  }
}

const char* bytePtr(const void* p) {
  return static_cast<const char*>(p);
}
char* bytePtr(void* p) {
  return static_cast<char*>(p);
}

/// Largest power of two up to 256 dividing the address (cuBLASLt's alignment
/// preferences; its heuristic assumes 256 unless told).
uint32_t alignmentOf(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al) al /= 2;
  return al;
}

/// The workspace rounded up to 256 bytes (what both libraries want), and
/// what is left of it; none when ctx has none.
void alignedWorkspace(const CudaContext& ctx, void*& ws, size_t& bytes) {
  ws = nullptr;
  bytes = 0;
  if (!ctx.workspace || ctx.workspace_bytes == 0) return;
  const auto a = reinterpret_cast<uintptr_t>(ctx.workspace);
  const uintptr_t up = (a + 255) & ~uintptr_t{255};
  if (up - a >= ctx.workspace_bytes) return;
  ws = reinterpret_cast<void*>(up);
  bytes = std::min(ctx.workspace_bytes - (up - a), kGemmWorkspaceBytes) & ~size_t{255};
  if (bytes == 0) ws = nullptr;
}

/// Copies `row` (row_bytes long, device) into each of the `rows` rows of
/// `dst`: one copy, then doubling copies of what is already there.
void broadcastRows(void* dst, const void* row, int64_t rows, size_t row_bytes, CudaContext& ctx) {
  if (rows <= 0 || row_bytes == 0) return;
  check(cudaMemcpyAsync(dst, row, row_bytes, cudaMemcpyDeviceToDevice, ctx.stream), "bias row copy", ctx.node);
  for (int64_t done = 1; done < rows;) {
    const int64_t c = std::min(done, rows - done);
    check(cudaMemcpyAsync(bytePtr(dst) + static_cast<size_t>(done) * row_bytes, dst, static_cast<size_t>(c) * row_bytes,
                          cudaMemcpyDeviceToDevice, ctx.stream),
          "bias row copy", ctx.node);
    done += c;
  }
}

/// The operands of one node, in the plan's terms.
struct GemmArgs {
  DType dtype;
  const void* a;
  const void* b;
  void* c;
  const void* bias = nullptr;  ///< linear: [p], or nullptr
  bool relu = false;
};

/// K = 0 (or nothing to compute): C is the bias rows or zeros; true when handled.
bool emptyProduct(const GemmPlan& plan, const GemmArgs& g, const DeviceTensor& out, CudaContext& ctx) {
  if (out.numel() == 0) return true;
  if (plan.k > 0) return false;
  if (g.bias)
    broadcastRows(g.c, g.bias, plan.m, static_cast<size_t>(plan.p) * dtypeSize(g.dtype), ctx);
  else
    check(cudaMemsetAsync(g.c, 0, out.bytes(), ctx.stream), "zero fill (K = 0)", ctx.node);
  return !g.relu || !g.bias;  // relu of zeros is zeros; relu of bias rows is left to the caller
}

// ---- cuBLASLt -------------------------------------------------------------------------

template <typename H, cublasStatus_t (*Destroy)(H)>
struct LtObject {
  H h = nullptr;
  LtObject() = default;
  LtObject(const LtObject&) = delete;
  LtObject& operator=(const LtObject&) = delete;
  ~LtObject() {
    if (h) Destroy(h);
  }
};
using LtDesc = LtObject<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using LtLayout = LtObject<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using LtPref = LtObject<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

template <typename V>
void setDesc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const V& v, const Node* n) {
  checkCublas(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof(V)), "cublasLtMatmulDescSetAttribute", n);
}
template <typename V>
void setLayout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, const V& v, const Node* n) {
  checkCublas(cublasLtMatrixLayoutSetAttribute(l, a, &v, sizeof(V)), "cublasLtMatrixLayoutSetAttribute", n);
}
template <typename V>
void setPref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const V& v, const Node* n) {
  checkCublas(cublasLtMatmulPreferenceSetAttribute(p, a, &v, sizeof(V)), "cublasLtMatmulPreferenceSetAttribute", n);
}

/// Column-major layout rows x cols (leading dim ld), `batch` matrices `stride` apart.
void makeLayout(LtLayout& l, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride,
                const Node* n) {
  checkCublas(cublasLtMatrixLayoutCreate(&l.h, t, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld),
              "cublasLtMatrixLayoutCreate", n);
  if (batch > 1) {
    setLayout(l.h, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, static_cast<int32_t>(batch), n);
    setLayout(l.h, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride, n);
  }
}

/// Heuristic choices, process-wide: problem key -> algorithm.
struct AlgoCache {
  std::mutex mu;
  std::map<std::string, cublasLtMatmulAlgo_t> algos;
};
AlgoCache& algoCache() {
  static AlgoCache* cache = new AlgoCache();  // never torn down: used until exit
  return *cache;
}

void runLt(const GemmPlan& plan, const GemmArgs& g, CudaContext& ctx) {
  const Node* n = ctx.node;
  const cudaDataType_t t = cudaType(g.dtype);
  const size_t es = dtypeSize(g.dtype);
  const int64_t launches = plan.launches();
  // Lt's A is our B, Lt's B is our A (see the top of the file).
  uint32_t align_a = 256, align_b = 256, align_c = 256;
  for (int64_t l = 0; l < launches; ++l) {
    align_a =
        std::min(align_a, alignmentOf(bytePtr(g.b) + static_cast<size_t>(plan.b_base[static_cast<size_t>(l)]) * es));
    align_b =
        std::min(align_b, alignmentOf(bytePtr(g.a) + static_cast<size_t>(plan.a_base[static_cast<size_t>(l)]) * es));
    align_c = std::min(align_c, alignmentOf(bytePtr(g.c) + static_cast<size_t>(l * plan.batch * plan.m * plan.p) * es));
  }

  LtDesc desc;
  checkCublas(cublasLtMatmulDescCreate(&desc.h, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate", n);
  const cublasOperation_t op_a = plan.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = plan.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  setDesc(desc.h, CUBLASLT_MATMUL_DESC_TRANSA, op_a, n);
  setDesc(desc.h, CUBLASLT_MATMUL_DESC_TRANSB, op_b, n);
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (g.bias)
    epilogue = g.relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  else if (g.relu)
    epilogue = CUBLASLT_EPILOGUE_RELU;
  setDesc(desc.h, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, n);
  if (g.bias) setDesc(desc.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias, n);

  LtLayout la, lb, lc;
  if (plan.trans_b)
    makeLayout(la, t, plan.k, plan.p, plan.k, plan.batch, plan.stride_b, n);
  else
    makeLayout(la, t, plan.p, plan.k, plan.p, plan.batch, plan.stride_b, n);
  if (plan.trans_a)
    makeLayout(lb, t, plan.m, plan.k, plan.m, plan.batch, plan.stride_a, n);
  else
    makeLayout(lb, t, plan.k, plan.m, plan.k, plan.batch, plan.stride_a, n);
  makeLayout(lc, t, plan.p, plan.m, plan.p, plan.batch, plan.m * plan.p, n);

  void* ws = nullptr;
  size_t ws_bytes = 0;
  alignedWorkspace(ctx, ws, ws_bytes);

  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice", n);
  std::string key = std::to_string(device) + ':' + std::to_string(static_cast<int>(g.dtype)) + ':' +
                    std::to_string(static_cast<int>(epilogue)) + ':' + (plan.trans_a ? "T" : "N") +
                    (plan.trans_b ? "T" : "N");
  for (int64_t v :
       {plan.m, plan.p, plan.k, plan.batch, plan.stride_a, plan.stride_b, int64_t{align_a}, int64_t{align_b},
        int64_t{align_c}, int64_t{g.bias ? alignmentOf(g.bias) : 0}, static_cast<int64_t>(ws_bytes)})
    key += ',' + std::to_string(v);

  cublasLtMatmulAlgo_t algo{};
  AlgoCache& cache = algoCache();
  bool found = false;
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    if (auto it = cache.algos.find(key); it != cache.algos.end()) {
      algo = it->second;
      found = true;
    }
  }
  if (!found) {
    // Low precision: split-K partial sums in fp32 only (the CPU rounds once);
    // if no algorithm qualifies, any reduction scheme.
    for (int attempt = 0; attempt < 2 && !found; ++attempt) {
      const bool mask_reduction = attempt == 0 && isLowp(g.dtype);
      if (attempt == 1 && !isLowp(g.dtype)) break;
      LtPref pref;
      checkCublas(cublasLtMatmulPreferenceCreate(&pref.h), "cublasLtMatmulPreferenceCreate", n);
      setPref(pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(ws_bytes), n);
      setPref(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a, n);
      setPref(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b, n);
      setPref(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c, n);
      setPref(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c, n);
      if (mask_reduction)
        setPref(pref.h, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE), n);
      cublasLtMatmulHeuristicResult_t result{};
      int returned = 0;
      const cublasStatus_t st =
          cublasLtMatmulAlgoGetHeuristic(ctx.libs->lt, desc.h, la.h, lb.h, lc.h, lc.h, pref.h, 1, &result, &returned);
      if (st == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
        algo = result.algo;
        found = true;
      } else if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) {
        checkCublas(st, "cublasLtMatmulAlgoGetHeuristic", n);
      }
    }
    if (!found)
      fail((n ? n->describe() + ": " : std::string()) + "cuBLASLt has no algorithm for this GEMM (m=" +
           std::to_string(plan.m) + ", n=" + std::to_string(plan.p) + ", k=" + std::to_string(plan.k) +
           ", batch=" + std::to_string(plan.batch) + ", " + std::string(dtypeName(g.dtype)) + ")");
    std::lock_guard<std::mutex> lock(cache.mu);
    cache.algos.emplace(key, algo);
  }

  const float alpha = 1.0f, beta = 0.0f;
  for (int64_t l = 0; l < launches; ++l) {
    const void* pa = bytePtr(g.b) + static_cast<size_t>(plan.b_base[static_cast<size_t>(l)]) * es;
    const void* pb = bytePtr(g.a) + static_cast<size_t>(plan.a_base[static_cast<size_t>(l)]) * es;
    void* pc = bytePtr(g.c) + static_cast<size_t>(l * plan.batch * plan.m * plan.p) * es;
    checkCublas(cublasLtMatmul(ctx.libs->lt, desc.h, &alpha, pa, la.h, pb, lb.h, &beta, pc, lc.h, pc, lc.h, &algo, ws,
                               ws_bytes, ctx.stream),
                "cublasLtMatmul", n);
  }
}

// ---- cuBLAS -----------------------------------------------------------------------

/// Sets the handle's math mode for one call and restores the previous one.
struct MathModeGuard {
  cublasHandle_t h;
  cublasMath_t saved = CUBLAS_DEFAULT_MATH;
  MathModeGuard(cublasHandle_t handle, cublasMath_t mode, const Node* n) : h(handle) {
    checkCublas(cublasGetMathMode(h, &saved), "cublasGetMathMode", n);
    checkCublas(cublasSetMathMode(h, mode), "cublasSetMathMode", n);
  }
  ~MathModeGuard() { cublasSetMathMode(h, saved); }
  MathModeGuard(const MathModeGuard&) = delete;
  MathModeGuard& operator=(const MathModeGuard&) = delete;
};

/// relu in place over a [rows, cols] output (f32/f64) with cuDNN's activation;
/// NaN propagates, as the CPU's x < 0 ? 0 : x.
void reluInPlace(void* y, DType dt, int64_t rows, int64_t cols, CudaContext& ctx) {
  const Node* n = ctx.node;
  cudnnHandle_t h = ctx.libs->dnn;
  checkCudnn(cudnnSetStream(h, ctx.stream), "cudnnSetStream", n);
  cudnnTensorDescriptor_t d = nullptr;
  cudnnActivationDescriptor_t act = nullptr;
  checkCudnn(cudnnCreateTensorDescriptor(&d), "cudnnCreateTensorDescriptor", n);
  cudnnStatus_t st = cudnnCreateActivationDescriptor(&act);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, dt == DType::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT, 1, 1,
                                    static_cast<int>(rows), static_cast<int>(cols));
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnSetActivationDescriptor(act, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0);
  if (st == CUDNN_STATUS_SUCCESS) {
    const double one_d = 1.0, zero_d = 0.0;
    const float one_f = 1.0f, zero_f = 0.0f;
    const bool f64 = dt == DType::F64;
    st = cudnnActivationForward(h, act, f64 ? static_cast<const void*>(&one_d) : &one_f, d, y,
                                f64 ? static_cast<const void*>(&zero_d) : &zero_f, d, y);
  }
  if (act) cudnnDestroyActivationDescriptor(act);
  cudnnDestroyTensorDescriptor(d);
  checkCudnn(st, "cudnnActivationForward (linear relu)", n);
}

void runCublas(const GemmPlan& plan, const GemmArgs& g, CudaContext& ctx) {
  const Node* n = ctx.node;
  cublasHandle_t h = ctx.libs->blas;
  checkCublas(cublasSetStream(h, ctx.stream), "cublasSetStream", n);
  void* ws = nullptr;
  size_t ws_bytes = 0;
  alignedWorkspace(ctx, ws, ws_bytes);
  // cublasSetStream just reset the workspace to cuBLAS's own pool: use ours.
  checkCublas(cublasSetWorkspace(h, ws, ws_bytes), "cublasSetWorkspace", n);
  const bool lowp = isLowp(g.dtype);
  const MathModeGuard guard(
      h,
      lowp ? static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)
           : CUBLAS_DEFAULT_MATH,
      n);
  const cudaDataType_t t = cudaType(g.dtype);
  const size_t es = dtypeSize(g.dtype);
  if (g.bias) broadcastRows(g.c, g.bias, plan.m, static_cast<size_t>(plan.p) * es, ctx);
  const double alpha_d = 1.0, beta_d = g.bias ? 1.0 : 0.0;
  const float alpha_f = 1.0f, beta_f = g.bias ? 1.0f : 0.0f;
  const bool f64 = g.dtype == DType::F64;
  const void* alpha = f64 ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = f64 ? static_cast<const void*>(&beta_d) : &beta_f;
  const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  for (int64_t l = 0; l < plan.launches(); ++l) {
    const void* pa = bytePtr(g.b) + static_cast<size_t>(plan.b_base[static_cast<size_t>(l)]) * es;
    const void* pb = bytePtr(g.a) + static_cast<size_t>(plan.a_base[static_cast<size_t>(l)]) * es;
    void* pc = bytePtr(g.c) + static_cast<size_t>(l * plan.batch * plan.m * plan.p) * es;
    checkCublas(
        cublasGemmStridedBatchedEx(h, plan.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   plan.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(plan.p),
                                   static_cast<int>(plan.m), static_cast<int>(plan.k), alpha, pa, t,
                                   static_cast<int>(plan.trans_b ? plan.k : plan.p), plan.stride_b, pb, t,
                                   static_cast<int>(plan.trans_a ? plan.m : plan.k), plan.stride_a, beta, pc, t,
                                   static_cast<int>(plan.p), plan.m * plan.p, static_cast<int>(plan.batch), compute,
                                   CUBLAS_GEMM_DEFAULT),
        "cublasGemmStridedBatchedEx", n);
  }
  if (g.relu) reluInPlace(g.c, g.dtype, plan.m, plan.p, ctx);
}

// ---- kernels ----------------------------------------------------------------------

using Runner = void (*)(const GemmPlan&, const GemmArgs&, CudaContext&);

template <Runner run>
void matmulKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                  CudaContext& ctx) {
  const GemmPlan plan = planProduct(n);  // matmul or gemm
  const GemmArgs g{in[0].dtype(), in[0].data, in[1].data, out[0].data};
  if (plan.launches() == 0 || emptyProduct(plan, g, out[0], ctx)) return;
  run(plan, g, ctx);
}

template <Runner run>
void linearKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out,
                  CudaContext& ctx) {
  const GemmPlan plan = planLinear(n);
  GemmArgs g{in[0].dtype(), in[0].data, in[1].data, out[0].data};
  if (in.size() == 3) g.bias = in[2].data;
  g.relu = n.s("activation") == "relu";
  if (emptyProduct(plan, g, out[0], ctx)) return;
  if (plan.k == 0) {  // bias rows written; relu left (cuBLAS path only: the cublaslt predicate rejects it)
    reluInPlace(g.c, g.dtype, plan.m, plan.p, ctx);
    return;
  }
  run(plan, g, ctx);
}

}  // namespace

void registerCudaGemmKernels(CudaKernelRegistry& r) {
  auto def = [](const char* op, const char* dialect, int priority, KernelPredicate pred, CudaKernelFn fn) {
    CudaKernelDef k;
    k.op = op;
    k.dialect = dialect;
    k.name = std::string(dialect) + "." + op;
    k.priority = priority;
    k.supports = pred;
    k.fn = fn;
    k.workspace = gemmWorkspace;
    return k;
  };
  r.add(def("matmul", "cublaslt", 20, ltSupports, matmulKernel<runLt>));
  r.add(def("gemm", "cublaslt", 20, ltSupports, matmulKernel<runLt>));
  r.add(def("linear", "cublaslt", 20, ltSupports, linearKernel<runLt>));
  r.add(def("matmul", "cublas", 10, cublasSupports, matmulKernel<runCublas>));
  r.add(def("gemm", "cublas", 10, cublasSupports, matmulKernel<runCublas>));
  r.add(def("linear", "cublas", 10, cublasSupports, linearKernel<runCublas>));
}

}  // namespace kiln::cuda
