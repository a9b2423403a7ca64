#include "backend/training_session.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <sstream>

#include "backend/checkpoint.h"
#include "backend/comm/collective_engine.h"
#include "backend/comm/gather_tensors.h"
#include "core/graph_hash.h"
#include "passes/muon.h"
#include "passes/optimizer.h"

namespace kiln {
namespace {

bool isState(ValueRole r) {
  return r == ValueRole::Param || r == ValueRole::Buffer || r == ValueRole::Const || r == ValueRole::OptState;
}

/// The cross_entropy node fed (directly or through a reshape) by `target`.
const Node* crossEntropyOf(const Value* target) {
  for (const Use& u : target->uses()) {
    if (u.user->is(Op::cross_entropy) && u.index == 1) return u.user;
    if (u.user->is(Op::reshape))
      if (const Node* n = crossEntropyOf(u.user->output())) return n;
  }
  return nullptr;
}

}  // namespace

Result<std::unique_ptr<TrainingSession>> TrainingSession::create(const Model& model, TrainingConfig config,
                                                                 TrainingGraphKind kind, CompiledStep* compiled) {
  std::unique_ptr<TrainingSession> s(new TrainingSession());
  s->config_ = std::move(config);
  s->kind_ = kind;
  const bool cuda = s->config_.device == "cuda";
  if (!cuda && s->config_.device != "cpu")
    return Error{"--device " + s->config_.device + ": unknown device (cpu or cuda)"};
  const DeviceBackend* backend = nullptr;
  if (cuda) {
    auto b = cudaBackend();
    if (!b) return b.error();
    backend = *b;
  }
  // One memory model: the passes count memory under the rules of the
  // device's kernels, and the memory_plan pass's plan is the one its
  // executor runs (when it runs nodes one at a time).
  s->config_.passes.memory =
      cuda ? backend->memoryRules(s->config_.kernels.dialects) : cpuMemoryRules(s->config_.kernels.dialects);
  std::shared_ptr<const MemoryPlan> plan;
  if (compiled) {
    s->graph_ = std::make_unique<Graph>(std::move(compiled->graph));
    s->trace_ = std::move(compiled->trace);
  } else {
    // CUDA has no attention kernel yet: matmul/softmax stay there.
    s->config_.passes.cpu_only_ops = !cuda;
    auto g = buildTrainingGraph(model.graph, s->config_.passes, kind, &s->trace_, s->config_.pass_options,
                                s->config_.pipeline);
    if (!g) return g.error();
    s->graph_ = std::make_unique<Graph>(std::move(*g));
    plan = std::move(s->config_.passes.memory_plan);
  }
  if (cuda) {
    DeviceRunnerOptions ro;
    ro.plan = plan;
    ro.seed = s->config_.seed;
    ro.kernels = s->config_.kernels;
    if (CollectiveEngine* comm = s->config_.collectives.get(); comm && comm->size() > 1) {
      // NCCL runs the step's collectives; the ranks meet through an id rank 0
      // makes and broadcasts over the host communicator (Gloo).
      ro.rank = comm->rank();
      ro.world_size = comm->size();
      ro.local_rank = s->config_.local_rank;
      ro.local_world_size = s->config_.local_world_size;
      ro.nccl_init_timeout = s->config_.rendezvous_timeout;
      ro.nccl_timeout = s->config_.collective_timeout;
      if (ro.rank == 0) {
        auto id = backend->ncclUniqueId();
        if (!id) return id.error();
        ro.nccl_id = *id;
      }
      auto shared = catchErrors([&]() -> bool {
        broadcastBytes(comm->communicator(), ro.nccl_id, 0);
        return true;
      });
      if (!shared) return Error{"sharing the NCCL id from rank 0: " + shared.error().message};
    }
    auto runner = backend->create(*s->graph_, ro);
    if (!runner) return runner.error();
    s->runner_ = std::move(*runner);
  } else {
    auto ex = CpuExecutor::create(*s->graph_, {.seed = s->config_.seed,
                                               .num_threads = s->config_.num_threads,
                                               .concurrent_nodes = s->config_.concurrent_nodes,
                                               .min_beside_micros = s->config_.min_beside_micros,
                                               .kernels = s->config_.kernels,
                                               .collectives = s->config_.collectives.get(),
                                               .plan = plan});
    if (!ex) return ex.error();
    auto cpu = std::make_unique<CpuStepRunner>(*s->graph_, std::move(*ex));
    s->cpu_ = cpu.get();
    s->runner_ = std::move(cpu);
  }

  if (s->config_.compile_only) return s;
  for (Value* v : s->graph_->inputs()) {
    if (!isState(v->role())) continue;
    // Optimizer state starts as zeros, made at the first step (torch.optim's
    // state is lazy too): compiling GPT-2-small must not fill 1 GB of moments.
    if (v->role() == ValueRole::OptState) continue;
    auto it = model.weights.find(v->name());
    if (it == model.weights.end()) return Error{"model " + model.source + " has no tensor for '" + v->name() + "'"};
    // Shared, not copied: while the caller's model also holds a tensor, step()
    // does not donate it, so the update goes to a new buffer and the model
    // stays as it was.
    s->state_[v->name()] = it->second;
  }
  for (const auto& [name, t] : model.weights) {
    const Value* v = s->graph_->findInput(name);
    bool is_const = (v && v->role() == ValueRole::Const) || name.rfind("__const", 0) == 0;
    if (!v && !is_const && !model.aliases.count(name)) s->untouched_[name] = t;
  }
  s->aliases_ = model.aliases;
  s->model_fingerprint_ = "model graph " + hashHex(structuralHash(model.graph)) + "\n";
  for (const Value* v : s->graph_->inputs())
    if (v->role() == ValueRole::Param || v->role() == ValueRole::Buffer)
      s->model_fingerprint_ += v->name() + " " + v->type().str() + "\n";
  if (Status st = s->broadcastState(); !st) return st.error();
  return s;
}

namespace {

/// The first line where `mine` differs from rank 0's `theirs` (fingerprints
/// as model_fingerprint_ makes them), in words.
std::string firstDifference(const std::string& theirs, const std::string& mine) {
  std::istringstream a(theirs), b(mine);
  std::string x, y;
  for (;;) {
    const bool more_a = static_cast<bool>(std::getline(a, x)), more_b = static_cast<bool>(std::getline(b, y));
    if (!more_a && !more_b) return "they differ";
    if (x == y) continue;
    auto nameOf = [](const std::string& line) { return line.substr(0, line.rfind(' ')); };
    auto typeOf = [](const std::string& line) { return line.substr(line.rfind(' ') + 1); };
    if (!more_a) return "'" + nameOf(y) + "' is not in rank 0's model";
    if (!more_b) return "'" + nameOf(x) + "' of rank 0's model is missing here";
    if (x.rfind("model graph ", 0) == 0 || y.rfind("model graph ", 0) == 0)
      return "the model graphs differ (structural hash " + typeOf(y) + " here, " + typeOf(x) + " on rank 0)";
    if (nameOf(x) == nameOf(y))
      return "'" + nameOf(y) + "' is " + typeOf(y) + " here and " + typeOf(x) + " on rank 0";
    return "'" + nameOf(y) + "' here where rank 0 has '" + nameOf(x) + "'";
  }
}

}  // namespace

Status TrainingSession::broadcastState() {
  CollectiveEngine* comm = config_.collectives.get();
  if (!comm || comm->size() <= 1) return {};
  // Every rank must hold rank 0's model (the same file, the same options),
  // or the broadcast below would pair up tensors that do not match. Each
  // rank compares with rank 0, then all learn whether any rank differs.
  std::string problem;
  try {
    std::string rank0 = model_fingerprint_;
    broadcastBytes(comm->communicator(), rank0, 0);
    if (rank0 != model_fingerprint_) problem = firstDifference(rank0, model_fingerprint_);
    float differ = problem.empty() ? 0.0f : 1.0f;
    comm->communicator().allreduceSum(&differ, 1, DType::F32);
    if (problem.empty() && differ > 0)
      problem = "another rank holds a different model (its error names the difference)";
    else if (!problem.empty())
      problem = "this rank's model is not rank 0's: " + problem;
  } catch (const KilnException& e) {
    return Error{std::string("comparing the model with rank 0's: ") + e.what()};
  }
  if (!problem.empty()) return Error{problem};
  // Every rank starts from rank 0's parameters and buffers, as DDP's
  // constructor makes them (ranks that loaded the same file change nothing).
  // state_ shares the model's buffers: copy before writing into them.
  try {
    for (auto& [name, t] : state_) {
      const Value* v = graph_->findInput(name);
      if (!v || (v->role() != ValueRole::Param && v->role() != ValueRole::Buffer) || !t.bytes()) continue;
      Tensor own(t.type());
      std::memcpy(own.raw(), t.raw(), t.bytes());
      comm->communicator().broadcast(own.raw(), own.bytes(), 0);
      t = std::move(own);
    }
  } catch (const KilnException& e) {
    return Error{std::string("broadcasting the initial weights from rank 0: ") + e.what()};
  }
  return {};
}

std::vector<const Value*> TrainingSession::batchInputs() const {
  std::vector<const Value*> out;
  for (const Value* v : graph_->inputs())
    if (v->role() == ValueRole::Data) out.push_back(v);
  return out;
}

Status TrainingSession::checkBatch(const TensorMap& batch, const std::string& where) const {
  for (const Value* v : batchInputs()) {
    auto it = batch.find(v->name());
    if (it == batch.end()) {
      std::string why = v->name() == "target"
                            ? " (the " + std::string(lossKindName(config_.passes.training.loss)) + " loss needs it)"
                            : " (model input " + v->type().str() + ")";
      return Error{where + ": no tensor '" + v->name() + "'" + why};
    }
    if (it->second.type() != v->type())
      return Error{where + ": '" + v->name() + "' is " + it->second.type().str() + ", the model needs " +
                   v->type().str()};
    if (v->name() == "target")
      if (const Node* ce = crossEntropyOf(v)) {
        const int64_t classes = ce->input(0)->shape().size() == 1 ? ce->input(0)->shape()[0] : ce->input(0)->shape()[1];
        const int64_t ignore = ce->i("ignore_index");
        const Tensor& t = it->second;
        for (int64_t i = 0; i < t.numel(); ++i) {
          double c = t.at(i);
          if ((c < 0 || c >= static_cast<double>(classes)) && c != static_cast<double>(ignore))
            return Error{where + ": target[" + std::to_string(i) + "] = " + std::to_string(static_cast<int64_t>(c)) +
                         " is not a class index in [0, " + std::to_string(classes) + ")"};
        }
      }
  }
  return {};
}

Tensor TrainingSession::optStateOrZeros(const Value* v) const {
  auto it = state_.find(v->name());
  return it != state_.end() ? it->second : Tensor(v->type());
}

Status TrainingSession::pushState() {
  for (const Value* v : graph_->inputs()) {
    if (!isState(v->role())) continue;
    auto it = state_.find(v->name());
    const Tensor t = it != state_.end() ? it->second : optStateOrZeros(v);  // fresh zeros before the first step
    if (Status st = runner_->setState(v->name(), t); !st) return st;
  }
  if (Status st = runner_->setRunIndex(static_cast<uint64_t>(steps_)); !st) return st;
  runner_stale_ = false;
  return {};
}

void TrainingSession::pullState() const {
  if (!host_stale_) return;
  for (const Value* v : graph_->inputs()) {
    if (!isState(v->role()) || v->role() == ValueRole::Const) continue;
    auto t = runner_->read(v->name());
    if (!t) fail("reading '" + v->name() + "' back from the " + runner_->deviceName() + ": " + t.error().message);
    state_[v->name()] = std::move(*t);
  }
  host_stale_ = false;
}

Result<Tensor> TrainingSession::lastOutput(size_t i) const {
  if (!ran_) return Error{"no step has run yet"};
  return runner_->read(graph_->outputs()[i].name);
}

Status TrainingSession::step(const TensorMap& batch) {
  if (config_.compile_only) return Error{"this session was built to compile only (it holds no weights)"};
  if (runner_stale_)
    if (Status st = pushState(); !st) return Error{"handing the state to the step: " + st.error().message};
  // The runner holds the state now; the session's copy (read back for a
  // stateDict() or a checkpoint) is dropped, so that on the CPU what the
  // runner alone holds is updated in place. A tensor the caller still holds
  // (its model's weights at the first step, a stateDict() it kept) is not.
  state_.clear();
  host_stale_ = true;
  TensorMap staged;
  for (const Value* v : batchInputs()) {
    auto it = batch.find(v->name());
    if (it == batch.end()) return Error{"batch has no tensor '" + v->name() + "'"};
    staged[v->name()] = it->second;
  }
  if (graph_->findInput(kLearningRateInput)) staged[kLearningRateInput] = Tensor::scalar(DType::F64, nextLr());
  if (graph_->findInput(kMuonLearningRateInput))
    staged[kMuonLearningRateInput] = Tensor::scalar(DType::F64, config_.schedule.at(config_.muon_lr, steps_));
  if (Status st = runner_->setBatch(staged); !st)
    return Error{"step " + std::to_string(steps_) + ": " + st.error().message};
  if (Status st = runner_->run(); !st) return Error{"step " + std::to_string(steps_) + ": " + st.error().message};
  ran_ = true;
  ++steps_;
  return {};
}

Result<double> TrainingSession::readLoss() const {
  const auto& outs = graph_->outputs();
  for (size_t i = 0; i < outs.size(); ++i)
    if (outs[i].role == OutputRole::Loss) {
      auto t = lastOutput(i);
      if (!t) return t.error();
      return t->at(0);
    }
  return Error{"the graph has no loss output"};
}

std::map<std::string, double> TrainingSession::readMetrics() const {
  std::map<std::string, double> m;
  const auto& outs = graph_->outputs();
  for (size_t i = 0; i < outs.size(); ++i)
    if (outs[i].role == OutputRole::Metric)
      if (auto t = lastOutput(i)) m[outs[i].name] = t->at(0);
  return m;
}

TensorMap TrainingSession::gradients() const {
  TensorMap g;
  const auto& outs = graph_->outputs();
  for (size_t i = 0; i < outs.size(); ++i)
    if (outs[i].role == OutputRole::Gradient)
      if (auto t = lastOutput(i)) g[outs[i].name] = *t;
  for (const auto& [alias, target] : aliases_)
    if (g.count(target)) g[alias] = g[target];
  return g;
}

TensorMap TrainingSession::stateDict() const {
  pullState();
  TensorMap sd = untouched_;
  for (const Value* v : graph_->inputs())
    if (v->role() == ValueRole::Param || v->role() == ValueRole::Buffer) sd[v->name()] = state_.at(v->name());
  for (const auto& [alias, target] : aliases_)
    if (sd.count(target)) sd[alias] = sd[target];
  return sd;
}

TensorMap TrainingSession::optimizerState() const {
  pullState();
  TensorMap opt;
  for (const Value* v : graph_->inputs())
    if (v->role() == ValueRole::OptState) opt[v->name()] = optStateOrZeros(v);
  return opt;
}

Model TrainingSession::currentWeights() const {
  Model m;
  m.weights = stateDict();
  for (const Value* v : graph_->inputs()) {
    if (v->role() != ValueRole::Const) continue;
    auto it = state_.find(v->name());
    if (it != state_.end()) {
      m.weights[v->name()] = it->second;
    } else if (auto t = runner_->read(v->name())) {
      m.weights[v->name()] = *t;
    }
  }
  m.aliases = aliases_;
  return m;
}

Status TrainingSession::saveCheckpoint(const std::string& dir, int keep) const {
  TensorMap opt = optimizerState();
  CollectiveEngine* comm = config_.collectives.get();
  if (comm && comm->size() > 1) {
    // Under ZeRO-1 each rank holds its parameters' optimizer state: rank 0
    // writes the union (every rank gathers, as every rank calls this).
    if (config_.passes.training.data_parallel.zero_stage == 1) try {
        opt = allGatherTensors(comm->communicator(), opt);
      } catch (const KilnException& e) {
        return Error{"gathering the sharded optimizer state for checkpoint " + dir + ": " + e.what()};
      }
  }
  Status written = comm && comm->size() > 1 && comm->rank() != 0 ? Status{} : writeOwnCheckpoint(dir, keep, opt);
  if (comm && comm->size() > 1 && written) {
    // The others wait for rank 0's write here, with the checkpoint timeout,
    // not in the next step's first collective with the collective timeout.
    // A rank 0 that fails to write exits, and the others fail at once.
    try {
      comm->communicator().barrier(config_.checkpoint_timeout);
    } catch (const KilnException& e) {
      return Error{"waiting for rank 0 to write checkpoint " + dir + ": " + e.what()};
    }
  }
  return written;
}

Status TrainingSession::writeOwnCheckpoint(const std::string& dir, int keep, TensorMap& opt) const {
  Checkpoint c{stateDict(), std::move(opt), nlohmann::json::object()};
  c.trainer["format"] = "kiln-checkpoint";
  c.trainer["version"] = 1;
  c.trainer["steps_done"] = steps_;
  c.trainer["optimizer"] = std::string(optimizerKindName(config_.passes.training.optimizer.kind));
  c.trainer["loss"] = std::string(lossKindName(config_.passes.training.loss));
  c.trainer["seed"] = config_.seed;
  c.trainer["lr"] = config_.lr;
  if (auto l = readLoss()) c.trainer["last_loss"] = *l;
  return writeCheckpoint(dir, c, keep);
}

namespace {

/// The checkpoint in `dir` as rank 0 reads it, on every rank: the others may
/// not see rank 0's file system (no shared disk between machines). Rank 0's
/// error, if it has one, is every rank's.
Result<Checkpoint> readCheckpointOnRank0(Communicator& comm, const std::string& dir,
                                         std::chrono::milliseconds timeout) {
  CheckpointFiles files;
  std::string error;
  if (comm.rank() == 0) {
    auto read = readCheckpointFiles(dir);
    if (read)
      files = std::move(*read);
    else
      error = read.error().message;
  }
  try {
    comm.barrier(timeout);  // the others wait for rank 0's reading with the checkpoint timeout
    broadcastBytes(comm, error, 0);
    if (!error.empty()) return Error{error + (comm.rank() == 0 ? "" : " (as rank 0 read it)")};
    for (std::string* part : {&files.step_dir, &files.model, &files.optimizer, &files.trainer})
      broadcastBytes(comm, *part, 0);
  } catch (const KilnException& e) {
    return Error{"resume: sending checkpoint " + dir + " from rank 0: " + e.what()};
  }
  return parseCheckpoint(files);
}

}  // namespace

Status TrainingSession::loadCheckpoint(const std::string& dir) {
  CollectiveEngine* comm = config_.collectives.get();
  auto c = comm && comm->size() > 1 ? readCheckpointOnRank0(comm->communicator(), dir, config_.checkpoint_timeout) : readCheckpoint(dir);
  if (!c) return c.error();
  std::string opt = std::string(optimizerKindName(config_.passes.training.optimizer.kind));
  if (c->trainer.value("optimizer", opt) != opt)
    return Error{"resume: " + dir + " was saved with optimizer " + c->trainer.value("optimizer", std::string()) +
                 ", this run uses " + opt};
  TensorMap next = state_;
  for (const Value* v : graph_->inputs()) {
    if (!isState(v->role()) || v->role() == ValueRole::Const) continue;
    const TensorMap& src = v->role() == ValueRole::OptState ? c->optimizer : c->model;
    auto it = src.find(v->name());
    if (it == src.end())
      return Error{"resume: checkpoint " + dir + " has no tensor '" + v->name() + "'" +
                   (v->role() == ValueRole::OptState ? " (saved with other optimizer settings?)" : "")};
    if (it->second.type() != v->type())
      return Error{"resume: '" + v->name() + "' in " + dir + " is " + it->second.type().str() + ", expected " +
                   v->type().str()};
    next[v->name()] = it->second;
  }
  state_ = std::move(next);
  steps_ = c->trainer["steps_done"].get<int64_t>();
  host_stale_ = false;
  runner_stale_ = true;
  ran_ = false;
  return {};
}

Status TrainingSession::setWeights(const TensorMap& state_dict) {
  if (config_.compile_only) return Error{"this session was built to compile only (it holds no weights)"};
  pullState();
  TensorMap next = state_;
  for (const Value* v : graph_->inputs()) {
    if (v->role() != ValueRole::Param && v->role() != ValueRole::Buffer) continue;
    auto it = state_dict.find(v->name());
    if (it == state_dict.end()) return Error{"no tensor '" + v->name() + "' to take the weights from"};
    if (it->second.type() != v->type())
      return Error{"'" + v->name() + "' is " + it->second.type().str() + ", this step needs " + v->type().str()};
    next[v->name()] = it->second;
  }
  state_ = std::move(next);
  runner_stale_ = true;
  return {};
}

Status TrainingSession::adoptState(const TrainingSession& prev) {
  if (Status st = setWeights(prev.stateDict()); !st) return Error{"carrying the training state over: " + st.error().message};
  const TensorMap opt = prev.optimizerState();
  for (const Value* v : graph_->inputs()) {
    if (v->role() != ValueRole::OptState) continue;
    auto it = opt.find(v->name());
    if (it == opt.end()) {
      state_.erase(v->name());  // zeros at the next step, as for a parameter that starts training now
      continue;
    }
    if (it->second.type() != v->type())
      return Error{"carrying the training state over: optimizer state '" + v->name() + "' is " +
                   it->second.type().str() + ", this step needs " + v->type().str()};
    state_[v->name()] = it->second;
  }
  steps_ = prev.steps_;
  return {};
}

}  // namespace kiln
