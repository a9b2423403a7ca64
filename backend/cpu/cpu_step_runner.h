// The CPU's StepRunner (backend/step_executor.h): the CPU executor with the
// step's state held between runs. State nobody else holds is donated to the
// run, so the optimizer writes its updates over it (no second copy of the
// parameters and moments at the step's peak); a tensor someone else still
// holds (the caller's model at the first step, a state_dict the caller
// kept) is only read, and stays as it was.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "backend/cpu/cpu_executor.h"
#include "backend/step_executor.h"

namespace kiln {

class CpuStepRunner final : public StepRunner {
 public:
  CpuStepRunner(const Graph& graph, CpuExecutor ex);

  Status setState(const std::string& name, const Tensor& t) override;
  Status setBatch(const TensorMap& batch) override;
  Status setRunIndex(uint64_t index) override;
  Status run() override;
  Result<Tensor> read(const std::string& name) override;
  void setTrace(TraceRecorder* trace) override { ex_.setTrace(trace); }

  const std::vector<KernelChoice>& kernelChoices() const override { return ex_.kernelChoices(); }
  const MemoryPlan& memoryPlan() const override { return ex_.memoryPlan(); }
  std::string deviceName() const override { return ex_.deviceName(); }
  Status setProfiling(bool on) override { return ex_.setProfiling(on); }
  const std::vector<double>& nodeMillis() const override { return ex_.nodeMillis(); }
  const NodeStages& stages() const override { return ex_.stages(); }
  int threads() const override { return ex_.threads(); }

  CpuExecutor& executor() { return ex_; }
  const CpuExecutor& executor() const { return ex_; }

 private:
  const Graph& graph_;
  CpuExecutor ex_;
  TensorMap state_;                     ///< persistent inputs, by name
  TensorMap batch_;                     ///< the next run's per-step inputs
  std::vector<Tensor> last_;            ///< outputs of the last run (state updates moved into state_)
  std::map<std::string, size_t> output_index_;  ///< graph output name -> index
};

}  // namespace kiln
