#include "backend/cpu/cpu_executor.h"

#include "backend/comm/collective_engine.h"
#include "backend/cpu/blas_threads.h"
#include "backend/cpu/node_stages.h"
#include "backend/kernel_memory_rules.h"
#include "core/op_table.h"
#include "core/trace.h"
#include "core/tsan_sync.h"

#include <chrono>
#include <cstdlib>
#include <map>
#include <unordered_map>

#include <omp.h>

namespace kiln {
namespace {

/// The OpenMP pool as the executor uses it for one create() or run():
/// `threads` threads (0: as the process has it) and no nested parallelism,
/// so loops inside a node that runs beside others stay on its thread; the
/// BLAS library's pool gets the same count (blas_threads.h). The process's
/// settings come back afterwards: one executor's thread count never leaks
/// into another's, or into the rest of the process.
class PoolScope {
 public:
  explicit PoolScope(int threads)
      : threads_(omp_get_max_threads()), levels_(omp_get_max_active_levels()), blas_(blasThreads()) {
    if (threads > 0) omp_set_num_threads(threads);
    setBlasThreads(threads);
    omp_set_max_active_levels(1);
  }
  ~PoolScope() {
    omp_set_num_threads(threads_);
    setBlasThreads(blas_);
    omp_set_max_active_levels(levels_);
  }
  PoolScope(const PoolScope&) = delete;
  PoolScope& operator=(const PoolScope&) = delete;

 private:
  const int threads_, levels_, blas_;
};

}  // namespace

Result<CpuExecutor> CpuExecutor::create(const Graph& graph, CpuExecutorOptions options) {
  CpuExecutor ex;
  ex.graph_ = &graph;
  ex.options_ = options;
  MissingKernels missing;
  const KernelRegistry& reg = KernelRegistry::cpu();
  // Selecting a kernel builds what it compiles (oneDNN JITs a convolution's
  // primitives in its predicate): independent per node, so on the pool,
  // with the thread count the runs will have (primitives bake it in).
  const PoolScope pool(options.num_threads);
  std::vector<const Node*> all;
  for (const auto& n : graph.nodes()) all.push_back(n.get());
  const KernelSelection& sel = options.kernels;
  if (Status st = checkFixedKernels(sel, all.size()); !st) return st.error();
  // Per node: the kernels that accept it, best first (one when not autotuning).
  std::vector<std::vector<const KernelDef*>> fits(all.size());
  std::vector<std::exception_ptr> errors(all.size());
  const size_t count = all.size();
  kilnTsanRelease(&reg);
#pragma omp parallel for schedule(dynamic, 1) if (count > 1)
  for (size_t i = 0; i < count; ++i) {
    kilnTsanAcquire(&reg);
    try {
      fits[i] = kernelCandidates(reg, *all[i], i, sel);
    } catch (...) {
      errors[i] = std::current_exception();
    }
    kilnTsanRelease(&reg);
  }
  kilnTsanAcquire(&reg);
  for (const std::exception_ptr& e : errors)
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const KilnException& k) {
        return Error{k.what()};
      }
    }
  // Autotuning: time the candidates of each distinct node signature once,
  // one node at a time with the whole pool (as the runs will have it).
  std::map<std::string, std::vector<KernelTiming>> timed;
  const auto time = [&](const Node& n, const std::vector<const KernelDef*>& ks) {
    return cpu::timeKernels(n, ks, ex.threads());
  };
  for (size_t i = 0; i < all.size(); ++i) {
    const Node* n = all[i];
    if (fits[i].empty()) {
      missing.add(*n, whyNoKernel(reg, *n, sel.dialects));
      continue;
    }
    auto picked = catchErrors([&] { return pickKernel(*n, i, fits[i], sel, timed, time); });
    if (!picked) return picked.error();
    ex.nodes_.push_back(n);
    ex.kernels_.push_back(picked->first);
    ex.choices_.push_back(std::move(picked->second));
  }
  if (!missing.empty()) return Error{"no CPU kernel for " + missing.str()};
  for (size_t i = 0; i < ex.nodes_.size(); ++i) ex.index_of_[ex.nodes_[i]] = i;
  // Views and writes in place follow the CPU's memory rules, the ones the
  // passes counted with; every bound kernel must do what they say.
  const MemoryRules rules = cpuMemoryRules(sel.dialects);
  for (size_t i = 0; i < ex.nodes_.size(); ++i)
    if (Status st = checkKernelFollowsRules(*ex.kernels_[i], *ex.nodes_[i], rules); !st) return st.error();
  const StepLiveness step = analyzeStepLiveness(graph, rules);
  ex.setDonors(step.all());
  if (options.concurrent_nodes) {
    ex.stages_ = groupIndependentNodes(step.plain, ex.kernels_, ex.donors_,
                                       options.min_beside_micros >= 0 ? options.min_beside_micros : kMinBesideMicros);
  } else {
    for (size_t i = 0; i < ex.nodes_.size(); ++i) ex.stages_.emplace_back(i, i + 1);
  }
  // The plan of the steady state: outputs written in place share their
  // donor's buffer; nodes that run together share no bytes.
  ex.plan_ = reusablePlan(options.plan, graph, rules, ex.stages_);
  if (!ex.plan_) ex.plan_ = std::make_shared<const MemoryPlan>(planMemory(step, rules.target, &ex.stages_));
  const MemoryPlan& plan = *ex.plan_;
  // Each intermediate is dropped after the last node that reads it (the
  // arena slot is reused by the plan; a fresh buffer goes back to the pool).
  std::unordered_map<const Value*, size_t> last_use;
  for (size_t i = 0; i < ex.nodes_.size(); ++i)
    for (const Value* v : ex.nodes_[i]->inputs()) last_use[v] = i;
  for (const GraphOutput& o : graph.outputs()) last_use[o.value] = SIZE_MAX;
  ex.frees_after_.resize(ex.nodes_.size());
  for (const auto& [v, i] : last_use)
    if (i != SIZE_MAX && !v->isGraphInput()) ex.frees_after_[i].push_back(v);
  for (const Node* n : ex.nodes_) {
    std::vector<int64_t> offsets;
    for (const Value* o : n->outputs()) {
      const size_t b = plan.liveness.buffer_of.at(o);
      offsets.push_back(plan.liveness.buffers[b].value == o ? plan.offsets[b] : -1);  // views: none of their own
    }
    ex.out_offsets_.push_back(std::move(offsets));
  }
  return ex;
}

void CpuExecutor::setDonors(const InPlaceUpdates& in_place) {
  for (const Node* n : nodes_) {
    std::vector<const Value*> d;
    for (const Value* o : n->outputs()) {
      auto it = in_place.find(o);
      d.push_back(it == in_place.end() ? nullptr : it->second);
    }
    donors_.push_back(std::move(d));
  }
}

/// What one run keeps while it walks the stages.
struct CpuExecutor::RunState {
  const std::set<std::string>& donated;
  std::unordered_map<const Value*, Tensor> env;
  bool inArena(const void* p) const { return arena && p >= arena && p < arena_end; }
  const unsigned char* arena = nullptr;
  const unsigned char* arena_end = nullptr;
};

const Tensor* CpuExecutor::overwritten(size_t i, size_t o, const RunState& st) const {
  const Value* d = donors_[i][o];
  if (!d) return nullptr;
  const Tensor& t = st.env.at(d);
  // A graph input only when the caller donated it; an intermediate only in
  // its planned slot (the plan merged the two values' buffers there).
  const bool ok = d->isGraphInput() ? st.donated.count(d->name()) > 0 : st.inArena(t.raw());
  return ok ? &t : nullptr;
}

void CpuExecutor::bindNode(size_t i, RunState& st, NodeRun& r) const {
  const Node& n = *nodes_[i];
  r.ins.clear();
  for (Value* v : n.inputs()) r.ins.push_back(st.env.at(v));
  r.outs.assign(n.numOutputs(), Tensor());
  r.error = nullptr;
  for (size_t o = 0; o < n.numOutputs(); ++o) {
    if (const Tensor* over = overwritten(i, o, st)) {
      r.outs[o] = *over;  // written in place: no poison, the kernel reads it
    } else if (const int64_t at = out_offsets_[i][o]; at >= 0 && n.output(o)->type().bytes() > 0) {
      r.outs[o] = Tensor::adopt(n.output(o)->type(), std::shared_ptr<unsigned char[]>(arena_, arena_.get() + at));
      // The slot holds whatever the arena held last: poison it like a fresh
      // buffer so tests catch a kernel that reads before it writes.
      r.outs[o].poisonForTests();
    }
  }
}

void CpuExecutor::runKernel(size_t i, NodeRun& r, KernelContext& ctx) {
  const Node& n = *nodes_[i];
  ctx.node_index = i;
  const bool traced = trace_ && trace_->recording();
  const bool timed = !node_ms_.empty() || traced;
  const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
  try {
    kernels_[i]->fn(n, r.ins, r.outs, ctx);
  } catch (const KilnException& e) {
    fail(std::string(e.what()).rfind(n.op(), 0) == 0 ? e.what() : n.describe() + ": " + e.what());
  }
  if (!timed) return;
  const auto t1 = std::chrono::steady_clock::now();
  if (!node_ms_.empty()) node_ms_[i] += std::chrono::duration<double, std::milli>(t1 - t0).count();
  if (traced) {
    uint64_t bytes = 0;
    for (const Value* v : n.outputs()) bytes += v->type().bytes();
    trace_->slice(n.op(), "node", t0, t1,
                  {{"node", n.describe()},
                   {"kernel", kernels_[i]->name},
                   {"bytes", std::to_string(bytes)},
                   {"index", std::to_string(i)},
                   {"threads", std::to_string(ctx.num_threads)}});
  }
}

void CpuExecutor::storeNode(size_t i, RunState& st, NodeRun& r) const {
  const Node& n = *nodes_[i];
  for (size_t o = 0; o < n.numOutputs(); ++o) {
    Tensor& t = r.outs[o];
    if (!t.defined() || t.type() != n.output(o)->type())
      fail(n.describe() + ": kernel " + kernels_[i]->name + " produced " +
           (t.defined() ? t.type().str() : std::string("nothing")) + " for output " + std::to_string(o) +
           ", expected " + n.output(o)->type().str());
    // A buffer in the arena must be this output's own slot, or its input's for a view.
    const void* p = t.raw();
    const int64_t at = out_offsets_[i][o];
    const bool view = kernels_[i]->output_views_input0 && p == r.ins[0].raw();
    const Tensor* over = overwritten(i, o, st);
    if (st.inArena(p) && p != arena_.get() + at && !view && !(over && p == over->raw()))
      fail(n.describe() + ": kernel " + kernels_[i]->name + " returned output " + std::to_string(o) +
           " in another value's planned buffer (a view of an input? register it with output_views_input0)");
    st.env[n.output(o)] = std::move(t);
  }
  r.ins.clear();  // hold no input past its last reader
}

Result<std::vector<Tensor>> CpuExecutor::run(const TensorMap& inputs, const std::set<std::string>& donated) {
  return catchErrors([&]() -> std::vector<Tensor> {
    const PoolScope pool(options_.num_threads);
    RunState st{donated, {}};
    for (Value* v : graph_->inputs()) {
      auto it = inputs.find(v->name());
      if (it == inputs.end()) fail("no tensor bound to graph input '" + v->name() + "'");
      if (it->second.type() != v->type())
        fail("graph input '" + v->name() + "' expects " + v->type().str() + ", got " + it->second.type().str());
      st.env[v] = it->second;
    }
    if (!arena_ && plan_->arena_bytes > 0) {
      arena_ = std::shared_ptr<unsigned char[]>(
          static_cast<unsigned char*>(std::aligned_alloc(kArenaAlignment, plan_->arena_bytes)),
          [](unsigned char* p) { std::free(p); });
      if (!arena_) fail("cannot allocate the " + std::to_string(plan_->arena_bytes) + "-byte arena of the step");
    }
    st.arena = arena_.get();
    st.arena_end = arena_.get() + plan_->arena_bytes;

    KernelContext ctx;
    ctx.seed = options_.seed + runs_++ * 0x9E3779B97F4A7C15ull;
    ctx.num_threads = threads();
    // Collectives run on the engine's thread from their node to the first
    // node that reads one of their outputs (or the end of the run).
    CollectiveEngine* comm = options_.collectives;
    ctx.collectives = comm;
    std::vector<char> in_flight(comm ? nodes_.size() : 0, 0);
    struct Drain {  // a failed run leaves nothing writing into the arena
      CollectiveEngine* comm;
      ~Drain() {
        if (comm) comm->drain();
      }
    } drain{comm};
    auto awaitInputs = [&](size_t i) {
      for (const Value* v : nodes_[i]->inputs())
        if (v->producer())
          if (const size_t p = index_of_.at(v->producer()); in_flight[p]) {
            in_flight[p] = 0;
            awaitCollective(*comm, p);
          }
    };
    if (comm) comm->beginStep();
    std::vector<NodeRun> runs(1);
    for (const auto& stage : stages_) {
      // Plain variables, not a structured binding: the OpenMP region below
      // captures `first`, which C++20 allows for bindings but clang 14 not.
      const size_t first = stage.first, end = stage.second;
      const size_t count = end - first;
      if (runs.size() < count) runs.resize(count);
      if (comm)
        for (size_t i = first; i < end; ++i) awaitInputs(i);
      for (size_t i = first; i < end; ++i) bindNode(i, st, runs[i - first]);
      if (count == 1 || ctx.num_threads <= 1) {
        for (size_t i = first; i < end; ++i) {
          runKernel(i, runs[i - first], ctx);
          if (comm && nodes_[i]->def().has(kCollective)) in_flight[i] = 1;
        }
      } else {
        const int team = static_cast<int>(std::min<size_t>(count, static_cast<size_t>(ctx.num_threads)));
        kilnTsanRelease(this);  // fork
#pragma omp parallel for schedule(dynamic, 1) num_threads(team)
        for (size_t k = 0; k < count; ++k) {
          kilnTsanAcquire(this);
          KernelContext own = ctx;
          own.num_threads = 1;
          try {
            if (trace_ && trace_->recording() && omp_get_thread_num() > 0)
              trace_->nameThread("cpu pool " + std::to_string(omp_get_thread_num()), "pool");
            runKernel(first + k, runs[k], own);
          } catch (...) {
            runs[k].error = std::current_exception();
          }
          kilnTsanRelease(this);
        }
        kilnTsanAcquire(this);              // join
        for (size_t k = 0; k < count; ++k)  // the first failing node in order
          if (runs[k].error) std::rethrow_exception(runs[k].error);
      }
      for (size_t i = first; i < end; ++i) storeNode(i, st, runs[i - first]);
      for (size_t i = first; i < end; ++i)
        for (const Value* v : frees_after_[i]) st.env.erase(v);
    }
    if (comm)
      for (size_t i = 0; i < in_flight.size(); ++i)
        if (in_flight[i]) {
          in_flight[i] = 0;
          awaitCollective(*comm, i);
        }
    std::vector<Tensor> result;
    for (const GraphOutput& o : graph_->outputs()) result.push_back(st.env.at(o.value));
    return result;
  });
}

void CpuExecutor::awaitCollective(CollectiveEngine& comm, size_t i) const {
  // The executor blocked on the wire: a "wait" slice on its row (idle time).
  const bool traced = trace_ && trace_->recording();
  const auto t0 = traced ? TraceRecorder::Clock::now() : TraceRecorder::Clock::time_point();
  try {
    comm.wait(i);
    if (traced)
      trace_->slice("wait for " + nodes_[i]->op(), "wait", t0, TraceRecorder::Clock::now(),
                    {{"index", std::to_string(i)}});
  } catch (const KilnException& e) {
    fail(nodes_[i]->describe() + ": " + e.what());
  }
}

int CpuExecutor::threads() const {
  return options_.num_threads > 0 ? options_.num_threads : omp_get_max_threads();
}

Result<std::vector<Tensor>> CpuExecutor::runModel(const Model& model, const std::vector<Tensor>& data) {
  TensorMap bound = model.weights;
  size_t k = 0;
  for (Value* v : graph_->inputs()) {
    if (v->role() != ValueRole::Data) continue;
    if (k >= data.size())
      return Error{"model expects more data inputs than the " + std::to_string(data.size()) + " given"};
    bound[v->name()] = data[k++];
  }
  if (k != data.size())
    return Error{"model takes " + std::to_string(k) + " data inputs, got " + std::to_string(data.size())};
  return run(bound);
}

}  // namespace kiln
