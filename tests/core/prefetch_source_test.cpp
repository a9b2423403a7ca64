// Reading batches ahead (core/data/prefetch_source.h) and the trace
// recorder (core/trace.h): the batches are the inner source's, step for
// step, in any order asked; a batch read ahead is served without touching
// the inner source again; errors pass through; the trace is valid JSON with
// a named row per thread.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/data/prefetch_source.h"
#include "core/trace.h"

namespace kiln {
namespace {

/// Step s is a 1-element tensor holding s; counts its reads; fails on step 13.
class CountingSource final : public BatchSource {
 public:
  Result<TensorMap> batch(int64_t step) override {
    {
      std::lock_guard<std::mutex> lock(mu);
      ++reads;
    }
    changed.notify_all();
    if (step == 13) return Error{"step 13 is unlucky"};
    Tensor t(TensorType{DType::F32, {1}});
    t.set(0, static_cast<double>(step));
    return TensorMap{{"input0", t}};
  }
  std::string describe() const override { return "counting"; }
  void waitForReads(int n) {
    std::unique_lock<std::mutex> lock(mu);
    changed.wait(lock, [&] { return reads >= n; });
  }
  std::mutex mu;
  std::condition_variable changed;
  int reads = 0;
};

double valueOf(const Result<TensorMap>& b) {
  return b->at("input0").at(0);
}

TEST(Prefetch, ServesTheInnerBatchesInAnyOrder) {
  auto inner = std::make_unique<CountingSource>();
  auto src = prefetchingSource(std::move(inner), 2);
  for (int64_t s : {0, 1, 2, 3, 7, 8, 2, 0, 5}) {
    auto b = src->batch(s);
    ASSERT_TRUE(b.ok()) << b.error().message;
    EXPECT_EQ(valueOf(b), static_cast<double>(s));
  }
  auto bad = src->batch(13);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "step 13 is unlucky");
  EXPECT_EQ(valueOf(src->batch(14)), 14.0);
  EXPECT_NE(src->describe().find("counting, read 2 ahead"), std::string::npos);
}

TEST(Prefetch, ABatchReadAheadIsServedWithoutWaiting) {
  auto owned = std::make_unique<CountingSource>();
  CountingSource* inner = owned.get();
  auto src = prefetchingSource(std::move(owned), 3);
  ASSERT_TRUE(src->batch(0).ok());
  inner->waitForReads(4);  // steps 0..3: the one asked for and three ahead
  // The inner source has started the fourth read; wait until the prefetch
  // thread has stored it too (a read started is not yet a batch ready).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (src->stats().ready_now < 3) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "steps 1..3 never became ready";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const PrefetchStats before = src->stats();
  for (int64_t s = 1; s <= 3; ++s) EXPECT_EQ(valueOf(src->batch(s)), static_cast<double>(s));
  const PrefetchStats after = src->stats();
  EXPECT_EQ(after.served_ready - before.served_ready, 3) << "steps 1..3 were read ahead";
  EXPECT_EQ(after.served_waited, before.served_waited);
}

TEST(Trace, WritesChromeTraceEventsWithThreadRows) {
  TraceRecorder trace;
  trace.nameThread("main");
  { TraceScope s(&trace, "step 0", "step", {{"bytes", "4096"}, {"kernel", "cpu.add"}}); }
  std::thread([&] {
    trace.nameThread("data prefetch");
    TraceScope s(&trace, "batch 1", "data");
  }).join();
  trace.stop();
  { TraceScope dropped(&trace, "after stop", "step"); }
  EXPECT_EQ(trace.size(), 2u);
  const auto j = nlohmann::json::parse(trace.json());
  int slices = 0, names = 0;
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") == "X") {
      ++slices;
      EXPECT_GE(e.at("dur").get<double>(), 0.0);
      if (e.at("name") == "step 0") {
        EXPECT_EQ(e.at("args").at("bytes"), 4096.0);
        EXPECT_EQ(e.at("args").at("kernel"), "cpu.add");
      }
    }
    if (e.at("ph") == "M" && e.at("name") == "thread_name") ++names;
  }
  EXPECT_EQ(slices, 2);
  EXPECT_EQ(names, 2);
}

}  // namespace
}  // namespace kiln
