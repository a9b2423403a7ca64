#include "backend/cuda/cuda_executor.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_collectives.h"
#include "backend/cuda/cuda_libraries.h"
#include "backend/cuda/cuda_node_runner.h"
#include "backend/cuda/cuda_step_kernels.h"
#include "backend/cuda/cuda_sync.h"
#include "backend/cuda/kernels_optim.h"
#include "backend/cuda/nccl_communicator.h"
#include "backend/kernel_memory_rules.h"
#include "core/liveness.h"
#include "core/op_table.h"

namespace kiln::cuda {
namespace {

bool persistent(ValueRole r) {
  return r == ValueRole::Param || r == ValueRole::Buffer || r == ValueRole::OptState || r == ValueRole::Const;
}

Status asStatus(const Result<bool>& r) {
  return r ? Status() : Status(r.error());
}

bool isUpdate(OutputRole r) {
  return r == OutputRole::ParamUpdate || r == OutputRole::BufferUpdate || r == OutputRole::OptStateUpdate;
}

/// Chooses a kernel per node (kernel_selection.h); candidates are timed with
/// the node runner's CUDA events.
Status chooseKernels(const Graph& graph, const CudaExecutorOptions& o, std::vector<const Node*>& nodes,
                     std::vector<const CudaKernelDef*>& kernels, std::vector<KernelChoice>& choices) {
  const CudaKernelRegistry& reg = CudaKernelRegistry::get();
  const KernelSelection& sel = o.kernels;
  if (Status st = checkFixedKernels(sel, graph.numNodes()); !st) return st;
  const auto time = [&](const Node& n, const std::vector<const CudaKernelDef*>& fits) {
    const std::vector<Tensor> inputs = autotuneInputs(n);
    std::vector<KernelTiming> ts;
    for (const CudaKernelDef* c : fits) {
      auto r = runNode(n, inputs, c, {.seed = o.seed, .timing_runs = 5});
      ts.push_back(r ? KernelTiming{c->name, r->best_millis, {}} : KernelTiming{c->name, -1, r.error().message});
    }
    return ts;
  };
  MissingKernels missing;
  std::map<std::string, std::vector<KernelTiming>> timed;
  size_t i = 0;
  for (const auto& owned : graph.nodes()) {
    const Node& n = *owned;
    auto picked = catchErrors([&]() -> std::optional<std::pair<const CudaKernelDef*, KernelChoice>> {
      const std::vector<const CudaKernelDef*> fits = kernelCandidates(reg, n, i, sel);
      if (fits.empty()) return std::nullopt;
      return pickKernel(n, i, fits, sel, timed, time);
    });
    ++i;
    if (!picked) return picked.error();
    if (!*picked) {
      missing.add(n, whyNoKernel(reg, n, sel.dialects));
      continue;
    }
    nodes.push_back(&n);
    kernels.push_back((*picked)->first);
    choices.push_back(std::move((*picked)->second));
  }
  if (!missing.empty()) return Error{"no CUDA kernel for " + missing.str()};
  return {};
}

}  // namespace

Result<std::unique_ptr<CudaExecutor>> CudaExecutor::create(const Graph& graph, CudaExecutorOptions options) {
  std::string why;
  if (!deviceAvailable(&why)) return Error{"--device cuda: " + why};
  std::unique_ptr<CudaExecutor> ex(new CudaExecutor());
  ex->graph_ = &graph;
  ex->options_ = std::move(options);
  auto st = catchErrors([&]() -> bool {
    check(cudaSetDevice(ex->options_.device), "cudaSetDevice");
    Status chosen = chooseKernels(graph, ex->options_, ex->nodes_, ex->kernels_, ex->choices_);
    if (!chosen) fail(chosen.error().message);
    Status bound = ex->bind();
    if (!bound) fail(bound.error().message);
    return true;
  });
  if (!st) return st.error();
  return ex;
}

Status CudaExecutor::bind() {
  return asStatus(catchErrors([&]() -> bool {
    libs_ = std::make_unique<Libraries>();
    check(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking), "cudaStreamCreate (compute)");
    check(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "cudaStreamCreate (copy)");
    check(cudaEventCreateWithFlags(&batch_ready_, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventCreateWithFlags(&batch_taken_, cudaEventDisableTiming), "cudaEventCreate");

    // The GPU's memory rules, the ones the passes counted with: the executor
    // owns the state buffers, so every update they allow is written in
    // place, and elementwise results over inputs read last.
    const MemoryRules rules = cudaMemoryRules(options_.kernels.dialects);
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (Status st = checkKernelFollowsRules(*kernels_[i], *nodes_[i], rules); !st) fail(st.error().message);
    const StepLiveness step = analyzeStepLiveness(*graph_, rules);
    const InPlaceUpdates in_place = step.all();
    plan_ = reusablePlan(options_.plan, *graph_, rules, {});  // one node at a time
    if (!plan_) plan_ = std::make_shared<const MemoryPlan>(planMemory(step, rules.target));
    const MemoryPlan& plan = *plan_;

    auto alloc = [&](size_t bytes, const char* what) -> void* {
      void* p = deviceAlloc(arenaSize(std::max<size_t>(bytes, 1)), what);
      allocations_.push_back(p);
      device_bytes_ += arenaSize(std::max<size_t>(bytes, 1));
      return p;
    };
    arena_ = static_cast<unsigned char*>(alloc(plan.arena_bytes, "the step's arena"));
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (kernels_[i]->prepare) kernels_[i]->prepare(*nodes_[i]);  // e.g. NVRTC: at compile time, not in a step
      if (kernels_[i]->workspace) workspace_bytes_ = std::max(workspace_bytes_, kernels_[i]->workspace(*nodes_[i]));
    }
    workspace_ = workspace_bytes_ ? alloc(workspace_bytes_, "kernel workspace") : nullptr;
    run_seed_ = static_cast<uint64_t*>(alloc(sizeof(uint64_t), "the run seed"));
    error_flag_ = static_cast<int*>(alloc(sizeof(int), "the fault flag"));
    check(cudaMemsetAsync(error_flag_, 0, sizeof(int), compute_), "clearing the fault flag");
    check(cudaMemcpyAsync(run_seed_, &options_.seed, sizeof(uint64_t), cudaMemcpyHostToDevice, compute_),
          "setting the seed");
    streamSync(compute_, "executor set-up");

    // Graph inputs: persistent state (zeroed until set) or staged per step.
    for (const Value* v : graph_->inputs()) {
      const size_t bytes = v->type().bytes();
      void* d = alloc(bytes, ("input " + v->name()).c_str());
      addr_[v] = d;
      if (persistent(v->role())) {
        check(cudaMemsetAsync(d, 0, bytes, compute_), "zeroing state");
      } else {
        void* pinned = pinnedAlloc(std::max<size_t>(bytes, 1), ("staging " + v->name()).c_str());
        allocations_.push_back(nullptr);  // pinned memory is freed separately
        staged_[v->name()] = Staged{v, d, alloc(bytes, ("staging " + v->name()).c_str()), pinned, bytes};
      }
    }
    // Node outputs: in place over their donor, a view of their source, a
    // planned arena slot, or (returned values) a buffer of their own.
    for (const Node* n : nodes_) {
      for (const Value* o : n->outputs()) {
        if (auto it = in_place.find(o); it != in_place.end()) {
          addr_[o] = addr_.at(it->second);
          continue;
        }
        const size_t b = plan.liveness.buffer_of.at(o);
        const BufferLife& life = plan.liveness.buffers[b];
        if (life.value != o) {
          addr_[o] = addr_.at(life.value);
        } else if (plan.offsets[b] >= 0) {
          addr_[o] = arena_ + plan.offsets[b];
        } else {
          addr_[o] = alloc(o->type().bytes(), ("output " + o->name()).c_str());
        }
      }
    }
    for (const Node* n : nodes_) {
      std::vector<DeviceTensor> in, out;
      for (const Value* v : n->inputs()) in.push_back({v->type(), addr_.at(v)});
      for (const Value* v : n->outputs()) out.push_back({v->type(), addr_.at(v)});
      ins_.push_back(std::move(in));
      outs_.push_back(std::move(out));
    }
    // With a communicator (NCCL), collectives go on the communication
    // stream, each with a staging buffer of its own (several may be in
    // flight); a node waits for those whose outputs (or views of them) it reads.
    if (options_.nccl) {
      // The host's waits on this executor's steps are bounded by NCCL's
      // collective timeout and abort the communicator past it.
      setHostWaitWatch(options_.nccl->hostWaitWatch());
      check(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking), "cudaStreamCreate (communication)");
      std::unordered_map<size_t, size_t> collective_of_buffer;
      for (size_t i = 0; i < nodes_.size(); ++i) {
        if (!nodes_[i]->def().has(kCollective)) continue;
        Collective& c = collectives_[i];
        c.staging = alloc(collectiveStagingBytes(*nodes_[i]), "a collective's staging buffer");
        check(cudaEventCreateWithFlags(&c.packed, cudaEventDisableTiming), "cudaEventCreate");
        check(cudaEventCreateWithFlags(&c.done, cudaEventDisableTiming), "cudaEventCreate");
        for (const Value* o : nodes_[i]->outputs()) collective_of_buffer[plan.liveness.buffer_of.at(o)] = i;
      }
      waits_.assign(nodes_.size(), {});
      for (size_t i = 0; i < nodes_.size(); ++i)
        for (const Value* v : nodes_[i]->inputs())
          if (auto it = collective_of_buffer.find(plan.liveness.buffer_of.at(v));
              it != collective_of_buffer.end() && it->second != i &&
              std::find(waits_[i].begin(), waits_[i].end(), it->second) == waits_[i].end())
            waits_[i].push_back(it->second);
    }
    // Consecutive optimizer updates with the same attributes (a run of
    // them, as the optimizer pass emits them without split_updates) become
    // one multi-tensor launch instead of one launch per parameter.
    for (size_t i = 0; i < nodes_.size();) {
      size_t j = i + 1;
      const auto fusable = [&](size_t k) {
        return kernels_[k]->name == "cuda.adam_update" || kernels_[k]->name == "cuda.sgd_update";
      };
      if (fusable(i))
        while (j < nodes_.size() && fusable(j) && multiTensorCompatible(*nodes_[i], *nodes_[j])) ++j;
      if (j - i > 1) multi_tensor_runs_[i] = j;
      i = j;
    }
    // Updates not written in place are copied over their input at the end.
    std::unordered_map<std::string, const Value*> input_by_name;
    for (const Value* v : graph_->inputs()) input_by_name[v->name()] = v;
    for (const GraphOutput& o : graph_->outputs()) {
      if (!isUpdate(o.role)) continue;
      auto it = input_by_name.find(o.name);
      if (it == input_by_name.end()) fail("update output '" + o.name + "' replaces no graph input");
      void* from = addr_.at(o.value);
      void* to = addr_.at(it->second);
      if (from != to) state_copies_.push_back({from, to, o.value->type().bytes()});
    }
    streamSync(compute_, "executor set-up");
    return true;
  }));
}

CudaExecutor::~CudaExecutor() {
  if (options_.nccl) setHostWaitWatch(nullptr);
  drain(compute_);  // teardown, not a step
  drain(copy_);
  if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
  for (auto& [_, s] : staged_) pinnedFree(s.pinned);
  for (void* p : allocations_)
    if (p) deviceFree(p);
  if (batch_ready_) cudaEventDestroy(batch_ready_);
  if (batch_taken_) cudaEventDestroy(batch_taken_);
  for (cudaEvent_t e : node_events_) cudaEventDestroy(e);
  if (comm_) drain(comm_);
  for (auto& [_, c] : collectives_) {
    if (c.packed) cudaEventDestroy(c.packed);
    if (c.done) cudaEventDestroy(c.done);
  }
  if (comm_) cudaStreamDestroy(comm_);
  if (compute_) cudaStreamDestroy(compute_);
  if (copy_) cudaStreamDestroy(copy_);
}

Status CudaExecutor::setState(const std::string& name, const Tensor& t) {
  return asStatus(catchErrors([&]() -> bool {
    for (const Value* v : graph_->inputs()) {
      if (v->name() != name) continue;
      if (!persistent(v->role())) fail("'" + name + "' is a per-step input: pass it to setBatch");
      if (t.type() != v->type())
        fail("'" + name + "' is " + v->type().str() + " in the step, the tensor given is " + t.type().str());
      copyToDevice(addr_.at(v), t.raw(), t.bytes(), compute_, ("uploading " + name).c_str());
      return true;
    }
    fail("the step has no input named '" + name + "'");
  }));
}

Status CudaExecutor::setBatch(const TensorMap& batch) {
  return asStatus(catchErrors([&]() -> bool {
    // The pinned buffers are free once the previous upload finished (long
    // ago, normally: it overlapped the previous step).
    if (batch_pending_) eventSync(batch_ready_, "waiting for the previous batch upload");
    check(cudaStreamWaitEvent(copy_, batch_taken_, 0), "ordering the batch upload");
    for (auto& [name, s] : staged_) {
      auto it = batch.find(name);
      if (it == batch.end()) {
        if (!s.set) fail("the batch has no tensor '" + name + "' (" + s.value->type().str() + ")");
        continue;  // keeps the last value (e.g. an unchanged scalar)
      }
      if (it->second.type() != s.value->type())
        fail("batch tensor '" + name + "' is " + it->second.type().str() + ", the step takes " + s.value->type().str());
      std::memcpy(s.pinned, it->second.raw(), s.bytes);
      check(cudaMemcpyAsync(s.next, s.pinned, s.bytes, cudaMemcpyHostToDevice, copy_), "uploading the batch");
      s.set = true;
    }
    check(cudaEventRecord(batch_ready_, copy_), "recording the batch upload");
    batch_pending_ = true;
    return true;
  }));
}

void CudaExecutor::enqueueStep() {
  CudaContext ctx;
  ctx.stream = compute_;
  ctx.libs = libs_.get();
  ctx.workspace = workspace_;
  ctx.workspace_bytes = workspace_bytes_;
  ctx.run_seed = run_seed_;
  ctx.error_flag = error_flag_;
  ctx.nccl = options_.nccl.get();
  std::vector<char> in_flight(collectives_.empty() ? 0 : nodes_.size(), 0);
  marked_.clear();
  const auto mark = [&](size_t i) {  // profiling: an event before node i
    if (!profiling_) return;
    check(cudaEventRecord(node_events_[i], compute_), "recording a node's start (profiling)", nodes_[i]);
    marked_.push_back(i);
  };
  const auto awaitCollectives = [&](size_t first, size_t end) {
    if (collectives_.empty()) return;
    for (size_t k = first; k < end; ++k)
      for (size_t j : waits_[k])
        if (in_flight[j]) {
          check(cudaStreamWaitEvent(compute_, collectives_.at(j).done, 0), "waiting for a collective", nodes_[k]);
          in_flight[j] = 0;
        }
  };
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (auto c = collectives_.find(i); c != collectives_.end()) {
      mark(i);
      enqueueCollective(*nodes_[i], ins_[i], outs_[i], c->second.staging, options_.nccl.get(), compute_, comm_,
                        c->second.packed, error_flag_, i);
      check(cudaEventRecord(c->second.done, comm_), "recording a collective's end", nodes_[i]);
      in_flight[i] = 1;
      continue;
    }
    if (auto run = multi_tensor_runs_.find(i); run != multi_tensor_runs_.end()) {
      const size_t end = run->second;
      awaitCollectives(i, end);
      mark(i);
      ctx.node_index = i;
      ctx.node = nodes_[i];
      enqueueMultiTensor({nodes_.begin() + i, nodes_.begin() + end}, {ins_.begin() + i, ins_.begin() + end},
                         {outs_.begin() + i, outs_.begin() + end}, ctx);
      i = end - 1;
      continue;
    }
    if (kernels_[i]->output_views_input0) continue;  // the output is the input's buffer
    awaitCollectives(i, i + 1);
    mark(i);
    ctx.node_index = i;
    ctx.node = nodes_[i];
    kernels_[i]->fn(*nodes_[i], ins_[i], outs_[i], ctx);
  }
  if (profiling_) check(cudaEventRecord(node_events_.back(), compute_), "recording the step's end (profiling)");
  // Join: every collective is complete before the updates are written back
  // (and before a capture ends).
  for (size_t j = 0; j < in_flight.size(); ++j)
    if (in_flight[j]) check(cudaStreamWaitEvent(compute_, collectives_.at(j).done, 0), "waiting for a collective");
  for (const Copy& c : state_copies_)
    check(cudaMemcpyAsync(c.to, c.from, c.bytes, cudaMemcpyDeviceToDevice, compute_), "writing an update back");
  enqueueAdvanceSeed(run_seed_, compute_);
}

Status CudaExecutor::run() {
  return asStatus(catchErrors([&]() -> bool {
    for (const auto& [name, s] : staged_)
      if (!s.set) fail("run() before setBatch() gave '" + name + "'");
    if (batch_pending_) {  // take the staged batch into the buffers the step reads
      check(cudaStreamWaitEvent(compute_, batch_ready_, 0), "waiting for the batch upload");
      for (auto& [_, s] : staged_)
        check(cudaMemcpyAsync(s.device, s.next, s.bytes, cudaMemcpyDeviceToDevice, compute_), "taking the batch");
      check(cudaEventRecord(batch_taken_, compute_), "recording the batch taken");
      batch_pending_ = false;
    }
    if (profiling_) {
      // Node by node with events; the wait is the profile's, not a step's.
      enqueueStep();
      eventSync(node_events_.back(), "waiting for a profiled step");
      for (size_t k = 0; k < marked_.size(); ++k) {
        const cudaEvent_t next = k + 1 < marked_.size() ? node_events_[marked_[k + 1]] : node_events_.back();
        float ms = 0;
        check(cudaEventElapsedTime(&ms, node_events_[marked_[k]], next), "reading a node's time (profiling)",
              nodes_[marked_[k]]);
        node_ms_[marked_[k]] += ms;
      }
    } else if (graph_exec_) {
      check(cudaGraphLaunch(graph_exec_, compute_), "replaying the step's CUDA graph");
    } else if (options_.cuda_graph && runs_ >= 1) {
      // Second run: capture. Global mode makes any synchronizing call fail.
      check(cudaStreamBeginCapture(compute_, cudaStreamCaptureModeGlobal), "starting the CUDA graph capture");
      cudaGraph_t g = nullptr;
      try {
        enqueueStep();
      } catch (...) {
        cudaStreamEndCapture(compute_, &g);
        if (g) cudaGraphDestroy(g);
        throw;
      }
      check(cudaStreamEndCapture(compute_, &g), "capturing the step (a kernel synchronized or allocated?)");
      const cudaError_t e = cudaGraphInstantiate(&graph_exec_, g, 0);
      cudaGraphDestroy(g);
      check(e, "instantiating the step's CUDA graph");
      check(cudaGraphLaunch(graph_exec_, compute_), "launching the step's CUDA graph");
    } else {
      enqueueStep();
    }
    ++runs_;
    return true;
  }));
}

Status CudaExecutor::setRunIndex(uint64_t index) {
  return asStatus(catchErrors([&]() -> bool {
    const uint64_t seed = options_.seed + index * 0x9E3779B97F4A7C15ull;  // what advanceSeedKernel reaches
    copyToDevice(run_seed_, &seed, sizeof seed, compute_, "setting the run seed");
    return true;
  }));
}

Status CudaExecutor::setProfiling(bool on) {
  return asStatus(catchErrors([&]() -> bool {
    if (on && node_events_.empty()) {
      node_events_.assign(nodes_.size() + 1, nullptr);
      for (cudaEvent_t& e : node_events_) check(cudaEventCreate(&e), "cudaEventCreate (profiling)");
    }
    profiling_ = on;
    node_ms_.assign(on ? nodes_.size() : 0, 0.0);
    return true;
  }));
}

void CudaExecutor::checkFaults() {
  int flag = 0;
  copyToHost(&flag, error_flag_, sizeof(int), compute_, "reading the fault flag");
  if (flag == 0) return;
  const size_t i = static_cast<size_t>(flag - 1);
  check(cudaMemsetAsync(error_flag_, 0, sizeof(int), compute_), "clearing the fault flag");
  fail((i < nodes_.size() ? nodes_[i]->describe() : "node " + std::to_string(i)) +
       ": an index in the data is out of range (flagged on the GPU by " +
       (i < kernels_.size() ? kernels_[i]->name : std::string("a kernel")) + ")");
}

Result<Tensor> CudaExecutor::read(const std::string& name) {
  return catchErrors([&]() -> Tensor {
    const Value* v = nullptr;
    for (const GraphOutput& o : graph_->outputs())
      if (o.name == name) v = o.value;
    if (!v)
      for (const Value* in : graph_->inputs())
        if (in->name() == name) v = in;
    if (!v) fail("the step has no output or input named '" + name + "'");
    Tensor t = Tensor::empty(v->type());
    copyToHost(t.raw(), addr_.at(v), t.bytes(), compute_, ("reading " + name).c_str());
    checkFaults();
    return t;
  });
}

}  // namespace kiln::cuda
