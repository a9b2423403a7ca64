#include "backend/cuda/cuda_node_runner.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <memory>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_libraries.h"
#include "backend/cuda/cuda_sync.h"

namespace kiln::cuda {
namespace {

/// Device memory freed on scope exit.
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes, const Node& n) {
    try {
      p = deviceAlloc(bytes, "a single node's buffer");
    } catch (const KilnException& e) {
      fail(n.describe() + ": " + e.what());
    }
  }
  ~DeviceBuffer() { deviceFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~Stream() {
    if (s) cudaStreamDestroy(s);
  }
};

}  // namespace

bool deviceAvailable(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = "no usable CUDA driver or device (" + cudaMessage(e) + ")";
    return false;
  }
  if (count == 0) {
    if (why) *why = "no CUDA device";
    return false;
  }
  return true;
}

Result<NodeRunResult> runNode(const Node& n, std::span<const Tensor> inputs, const CudaKernelDef* k,
                              NodeRunOptions options) {
  return catchErrors([&]() -> NodeRunResult {
    if (!k) k = CudaKernelRegistry::get().select(n);
    if (!k) fail(n.describe() + ": no CUDA kernel (" + whyNoKernel(CudaKernelRegistry::get(), n, {}) + ")");
    if (inputs.size() != n.numInputs()) fail(n.describe() + ": runNode got the wrong number of inputs");
    static Libraries* libs = new Libraries();  // once per process, never torn down (tests, autotune)
    Stream stream;
    std::vector<std::unique_ptr<DeviceBuffer>> keep;
    std::vector<DeviceTensor> ins, outs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor& t = inputs[i];
      keep.push_back(std::make_unique<DeviceBuffer>(t.bytes(), n));
      copyToDevice(keep.back()->p, t.raw(), t.bytes(), stream.s, "uploading a node input");
      ins.push_back({t.type(), keep.back()->p});
    }
    for (size_t o = 0; o < n.numOutputs(); ++o) {
      const TensorType& t = n.output(o)->type();
      if (o == 0 && k->output_views_input0) {
        outs.push_back({t, ins.at(0).data});
        continue;
      }
      keep.push_back(std::make_unique<DeviceBuffer>(t.bytes(), n));
      // Poison the outputs: a kernel that leaves elements unwritten fails the comparison.
      check(cudaMemsetAsync(keep.back()->p, 0xFF, t.bytes(), stream.s), "poison", &n);
      outs.push_back({t, keep.back()->p});
    }
    if (k->prepare) k->prepare(n);
    const size_t ws = k->workspace ? k->workspace(n) : 0;
    DeviceBuffer workspace(ws, n), seed(sizeof(uint64_t), n), flag(sizeof(int), n);
    copyToDevice(seed.p, &options.seed, sizeof(uint64_t), stream.s, "uploading the seed");
    check(cudaMemsetAsync(flag.p, 0, sizeof(int), stream.s), "clear error flag", &n);
    CudaContext ctx;
    ctx.stream = stream.s;
    ctx.libs = libs;
    ctx.workspace = workspace.p;
    ctx.workspace_bytes = ws;
    ctx.node_index = options.node_index;
    ctx.run_seed = static_cast<const uint64_t*>(seed.p);
    ctx.error_flag = static_cast<int*>(flag.p);
    ctx.node = &n;
    k->fn(n, ins, outs, ctx);
    streamSync(stream.s, ("running " + k->name).c_str(), &n);
    NodeRunResult r;
    if (options.timing_runs > 0) {
      cudaEvent_t start, stop;
      check(cudaEventCreate(&start), "cudaEventCreate", &n);
      check(cudaEventCreate(&stop), "cudaEventCreate", &n);
      r.best_millis = 1e30;
      for (int i = 0; i < options.timing_runs; ++i) {
        check(cudaEventRecord(start, stream.s), "cudaEventRecord", &n);
        k->fn(n, ins, outs, ctx);
        check(cudaEventRecord(stop, stream.s), "cudaEventRecord", &n);
        eventSync(stop, ("timing " + k->name).c_str());
        float ms = 0;
        check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime", &n);
        r.best_millis = std::min(r.best_millis, static_cast<double>(ms));
      }
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
    }
    copyToHost(&r.error_flag, flag.p, sizeof(int), stream.s, "reading the fault flag");
    for (size_t o = 0; o < outs.size(); ++o) {
      Tensor t = Tensor::empty(outs[o].type);
      copyToHost(t.raw(), outs[o].data, t.bytes(), stream.s, "downloading a node output");
      r.outputs.push_back(std::move(t));
    }
    return r;
  });
}

}  // namespace kiln::cuda
