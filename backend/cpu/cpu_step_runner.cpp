// The CPU's StepRunner (see cpu_step_runner.h).
#include "backend/cpu/cpu_step_runner.h"

#include <set>

namespace kiln {
namespace {

bool updatesState(OutputRole r) {
  return r == OutputRole::ParamUpdate || r == OutputRole::BufferUpdate || r == OutputRole::OptStateUpdate;
}

}  // namespace

CpuStepRunner::CpuStepRunner(const Graph& graph, CpuExecutor ex) : graph_(graph), ex_(std::move(ex)) {
  for (size_t i = 0; i < graph_.outputs().size(); ++i) output_index_[graph_.outputs()[i].name] = i;
}

Status CpuStepRunner::setState(const std::string& name, const Tensor& t) {
  const Value* v = graph_.findInput(name);
  if (!v) return Error{"the step has no input '" + name + "'"};
  if (t.type() != v->type()) return Error{"'" + name + "' is " + t.type().str() + ", the step takes " + v->type().str()};
  state_[name] = t;  // shared: donated only once nobody else holds it
  return {};
}

Status CpuStepRunner::setBatch(const TensorMap& batch) {
  batch_ = batch;
  return {};
}

Status CpuStepRunner::setRunIndex(uint64_t index) {
  ex_.setRunIndex(index);
  return {};
}

Status CpuStepRunner::run() {
  // State this runner alone holds is donated: the optimizer updates it in
  // place. A tensor someone else still holds is shared, not donated.
  std::set<std::string> donated;
  TensorMap inputs = std::move(batch_);
  batch_.clear();
  for (const auto& [name, t] : state_) {
    if (t.uniquelyOwned()) donated.insert(name);
    inputs[name] = t;
  }
  auto out = ex_.run(inputs, donated);
  if (!out) return out.error();
  inputs.clear();
  // State moves out of the outputs so that the runner is again its only holder.
  const auto& outs = graph_.outputs();
  for (size_t i = 0; i < outs.size(); ++i)
    if (updatesState(outs[i].role)) state_[outs[i].name] = std::move((*out)[i]);
  last_ = std::move(*out);
  return {};
}

Result<Tensor> CpuStepRunner::read(const std::string& name) {
  auto o = output_index_.find(name);
  if (o != output_index_.end() && !updatesState(graph_.outputs()[o->second].role)) {
    if (last_.empty()) return Error{"no step has run yet"};
    return last_[o->second];
  }
  auto s = state_.find(name);
  if (s != state_.end()) return s->second;
  return Error{"the step has no output or state '" + name + "'"};
}

}  // namespace kiln
