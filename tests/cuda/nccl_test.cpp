// NCCL on one GPU: a one-rank NCCL communicator's collectives (real NCCL
// calls, the identity on one rank), and the CUDA executor running a graph
// with every collective op on its communication stream (events to and from
// the compute stream, captured into the step's CUDA graph on the second run
// and replayed), against the CPU executor. Several ranks need several GPUs;
// the multi-rank path shares everything here but the rank count. Skips
// visibly without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include "backend/cpu/cpu_executor.h"
#include "backend/cuda/cuda_executor.h"
#include "backend/cuda/nccl_communicator.h"
#include "core/tensor_compare.h"
#include "core/text_ir.h"
#include "tests/cuda/cuda_kernel_check.h"  // KILN_REQUIRE_GPU

namespace kiln::cuda {
namespace {

std::shared_ptr<NcclCommunicator> oneRank() {
  auto id = NcclCommunicator::uniqueId();
  EXPECT_TRUE(id.ok()) << (id.ok() ? "" : id.error().message);
  auto c = NcclCommunicator::create(0, 1, id.ok() ? *id : std::string());
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
  return c.ok() ? std::shared_ptr<NcclCommunicator>(std::move(*c)) : nullptr;
}

TEST(Nccl, BuildsAndNamesItsVersion) {
  EXPECT_EQ(NcclCommunicator::version().rfind("NCCL 2.", 0), 0u) << NcclCommunicator::version();
  auto bad = NcclCommunicator::create(0, 2, "too short");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("unique id"), std::string::npos) << bad.error().message;
}

TEST(Nccl, OneRankCollectivesAreTheIdentity) {
  KILN_REQUIRE_GPU();
  auto comm = oneRank();
  ASSERT_TRUE(comm);
  std::vector<float> host(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) * 0.5f - 7;
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, host.size() * sizeof(float)), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  comm->allreduceSum(d, host.size(), DType::F32, s);
  comm->reduceScatterSum(d, {host.size()}, DType::F32, s);
  comm->allGather(d, {host.size()}, DType::F32, s);
  comm->broadcast(d, host.size() * sizeof(float), 0, s);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  std::vector<float> back(host.size());
  ASSERT_EQ(cudaMemcpy(back.data(), d, back.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, host);
  cudaFree(d);
  cudaStreamDestroy(s);
}

// Every collective op, some outputs read right away, some late, one
// (the sparse allreduce's) never: the executor's waits and the arena plan
// must keep them apart.
const char* kCollectives = R"(graph step(%x: f32[4,3] data, %w: f32[3] param, %e: f32[6,3] param) {
  %y = mul(%x, %x) : f32[4,3]
  %r0, %r1 = allreduce(%y, %w) {average=1, bucket=0} : f32[4,3], f32[3]
  %s = allreduce(%e) {average=1, bucket=1, sparse=1, block=3} : f32[6,3]
  %g0, %g1 = reduce_scatter(%y, %e) {average=1, bucket=2, owners=[0,0], rank=0} : f32[4,3], f32[6,3]
  %a0, %a1 = allgather(%w, %e) {bucket=0, owners=[0,0], rank=0} : f32[3], f32[6,3]
  %b = broadcast(%x) {root=0} : f32[4,3]
  %z = add(%r0, %x) : f32[4,3]
  %t = sum(%g1) : f32[]
  %u = add(%z, %b) : f32[4,3]
  return %u "out", %r1 "rw", %g0 "g0", %a1 "ae", %t "t"
})";

/// Three steps of `ir` (enqueued, captured into a CUDA graph, replayed) on
/// the CUDA executor with a one-rank NCCL communicator, against the CPU
/// executor, from `in`: persistent inputs are set once, the others each
/// step; an output named like an input (an update) is that input of the
/// next step. EXPECTs every output of every step equal.
void expectStepsMatchCpu(const char* ir, TensorMap in) {
  auto parsed = parseGraph(ir, "step");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  Graph& g = *parsed;
  auto comm = oneRank();
  ASSERT_TRUE(comm);
  auto ex = CudaExecutor::create(g, {.nccl = comm});
  ASSERT_TRUE(ex.ok()) << ex.error().message;
  auto cpu = CpuExecutor::create(g, {});
  ASSERT_TRUE(cpu.ok()) << cpu.error().message;
  TensorMap batch;
  for (const Value* v : g.inputs()) {
    const ValueRole r = v->role();
    if (r == ValueRole::Param || r == ValueRole::Buffer || r == ValueRole::OptState || r == ValueRole::Const)
      ASSERT_TRUE((*ex)->setState(v->name(), in.at(v->name())).ok()) << v->name();
    else
      batch[v->name()] = in.at(v->name());
  }
  for (int run = 0; run < 3; ++run) {
    auto expected = cpu->run(in);
    ASSERT_TRUE(expected.ok()) << expected.error().message;
    ASSERT_TRUE((*ex)->setBatch(batch).ok());
    Status st = (*ex)->run();
    ASSERT_TRUE(st.ok()) << st.error().message;
    for (size_t k = 0; k < g.outputs().size(); ++k) {
      const std::string& name = g.outputs()[k].name;
      auto got = (*ex)->read(name);
      ASSERT_TRUE(got.ok()) << got.error().message;
      EXPECT_EQ(parityError(*got, (*expected)[k]), 0.0) << name << " run " << run;
      if (in.count(name)) in[name] = (*expected)[k];
    }
  }
  EXPECT_TRUE((*ex)->graphCaptured());
}

TEST(Nccl, ExecutorRunsCollectivesOnTheCommunicationStream) {
  KILN_REQUIRE_GPU();
  TensorMap in;
  in["x"] = Tensor(DType::F32, {4, 3});
  in["w"] = Tensor(DType::F32, {3});
  in["e"] = Tensor(DType::F32, {6, 3});
  for (auto& [name, t] : in)
    for (int64_t i = 0; i < t.numel(); ++i)
      t.set(i, 0.25 * static_cast<double>(i) - 1.0 + static_cast<double>(name[0]));
  expectStepsMatchCpu(kCollectives, in);
}

// The row-sparse embedding gradient as data_parallel and sparse_updates
// leave it: its rows, their allreduce_rows on the communication stream (one
// NCCL rank), the dense gradient for one reader and sgd_update_rows in
// place for the parameter; three steps (enqueued, captured, replayed), the
// parameter carried from step to step, against the CPU executor.
const char* kRowSparseStep =
    R"(graph step(%g: f32[12,8] data, %i: i64[12] data, %lr: f64[] scalar, %step: f64[] opt_state, %gs: f32[] data, %e: f32[30,8] param) {
  %r, %v = embedding_backward_rows(%g, %i) {num_weights=30, padding_idx=2} : i64[12], f32[12,8]
  %r2, %v2 = allreduce_rows(%r, %v) {bucket=0, average=1, num_rows=30, world_size=1} : i64[12], f32[12,8]
  %d = rows_to_dense(%r2, %v2) {num_rows=30} : f32[30,8]
  %s = sum(%d) : f32[]
  %e2 = sgd_update_rows(%lr, %step, %gs, %e, %r2, %v2) : f32[30,8]
  return %s "s", %e2 "e" param_update
})";

TEST(Nccl, ExecutorRunsTheRowSparseChain) {
  KILN_REQUIRE_GPU();
  TensorMap in;
  in["g"] = Tensor(DType::F32, {12, 8});
  for (int64_t k = 0; k < in["g"].numel(); ++k) in["g"].set(k, 0.125 * static_cast<double>(k % 29) - 1.5);
  in["i"] = Tensor(DType::I64, {12});
  for (int64_t k = 0; k < 12; ++k) in["i"].set(k, static_cast<double>((k * 7) % 10));  // repeats, and row 2 (padding)
  in["lr"] = Tensor(DType::F64, {});
  in["lr"].set(0, 0.1);
  in["step"] = Tensor(DType::F64, {});
  in["step"].set(0, 1);
  in["gs"] = Tensor(DType::F32, {});
  in["gs"].set(0, 1);
  in["e"] = Tensor(DType::F32, {30, 8});
  for (int64_t k = 0; k < in["e"].numel(); ++k) in["e"].set(k, 0.01 * static_cast<double>(k));
  expectStepsMatchCpu(kRowSparseStep, in);
}

}  // namespace
}  // namespace kiln::cuda
