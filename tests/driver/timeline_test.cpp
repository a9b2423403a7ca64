// The report's timeline (driver/timeline.h) from a trace recorded on real
// threads, and each row's busy, intra-op and idle time; the roofline's
// points (driver/roofline.h); the machine file of kiln bench --machine
// (driver/machine_roofs.h).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <latch>
#include <thread>

#include "core/file_io.h"
#include "driver/machine_roofs.h"
#include "driver/report_json.h"
#include "driver/roofline.h"
#include "driver/timeline.h"

namespace kiln::driver {
namespace {

using Clock = TraceRecorder::Clock;
using std::chrono::microseconds;

TEST(Timeline, RowsStepsAndSlicesFromATrace) {
  TraceRecorder trace;
  const Clock::time_point t0 = Clock::now() + microseconds(1000);  // the first step starts 1 ms in
  auto at = [&](double ms) { return t0 + microseconds(int64_t(ms * 1000)); };
  trace.nameThread("main (executor)", "executor");
  // Both threads alive at once (a finished thread's id may be reused), the pool's row made first.
  std::latch pool_named(1), done(2);
  std::thread pool([&] {
    trace.nameThread("cpu pool 1", "pool");
    trace.slice("add", "node", at(2), at(4), {{"index", "1"}, {"threads", "1"}, {"kernel", "cpu.add"}});
    pool_named.count_down();
    done.arrive_and_wait();
  });
  std::thread prefetch([&] {
    pool_named.wait();
    trace.nameThread("data prefetch", "prefetch");
    trace.slice("batch 0", "data", at(-3), at(-2));  // while compiling: before the first step, dropped
    trace.slice("batch 1", "data", at(5), at(6));
    done.arrive_and_wait();
  });
  pool.join();
  prefetch.join();
  trace.slice("step 0", "step", at(0), at(10), {{"step", "0"}});
  trace.slice("matmul", "node", at(0), at(2), {{"index", "0"}, {"threads", "3"}, {"kernel", "onednn.matmul"}});
  trace.slice("relu", "node", at(2), at(3), {{"index", "2"}, {"threads", "1"}});
  trace.slice("wait for allreduce", "wait", at(3), at(7), {{"index", "3"}});
  trace.sliceOnRow("communication", "comm", "bucket 0", "comm", at(3), at(7), {{"bytes", "4096"}});
  trace.slice("step 1", "step", at(10), at(15), {{"step", "1"}});

  const ReportTimeline t = timelineFromTrace(trace, /*threads=*/3);
  // Executor, pool threads 1 and 2 (2 ran nothing but lends itself to kernels), prefetch, communication.
  ASSERT_EQ(t.rows.size(), 5u);
  EXPECT_EQ(t.rows[0].name, "main (executor)");
  EXPECT_EQ(t.rows[1].name, "cpu pool 1");
  EXPECT_EQ(t.rows[1].thread, 1);
  EXPECT_EQ(t.rows[2].name, "cpu pool 2");
  EXPECT_EQ(t.rows[2].kind, "pool");
  EXPECT_EQ(t.rows[3].kind, "prefetch");
  EXPECT_EQ(t.rows[4].name, "communication");
  ASSERT_EQ(t.steps.size(), 2u);
  EXPECT_EQ(t.steps[1].step, 1);
  EXPECT_NEAR(t.steps[0].start_ms, 0, 1e-9);
  EXPECT_NEAR(t.steps[1].end_ms, 15, 1e-6);
  ASSERT_EQ(t.slices.size(), 6u);  // batch 0 dropped, the steps are steps
  EXPECT_EQ(t.slices[0].name, "matmul");
  EXPECT_EQ(t.slices[0].node, 0);
  EXPECT_EQ(t.slices[0].threads, 3);
  EXPECT_NE(t.slices[0].detail.find("onednn.matmul"), std::string::npos);

  const auto a = rowActivity(t, 0);
  ASSERT_EQ(a.size(), 5u);
  EXPECT_NEAR(a[0].busy_ms, 3, 1e-6);  // matmul + relu; the wait is idle
  EXPECT_NEAR(a[0].idle_ms, 7, 1e-6);
  EXPECT_NEAR(a[1].busy_ms, 2, 1e-6);      // its own add
  EXPECT_NEAR(a[1].intra_op_ms, 2, 1e-6);  // the matmul's team
  EXPECT_NEAR(a[2].busy_ms, 0, 1e-6);
  EXPECT_NEAR(a[2].intra_op_ms, 2, 1e-6);
  EXPECT_NEAR(a[2].idle_ms, 8, 1e-6);
  EXPECT_NEAR(a[3].busy_ms, 1, 1e-6);
  EXPECT_NEAR(a[4].busy_ms, 4, 1e-6);
  for (const RowActivity& r : a) EXPECT_NEAR(r.busy_ms + r.intra_op_ms + r.idle_ms, 10, 1e-6);
  // Step 1 ran nothing: every row idle all along.
  for (const RowActivity& r : rowActivity(t, 1)) EXPECT_NEAR(r.idle_ms, 5, 1e-6);
  EXPECT_TRUE(rowActivity(t, 7)[0].idle_ms == 0);  // no such step

  // The timeline survives the report's JSON.
  Report report;
  report.timeline = t;
  auto back = reportFromJson(nlohmann::json::parse(toJson(report).dump()));
  ASSERT_TRUE(back) << back.error().message;
  ASSERT_TRUE(back->timeline);
  EXPECT_EQ(back->timeline->slices.size(), t.slices.size());
  EXPECT_EQ(back->timeline->rows[2].thread, 2);
  EXPECT_EQ(back->timeline->slices[0].node, 0);
  EXPECT_EQ(back->timeline->slices[5].node, -1);
}

TEST(Timeline, NoStepsNoTimeline) {
  TraceRecorder trace;
  trace.slice("add", "node", Clock::now(), Clock::now());
  const ReportTimeline t = timelineFromTrace(trace, 1);
  EXPECT_TRUE(t.steps.empty());
  EXPECT_TRUE(t.slices.empty());
}

ReportKernel kernel(double flops, double bytes, double ms, std::string dtype) {
  ReportKernel k;
  k.flops = flops;
  k.bytes = bytes;
  k.measured_ms = ms;
  k.dtype = std::move(dtype);
  return k;
}

TEST(Roofline, PointsRoofsAndLostTime) {
  Report r;
  r.kernels = {kernel(2e9, 1e7, 10, "f32"),   // 200 FLOP/B: compute-bound; 2e11 FLOP/s achieved
               kernel(1e6, 1e8, 2, "f32"),    // 0.01 FLOP/B: memory-bound; 5e10 B/s achieved
               kernel(0, 4e7, 1, "f32"),      // a copy: bandwidth only
               kernel(4e9, 1e7, 10, "bf16"),  // held to the bf16 roof
               kernel(1e9, 1e7, 0, "f32")};   // not measured: left out
  r.kernels.push_back(kernel(1e9, 1e7, 1, "f32"));
  r.kernels.back().measured_ms.reset();
  auto no_roofs = rooflinePoints(r);
  ASSERT_EQ(no_roofs.size(), 4u);
  EXPECT_EQ(no_roofs[0].roof, 0);
  EXPECT_EQ(no_roofs[0].lost_ms, 0);
  r.machine = ReportMachine{"cpu", 2, 4e11, 8e11, 1e11, 2048, "now"};
  const auto p = rooflinePoints(r);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0].kernel, 0u);
  EXPECT_DOUBLE_EQ(p[0].intensity, 200);
  EXPECT_DOUBLE_EQ(p[0].flops_per_s, 2e11);
  EXPECT_TRUE(p[0].compute_bound);
  EXPECT_DOUBLE_EQ(p[0].roof, 4e11);  // min(4e11, 1e11 x 200)
  EXPECT_DOUBLE_EQ(p[0].efficiency, 0.5);
  EXPECT_DOUBLE_EQ(p[0].lost_ms, 5);
  EXPECT_FALSE(p[1].compute_bound);
  EXPECT_DOUBLE_EQ(p[1].roof, 1e11 * 0.01);
  EXPECT_DOUBLE_EQ(p[1].efficiency, 5e8 / 1e9);
  EXPECT_EQ(p[2].intensity, 0);
  EXPECT_DOUBLE_EQ(p[2].roof, 1e11);
  EXPECT_DOUBLE_EQ(p[2].efficiency, 0.4);
  EXPECT_DOUBLE_EQ(p[3].roof, 8e11);
  EXPECT_DOUBLE_EQ(p[3].efficiency, 0.5);
  EXPECT_DOUBLE_EQ(computeRoof(*r.machine, "f16"), 8e11);
  r.machine->bf16_gemm_flops.reset();
  EXPECT_DOUBLE_EQ(computeRoof(*r.machine, "bf16"), 4e11);
}

TEST(MachineRoofs, SavedPerCpuAndThreadsAndFoundAgain) {
  const std::string dir = (std::filesystem::temp_directory_path() / "kiln_machine_roofs_test").string();
  std::filesystem::remove_all(dir);
  const std::string file = machineFile(dir);
  auto none = loadMachine(file, 2);
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none);
  ReportMachine m{cpuModelName(), 2, 1e11, std::nullopt, 2e10, 256, "2026-11-28T00:00:00Z"};
  ASSERT_TRUE(saveMachine(file, m));
  m.threads = 1;
  m.fp32_gemm_flops = 5e10;
  ASSERT_TRUE(saveMachine(file, m));
  m.fp32_gemm_flops = 6e10;  // measured again: replaces the 1-thread entry
  ASSERT_TRUE(saveMachine(file, m));
  auto two = loadMachine(file, 2), one = loadMachine(file, 1), four = loadMachine(file, 4);
  ASSERT_TRUE(two && *two && one && *one && four);
  EXPECT_DOUBLE_EQ((*two)->fp32_gemm_flops, 1e11);
  EXPECT_DOUBLE_EQ((*one)->fp32_gemm_flops, 6e10);
  EXPECT_FALSE(*four);
  auto text = readFile(file);
  ASSERT_TRUE(text);
  EXPECT_EQ(nlohmann::json::parse(*text)["machines"].size(), 2u);
  // A broken file is one error naming it, and is not overwritten.
  ASSERT_TRUE(writeFileAtomic(file, "{\"machines\": [{\"cpu\": 3}]}"));
  auto bad = loadMachine(file, 2);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find(file + ": machines[0].cpu"), std::string::npos) << bad.error().message;
  ASSERT_TRUE(writeFileAtomic(file, "not json"));
  auto foreign = saveMachine(file, m);
  ASSERT_FALSE(foreign);
  EXPECT_NE(foreign.error().message.find("not a machine file"), std::string::npos);
  EXPECT_EQ(*readFile(file), "not json");
  std::filesystem::remove_all(dir);
}

TEST(MachineRoofs, MeasuresKilnsOwnKernels) {
  auto m = measureMachine(1, 128);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->threads, 1);
  EXPECT_EQ(m->gemm_size, 128);
  EXPECT_GT(m->fp32_gemm_flops, 1e8);  // any CPU of this century
  EXPECT_GT(m->bandwidth_bytes, 1e8);
  EXPECT_FALSE(measureMachine(1, 8));  // out of range: an error, not a crash
}

}  // namespace
}  // namespace kiln::driver
