// CUDA kernels of fused_elementwise and fused_reduction (passes/fuse.cpp,
// core/ops/fused.cpp): one kernel generated per body (fused_codegen.h),
// compiled with NVRTC and loaded when the plan is bound (`prepare`, never
// inside a step; nvrtc_compiler.h caches the compilation in memory and on
// disk), then launched with cudaLaunchKernel on the node's stream.
//
// Results: the elementwise part computes what the one-op CUDA kernels (and
// the CPU) compute, formula for formula in the same dtype; the reduction
// follows the one-op CUDA sum's plan and order (fp32 accumulation for f32,
// deterministic, no atomics), so it differs from the CPU's double
// accumulation by rounding only.
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernel.h"
#include "backend/cuda/fused_codegen.h"
#include "backend/cuda/nvrtc_compiler.h"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 256;

/// What a node's kernels depend on: its body and the reduction's attributes.
struct NodeKey {
  std::string op, body, reduce;  ///< body: the region's text IR
  std::vector<int64_t> dims;
  int64_t keepdim = 0;

  explicit NodeKey(const Node& n) : op(n.op()), body(attrToString(*n.attr("body"))) {
    if (n.is(Op::fused_reduction)) {
      reduce = n.s("reduce");
      dims = n.is("dims");
      keepdim = n.i("keepdim");
    }
  }
  /// Compares all but the body without allocating (called on every launch;
  /// the body is compared by its region's address, Registry::Bound).
  bool matchesBesideBody(const Node& n) const {
    if (n.op() != op) return false;
    return !n.is(Op::fused_reduction) || (n.s("reduce") == reduce && n.is("dims") == dims && n.i("keepdim") == keepdim);
  }
  std::string text() const {
    std::string s = op + "\n" + reduce + "\n" + std::to_string(keepdim) + "\n";
    for (int64_t d : dims) s += std::to_string(d) + ",";
    return s + "\n" + body;
  }
};

/// A node's layout, source and (once prepared) loaded kernels, shared by
/// every node with the same key.
struct Generated {
  explicit Generated(const Node& n) : key(n), layout(analyzeFused(n)), source(fusedKernelSource(n, layout)) {}
  NodeKey key;
  FusedLayout layout;
  std::string source;
  std::shared_ptr<const LoadedCudaModule> module;  ///< null until prepared
};

struct Registry {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<Generated>> by_key;  ///< by NodeKey::text()
  /// The last lookup per node address, checked against the node on use (an
  /// address may be reused by another graph's node): the node's body region
  /// (held, so no other region can take its address) and its kernels.
  struct Bound {
    std::shared_ptr<const Graph> region;
    std::shared_ptr<Generated> gen;
  };
  std::unordered_map<const Node*, Bound> by_node;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: kernels stay loaded for the process
  return *r;
}

/// The node's generated kernel (analysis and source; no compilation).
std::shared_ptr<Generated> generatedFor(const Node& n) {
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.by_node.find(&n);
    if (it != r.by_node.end() && &n.subgraph("body") == it->second.region.get() &&
        it->second.gen->key.matchesBesideBody(n))
      return it->second.gen;
  }
  const std::string text = NodeKey(n).text();
  std::shared_ptr<Generated> gen;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.by_key.find(text);
    if (it != r.by_key.end()) gen = it->second;
  }
  if (!gen) {
    auto g = std::make_shared<Generated>(n);  // throws for a node the codegen cannot run
    std::lock_guard<std::mutex> lock(r.mu);
    gen = r.by_key.emplace(text, std::move(g)).first->second;
  }
  std::lock_guard<std::mutex> lock(r.mu);
  // Nodes whose region only this registry still holds are gone.
  std::erase_if(r.by_node, [](const auto& entry) { return entry.second.region.use_count() == 1; });
  r.by_node.insert_or_assign(&n, Registry::Bound{std::get<GraphAttr>(*n.attr("body")).graph, gen});
  return gen;
}

/// Generate, compile (cached) and load the node's kernels.
std::shared_ptr<const Generated> preparedFor(const Node& n) {
  std::shared_ptr<Generated> gen = generatedFor(n);
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (gen->module) return gen;
  }
  auto m = loadCudaSource(gen->source, fusedKernelNames(gen->layout), n.describe());
  if (!m) fail(m.error().message);
  std::lock_guard<std::mutex> lock(r.mu);
  if (!gen->module) gen->module = *m;
  return gen;
}

void prepareFused(const Node& n) {
  try {
    (void)preparedFor(n);
  } catch (const KilnException& e) {
    const std::string what = e.what(), who = n.describe();
    if (what.compare(0, who.size(), who) == 0) throw;
    fail(who + ": " + what);
  }
}

bool fusedSupported(const Node& n) {
  try {
    (void)generatedFor(n);
    return true;
  } catch (const std::exception&) {  // not a body the codegen implements
    return false;
  }
}

size_t fusedWorkspace(const Node& n) {
  return fusedWorkspaceBytes(generatedFor(n)->layout);
}

void launch(cudaKernel_t k, dim3 grid, dim3 block, std::vector<uint64_t>& params, CudaContext& ctx, const char* what) {
  void* args[] = {params.data()};
  check(cudaLaunchKernel(reinterpret_cast<const void*>(k), grid, block, args, 0, ctx.stream), what, ctx.node);
}

void fusedKernel(const Node& n, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out, CudaContext& ctx) {
  // Prepared when the plan was bound; a caller that skipped prepare pays the
  // (cached) compilation here, outside any capture it should be in.
  const std::shared_ptr<const Generated> gen = preparedFor(n);
  const FusedLayout& l = gen->layout;
  if (l.reduction ? l.plan.outputs == 0 : l.numel == 0) return;
  std::vector<const void*> ins;
  for (const DeviceTensor& t : in) ins.push_back(t.data);
  std::vector<void*> outs;
  for (const DeviceTensor& t : out) outs.push_back(t.data);
  void* partial = nullptr;
  if (const size_t need = fusedWorkspaceBytes(l)) {
    if (!ctx.workspace || ctx.workspace_bytes < need)
      fail(n.describe() + ": needs " + std::to_string(need) + " bytes of workspace, got " +
           std::to_string(ctx.workspace_bytes));
    partial = ctx.workspace;
  }
  std::vector<uint64_t> params = packFusedParams(l, ins, outs, partial);
  const std::vector<cudaKernel_t>& k = gen->module->kernels;
  if (!l.reduction) {
    const int64_t blocks = std::clamp<int64_t>((l.numel + kThreads - 1) / kThreads, 1, 65535 * 8);
    launch(k[0], dim3(static_cast<unsigned>(blocks)), dim3(kThreads), params, ctx, "nvrtc.fused_elementwise launch");
    return;
  }
  const FusedReducePlan& p = l.plan;
  launch(k[0], dim3(static_cast<unsigned>(p.blocks)), dim3(static_cast<unsigned>(p.W), static_cast<unsigned>(p.H)),
         params, ctx, "nvrtc.fused_reduction launch");
  if (p.splits > 1) {
    const int64_t blocks = (p.outputs + kThreads / 32 - 1) / (kThreads / 32);
    launch(k[1], dim3(static_cast<unsigned>(blocks)), dim3(kThreads), params, ctx, "nvrtc.fused_reduction finalize");
  }
}

}  // namespace

void registerCudaFusedKernels(CudaKernelRegistry& r) {
  CudaKernelDef ew;
  ew.op = "fused_elementwise";
  ew.dialect = "nvrtc";
  ew.name = "nvrtc.fused_elementwise";
  ew.priority = 20;
  ew.supports = fusedSupported;
  ew.fn = fusedKernel;
  ew.prepare = prepareFused;
  // As the CPU's: every index reads all its operand elements before it
  // stores its outputs, so output 0 may be an input's buffer.
  ew.writes_over_input = true;
  r.add(std::move(ew));

  CudaKernelDef red;
  red.op = "fused_reduction";
  red.dialect = "nvrtc";
  red.name = "nvrtc.fused_reduction";
  red.priority = 20;
  red.supports = fusedSupported;
  red.fn = fusedKernel;
  red.workspace = fusedWorkspace;
  red.prepare = prepareFused;
  r.add(std::move(red));
}

}  // namespace kiln::cuda
