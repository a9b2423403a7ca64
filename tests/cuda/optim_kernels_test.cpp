// CUDA optimizer kernels (backend/cuda/kernels_optim.cu) against the CPU
// reference: one step of Adam, AdamW, SGD (momentum, Nesterov, dampening,
// weight decay), the skip_nonfinite no-op, global_norm over several inputs
// (and its determinism), and the multi-tensor entry point against the
// per-node kernel. Skips visibly without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/kernels_optim.h"
#include "tests/cuda/cuda_kernel_check.h"

namespace kiln::cuda::test {
namespace {

/// A graph of `nodes` optimizer nodes, node i updating the parameters
/// params[i]; all read %lr (f64), %step (f64) and %gs (f32). State inputs
/// are named m<k>/v<k> (Adam) or buf<k> (SGD with momentum).
std::string updateGraph(const std::string& op, const std::string& attrs, const std::string& dt,
                        const std::vector<std::vector<std::vector<int64_t>>>& params, bool momentum = false) {
  const bool adam = op == "adam_update";
  std::string in = "%lr: f64[] data, %step: f64[] data, %gs: f32[] data";
  std::string body, ret;
  int k = 0, out = 0;
  for (const auto& node : params) {
    std::string args = "%lr, %step, %gs", outs, types;
    for (const auto& shape : node) {
      const std::string t = ty(dt, shape), id = std::to_string(k++);
      std::vector<std::string> names = {"p" + id, "g" + id};
      if (adam) names.insert(names.end(), {"m" + id, "v" + id});
      if (momentum) names.push_back("buf" + id);
      for (const std::string& nm : names) {
        in += ", %" + nm + ": " + t + " data";
        args += ", %" + nm;
      }
      const int n_out = adam ? 3 : momentum ? 2 : 1;
      for (int j = 0; j < n_out; ++j) {
        const std::string o = "%" + std::to_string(out++);
        outs += (outs.empty() ? "" : ", ") + o;
        types += (types.empty() ? "" : ", ") + t;
        ret += (ret.empty() ? "" : ", ") + o + " \"o" + o.substr(1) + "\"";
      }
    }
    body +=
        "  " + outs + " = " + op + "(" + args + ")" + (attrs.empty() ? "" : " {" + attrs + "}") + " : " + types + "\n";
  }
  return "graph g(" + in + ") {\n" + body + "  return " + ret + "\n}\n";
}

/// Inputs for an update graph: lr, step and grad_scale as given, parameters
/// and gradients normal(0, 1), first moments and momentum buffers
/// normal(0, 0.1), second moments positive.
TensorMap updateInputs(const Graph& g, double lr, double step, double grad_scale, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  TensorMap in;
  for (const Value* v : g.inputs()) {
    Tensor t(v->type());
    const std::string& nm = v->name();
    for (int64_t i = 0; i < t.numel(); ++i) {
      double x = normal(rng);
      if (nm == "lr")
        x = lr;
      else if (nm == "step")
        x = step;
      else if (nm == "gs")
        x = grad_scale;
      else if (nm[0] == 'm' || nm[0] == 'b')
        x *= 0.1;
      else if (nm[0] == 'v')
        x = 0.01 * std::abs(x) + 1e-4;
      t.set(i, x);
    }
    in[v->name()] = t;
  }
  return in;
}

/// Runs the graph on the CPU (on copies of `in`: the updates are in place).
std::vector<Tensor> cpuRun(const Graph& g, const TensorMap& in) {
  TensorMap copy;
  for (const auto& [name, t] : in) copy[name] = t.clone();
  auto cpu = CpuExecutor::create(g, {});
  EXPECT_TRUE(cpu.ok()) << (cpu.ok() ? "" : cpu.error().message);
  if (!cpu.ok()) return {};
  auto out = cpu->run(copy);
  EXPECT_TRUE(out.ok()) << (out.ok() ? "" : out.error().message);
  return out.ok() ? *out : std::vector<Tensor>{};
}

std::vector<Tensor> nodeArgs(const Node& n, const TensorMap& in) {
  std::vector<Tensor> args;
  for (const Value* v : n.inputs()) args.push_back(in.at(v->name()));
  return args;
}

double tolFor(const std::string& dt) {
  return dt == "f64" ? 1e-12 : 1e-6;
}

const std::vector<std::vector<int64_t>> kShapes = {{7}, {33, 5}, {70000}};

TEST(CudaOptimizerKernels, Adam) {
  KILN_REQUIRE_GPU();
  const std::string configs[] = {
      "beta1=0.9, beta2=0.999, eps=1e-08, weight_decay=0.0, decoupled=0",
      "beta1=0.9, beta2=0.999, eps=1e-08, weight_decay=0.1, decoupled=0",   // L2 weight decay
      "beta1=0.9, beta2=0.999, eps=1e-08, weight_decay=0.01, decoupled=1",  // AdamW
      "beta1=0.8, beta2=0.99, eps=1e-06, weight_decay=0.05, decoupled=1",
  };
  for (const std::string dt : {"f32", "f64"})
    for (const std::string& attrs : configs)
      for (double step : {1.0, 3.0}) {
        const std::string ir = updateGraph("adam_update", attrs, dt, {kShapes});
        SCOPED_TRACE(dt + " step " + std::to_string(step) + " " + attrs);
        auto g = parseGraph(ir, "test");
        ASSERT_TRUE(g.ok()) << g.error().message;
        EXPECT_EQ(expectMatchesCpuOn(ir, updateInputs(*g, 1e-2, step, 0.5), {.tol = tolFor(dt)}), 1);
      }
}

TEST(CudaOptimizerKernels, Sgd) {
  KILN_REQUIRE_GPU();
  struct Config {
    std::string attrs;
    bool momentum;
  };
  const Config configs[] = {
      {"", false},
      {"weight_decay=0.0001", false},
      {"momentum=0.9", true},
      {"momentum=0.9, dampening=0.1, weight_decay=0.0001", true},
      {"momentum=0.9, nesterov=1", true},
      {"momentum=0.9, nesterov=1, weight_decay=0.01", true},
  };
  for (const std::string dt : {"f32", "f64"})
    for (const Config& c : configs)
      for (double step : {1.0, 2.0}) {  // the first step initializes the momentum buffer
        const std::string ir = updateGraph("sgd_update", c.attrs, dt, {kShapes}, c.momentum);
        SCOPED_TRACE(dt + " step " + std::to_string(step) + " " + c.attrs);
        auto g = parseGraph(ir, "test");
        ASSERT_TRUE(g.ok()) << g.error().message;
        EXPECT_EQ(expectMatchesCpuOn(ir, updateInputs(*g, 0.1, step, 0.75), {.tol = tolFor(dt)}), 1);
      }
}

TEST(CudaOptimizerKernels, SkipNonFinite) {
  KILN_REQUIRE_GPU();
  // An infinite grad_scale under skip_nonfinite: every output is its input.
  const std::string adam =
      updateGraph("adam_update", "beta1=0.9, beta2=0.999, eps=1e-08, weight_decay=0.01, decoupled=1, skip_nonfinite=1",
                  "f32", {kShapes});
  const std::string sgd = updateGraph("sgd_update", "momentum=0.9, skip_nonfinite=1", "f32", {kShapes}, true);
  for (const std::string& ir : {adam, sgd}) {
    auto g = parseGraph(ir, "test");
    ASSERT_TRUE(g.ok()) << g.error().message;
    EXPECT_EQ(expectMatchesCpuOn(ir, updateInputs(*g, 1e-2, 4, INFINITY), {.tol = 0}), 1);
  }
}

std::string normGraph(const std::vector<std::string>& types) {
  std::string in, args;
  for (size_t i = 0; i < types.size(); ++i) {
    in += (i ? ", " : "") + std::string("%t") + std::to_string(i) + ": " + types[i] + " data";
    args += (i ? ", " : "") + std::string("%t") + std::to_string(i);
  }
  const std::string out = types[0].substr(0, types[0].find('[')) + "[]";
  return "graph g(" + in + ") {\n  %0 = global_norm(" + args + ") : " + out + "\n  return %0 \"norm\"\n}\n";
}

TEST(CudaOptimizerKernels, GlobalNorm) {
  KILN_REQUIRE_GPU();
  CheckOptions o;
  o.tol = 1e-6;
  EXPECT_EQ(expectMatchesCpu(normGraph({"f32[100]", "f32[37,5]", "f32[300000]", "f32[]"}), o), 1);
  EXPECT_EQ(expectMatchesCpu(normGraph({"f32[64,64]", "f64[1000]", "f32[3]"}), o), 1);  // mixed dtypes
  o.tol = 1e-12;
  EXPECT_EQ(expectMatchesCpu(normGraph({"f64[100]", "f64[70000]", "f64[0]"}), o), 1);
  // More inputs than one launch's table holds, and more chunks than one launch's blocks.
  std::vector<std::string> many;
  for (int i = 0; i < kNormTensorsPerLaunch + 20; ++i) many.push_back("f32[" + std::to_string(1 + 37 * i) + "]");
  many.push_back("f32[" + std::to_string(kMultiTensorChunk * (kMultiTensorBlocks + 3) + 11) + "]");
  o.tol = 1e-6;
  EXPECT_EQ(expectMatchesCpu(normGraph(many), o), 1);
}

TEST(CudaOptimizerKernels, GlobalNormIsDeterministic) {
  KILN_REQUIRE_GPU();
  auto g = parseGraph(normGraph({"f32[1000003]", "f32[4097]", "f32[77,13]"}), "test");
  ASSERT_TRUE(g.ok()) << g.error().message;
  const Node& n = *g->nodes().front();
  const TensorMap in = drawInputs(*g, {});
  auto a = runNode(n, nodeArgs(n, in));
  auto b = runNode(n, nodeArgs(n, in));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->outputs[0].at(0), b->outputs[0].at(0));  // bit for bit
}

// ---- multi-tensor ------------------------------------------------------------------------

/// Device memory freed on scope exit (tests may allocate).
struct DeviceMem {
  void* p = nullptr;
  explicit DeviceMem(size_t bytes) {
    if (bytes) {
      EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
    }
  }
  ~DeviceMem() {
    if (p) cudaFree(p);
  }
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
};

/// Runs `nodes` through enqueueMultiTensor on uploaded copies of `in`
/// (outputs in place over the parameters and state when `in_place`) and
/// returns every node's outputs, downloaded.
std::vector<std::vector<Tensor>> runMultiTensor(const std::vector<const Node*>& nodes, const TensorMap& in,
                                                bool in_place) {
  std::vector<std::unique_ptr<DeviceMem>> keep;
  std::map<std::string, DeviceTensor> dev;
  for (const auto& [name, t] : in) {
    keep.push_back(std::make_unique<DeviceMem>(t.bytes()));
    EXPECT_EQ(cudaMemcpy(keep.back()->p, t.raw(), t.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
    dev[name] = DeviceTensor{t.type(), keep.back()->p};
  }
  std::vector<std::vector<DeviceTensor>> ins, outs;
  for (const Node* n : nodes) {
    ins.emplace_back();
    outs.emplace_back();
    for (const Value* v : n->inputs()) ins.back().push_back(dev.at(v->name()));
    const size_t per = n->op() == "adam_update" ? 4 : n->f("momentum") != 0 ? 3 : 2;
    const size_t out_per = n->numOutputs() / ((n->numInputs() - 3) / per);
    for (size_t o = 0; o < n->numOutputs(); ++o) {
      if (in_place) {
        // Output j of a group overwrites the parameter (j = 0) or its state
        // (j >= 1: the inputs after the gradient).
        const size_t group = o / out_per, j = o % out_per;
        outs.back().push_back(ins.back()[3 + group * per + (j == 0 ? 0 : j + 1)]);
        continue;
      }
      keep.push_back(std::make_unique<DeviceMem>(n->output(o)->type().bytes()));
      outs.back().push_back(DeviceTensor{n->output(o)->type(), keep.back()->p});
    }
  }
  cudaStream_t stream = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  DeviceMem flag(sizeof(int)), seed(sizeof(uint64_t));
  EXPECT_EQ(cudaMemset(flag.p, 0, sizeof(int)), cudaSuccess);
  EXPECT_EQ(cudaMemset(seed.p, 0, sizeof(uint64_t)), cudaSuccess);
  CudaContext ctx;
  ctx.stream = stream;
  ctx.error_flag = static_cast<int*>(flag.p);
  ctx.run_seed = static_cast<const uint64_t*>(seed.p);
  ctx.node = nodes.front();
  enqueueMultiTensor(nodes, ins, outs, ctx);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
  std::vector<std::vector<Tensor>> result;
  for (const auto& node_outs : outs) {
    result.emplace_back();
    for (const DeviceTensor& d : node_outs) {
      Tensor t = Tensor::empty(d.type);
      EXPECT_EQ(cudaMemcpy(t.raw(), d.data, t.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
      result.back().push_back(std::move(t));
    }
  }
  return result;
}

/// Multi-tensor results (out of place and in place) equal the per-node
/// kernel's bit for bit, and the CPU's within `tol`.
void expectMultiTensorMatches(const std::string& ir, double lr, double step, double gs, double tol) {
  auto g = parseGraph(ir, "test");
  ASSERT_TRUE(g.ok()) << g.error().message;
  const TensorMap in = updateInputs(*g, lr, step, gs);
  std::vector<const Node*> nodes;
  for (const auto& n : g->nodes()) nodes.push_back(n.get());
  const std::vector<Tensor> cpu = cpuRun(*g, in);
  ASSERT_EQ(cpu.size(), g->outputs().size());
  std::vector<std::vector<Tensor>> per_node;
  for (const Node* n : nodes) {
    auto r = runNode(*n, nodeArgs(*n, in));
    ASSERT_TRUE(r.ok()) << r.error().message;
    per_node.push_back(r->outputs);
  }
  for (bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "out of place");
    const auto multi = runMultiTensor(nodes, in, in_place);
    ASSERT_EQ(multi.size(), nodes.size());
    size_t flat = 0;
    for (size_t k = 0; k < nodes.size(); ++k) {
      ASSERT_EQ(multi[k].size(), per_node[k].size());
      for (size_t o = 0; o < multi[k].size(); ++o, ++flat) {
        EXPECT_EQ(parityError(multi[k][o], per_node[k][o]), 0) << "node " << k << " output " << o;
        EXPECT_LE(parityError(multi[k][o], cpu[flat]), tol) << "node " << k << " output " << o;
      }
    }
  }
}

TEST(CudaOptimizerKernels, MultiTensorAdam) {
  KILN_REQUIRE_GPU();
  // Five parameters of different sizes, one node each (as split_updates leaves them).
  const std::vector<std::vector<std::vector<int64_t>>> params = {
      {{3}}, {{1000}}, {{kMultiTensorChunk + 7}}, {{300000}}, {{128, 33}}};
  expectMultiTensorMatches(
      updateGraph("adam_update", "beta1=0.9, beta2=0.999, eps=1e-08, weight_decay=0.01, decoupled=1", "f32", params),
      1e-3, 5, 1.0, 1e-6);
  expectMultiTensorMatches(
      updateGraph("adam_update", "beta1=0.9, beta2=0.999, eps=1e-08, weight_decay=0.0, decoupled=0", "f64", params),
      1e-3, 1, 0.25, 1e-12);
  // A node with several parameters among single-parameter ones.
  expectMultiTensorMatches(updateGraph("adam_update", "weight_decay=0.1", "f32", {{{5}, {6, 7}}, {{9}}, {{70000}}}),
                           1e-2, 2, 0.5, 1e-6);
}

TEST(CudaOptimizerKernels, MultiTensorSplitsLaunches) {
  KILN_REQUIRE_GPU();
  // More parameters than one launch's table holds, and one larger than a
  // launch's blocks: several launches, the big tensor continuing across them.
  std::vector<std::vector<std::vector<int64_t>>> params;
  for (int i = 0; i < kSgdTensorsPerLaunch + 5; ++i) params.push_back({{1 + 997 * i}});
  params.push_back({{kMultiTensorChunk * (kMultiTensorBlocks + 2) + 5}});
  params.push_back({{4}});
  expectMultiTensorMatches(
      updateGraph("sgd_update", "momentum=0.9, nesterov=1, weight_decay=0.0001", "f32", params, true), 0.05, 2, 1.0,
      1e-6);
  expectMultiTensorMatches(updateGraph("sgd_update", "", "f32", params), 0.05, 1, 1.0, 1e-6);
}

TEST(CudaOptimizerKernels, MultiTensorCompatibility) {
  // Host-only: which nodes may share a launch.
  auto g = parseGraph(
      R"(graph g(%lr: f64[] data, %step: f64[] data, %gs: f32[] data, %p0: f32[4] data, %g0: f32[4] data, %m0: f32[4] data, %v0: f32[4] data, %p1: f32[4] data, %g1: f32[4] data, %m1: f32[4] data, %v1: f32[4] data, %p2: f32[4] data, %g2: f32[4] data, %m2: f32[4] data, %v2: f32[4] data) {
  %0, %1, %2 = adam_update(%lr, %step, %gs, %p0, %g0, %m0, %v0) {weight_decay=0.01, decoupled=1} : f32[4], f32[4], f32[4]
  %3, %4, %5 = adam_update(%lr, %step, %gs, %p1, %g1, %m1, %v1) {weight_decay=0.01, decoupled=1} : f32[4], f32[4], f32[4]
  %6, %7, %8 = adam_update(%lr, %step, %gs, %p2, %g2, %m2, %v2) {weight_decay=0.0, decoupled=1} : f32[4], f32[4], f32[4]
  %9 = sgd_update(%lr, %step, %gs, %p0, %g0) : f32[4]
  return %0 "a", %1 "b", %2 "c", %3 "d", %4 "e", %5 "f", %6 "g", %7 "h", %8 "i", %9 "j"
}
)",
      "test");
  ASSERT_TRUE(g.ok()) << g.error().message;
  std::vector<const Node*> n;
  for (const auto& node : g->nodes()) n.push_back(node.get());
  ASSERT_EQ(n.size(), 4u);
  EXPECT_TRUE(multiTensorCompatible(*n[0], *n[1]));
  EXPECT_FALSE(multiTensorCompatible(*n[0], *n[2]));  // other weight decay
  EXPECT_FALSE(multiTensorCompatible(*n[0], *n[3]));  // other op
  EXPECT_TRUE(multiTensorCompatible(*n[3], *n[3]));
}

}  // namespace
}  // namespace kiln::cuda::test
