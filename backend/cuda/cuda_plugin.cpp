// libkiln_cuda.so's entry point (backend/device_step.h): the CUDA executor
// behind the DeviceStepRunner interface.
#include <cuda_runtime.h>

#include <cstdio>

#include <cublasLt.h>
#include <cudnn.h>

#include "backend/cuda/cuda_executor.h"
#include "backend/cuda/cuda_node_runner.h"
#include "backend/cuda/nccl_communicator.h"
#include "backend/device_step.h"

namespace kiln::cuda {
namespace {

class Runner final : public DeviceStepRunner {
 public:
  explicit Runner(std::unique_ptr<CudaExecutor> ex) : ex_(std::move(ex)) {}
  Status setState(const std::string& name, const Tensor& t) override { return ex_->setState(name, t); }
  Status setBatch(const TensorMap& batch) override { return ex_->setBatch(batch); }
  Status run() override { return ex_->run(); }
  Status setRunIndex(uint64_t index) override { return ex_->setRunIndex(index); }
  Result<Tensor> read(const std::string& name) override { return ex_->read(name); }
  const std::vector<KernelChoice>& kernelChoices() const override { return ex_->kernelChoices(); }
  const MemoryPlan& memoryPlan() const override { return ex_->memoryPlan(); }
  Status setProfiling(bool on) override { return ex_->setProfiling(on); }
  const std::vector<double>& nodeMillis() const override { return ex_->nodeMillis(); }
  std::string deviceName() const override {
    cudaDeviceProp p{};
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) return "CUDA device";
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %.1f GiB)", p.name, p.major, p.minor,
                  static_cast<double>(p.totalGlobalMem) / (1ull << 30));
    return buf;
  }

 private:
  std::unique_ptr<CudaExecutor> ex_;
};

std::vector<std::string> dialects() {
  return CudaKernelRegistry::get().dialects();
}

std::string target() {
  cudaDeviceProp p{};
  int runtime = 0;
  if (!deviceAvailable() || cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "none";
  cudaRuntimeGetVersion(&runtime);
  return std::string(p.name) + " sm_" + std::to_string(p.major) + std::to_string(p.minor) + " cudart " +
         std::to_string(runtime) + " cudnn " + std::to_string(cudnnGetVersion()) + " cublasLt " +
         std::to_string(cublasLtGetVersion());
}

Result<std::unique_ptr<DeviceStepRunner>> create(const Graph& graph, const DeviceRunnerOptions& o) {
  int device = 0;
  std::shared_ptr<NcclCommunicator> nccl;
  if (o.world_size > 1) {
    // One GPU per rank of this machine; NCCL joins on the current device.
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    auto gpu = gpuForLocalRank(o.local_rank, o.local_world_size, count);
    if (!gpu) return gpu.error();
    device = *gpu;
    if (cudaSetDevice(device) != cudaSuccess)
      return Error{"--device cuda: cannot select GPU " + std::to_string(device)};
    auto comm = NcclCommunicator::create(o.rank, o.world_size, o.nccl_id, {o.nccl_init_timeout, o.nccl_timeout});
    if (!comm) return comm.error();
    nccl = std::move(*comm);
  }
  auto ex = CudaExecutor::create(
      graph, {.seed = o.seed, .device = device, .kernels = o.kernels, .cuda_graph = true, .nccl = std::move(nccl),
                     .plan = o.plan});
  if (!ex) return ex.error();
  return std::unique_ptr<DeviceStepRunner>(std::make_unique<Runner>(std::move(*ex)));
}

MemoryRules memoryRules(const DialectOrder& order) {
  return cudaMemoryRules(order);
}

const DeviceBackend kBackend{dialects, target, create, NcclCommunicator::uniqueId, memoryRules};

}  // namespace
}  // namespace kiln::cuda

extern "C" __attribute__((visibility("default"))) const kiln::DeviceBackend* kiln_cuda_plugin_entry() {
  return &kiln::cuda::kBackend;
}
