// The watchdog that bounds waits on NCCL work (backend/comm/watchdog.h),
// with fake device calls, and the GPU each rank of a machine drives
// (backend/device_step.h): what the CUDA code does on a GPU, checked here
// without one.
#include "backend/comm/watchdog.h"

#include "backend/device_step.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>

namespace kiln {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(Watchdog, ReturnsWhenTheWorkIsDone) {
  int polls = 0, aborts = 0;
  WatchedWork w{[&] { return ++polls >= 50; }, [] { return std::string(); }, [&] { ++aborts; }};
  watchUntilDone(w, 5s, "nccl allreduce (rank 0 of 2)", "a rank died or hangs");
  EXPECT_EQ(polls, 50);
  EXPECT_EQ(aborts, 0);
}

TEST(Watchdog, AbortsAtTheDeadlineWithOneLine) {
  int aborts = 0;
  WatchedWork w{[] { return false; }, [] { return std::string(); }, [&] { ++aborts; }};
  const auto t0 = Clock::now();
  try {
    watchUntilDone(w, 150ms, "nccl: the step's collectives (rank 1 of 4)", "a rank died or hangs");
    ADD_FAILURE() << "a wait that never ends returned";
  } catch (const KilnException& e) {
    EXPECT_EQ(std::string(e.what()),
              "nccl: the step's collectives (rank 1 of 4): not finished within 0.15 s; a rank died or hangs "
              "(aborted the communicator)");
  }
  const auto took = Clock::now() - t0;
  EXPECT_GE(took, 150ms);
  EXPECT_LT(took, 1s);
  EXPECT_EQ(aborts, 1);
}

TEST(Watchdog, AnAsynchronousErrorAbortsAtOnce) {
  int aborts = 0, polls = 0;
  WatchedWork w{[] { return false; }, [&] { return ++polls < 3 ? std::string() : std::string("remote process exited"); },
                [&] { ++aborts; }};
  const auto t0 = Clock::now();
  try {
    watchUntilDone(w, 60s, "nccl joining the NCCL ranks (rank 0 of 2)", "unused");
    ADD_FAILURE() << "a failed communicator was waited for";
  } catch (const KilnException& e) {
    EXPECT_EQ(std::string(e.what()),
              "nccl joining the NCCL ranks (rank 0 of 2): remote process exited (aborted the communicator)");
  }
  EXPECT_LT(Clock::now() - t0, 1s);
  EXPECT_EQ(aborts, 1);
}

TEST(Watchdog, ALongWaitDoesNotSpinACore) {
  std::atomic<int> polls{0};
  WatchedWork w{[&] { return ++polls < 0; }, [] { return std::string(); }, [] {}};
  try {
    watchUntilDone(w, 300ms, "wait", "hint");
  } catch (const KilnException&) {
  }
  // Backing off to 1 ms: a few hundred polls, not millions.
  EXPECT_LT(polls.load(), 1000);
}

TEST(GpuAssignment, OneGpuPerRankOfTheMachine) {
  for (int r = 0; r < 4; ++r) EXPECT_EQ(gpuForLocalRank(r, 4, 8).value(), r);
  const auto more = gpuForLocalRank(2, 4, 2);
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.error().message,
            "--device cuda: 4 ranks on this machine but 2 GPUs (NCCL needs one GPU per rank: --nproc at most 2, or "
            "CUDA_VISIBLE_DEVICES)");
  const auto none = gpuForLocalRank(0, 1, 0);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().message, "--device cuda: no CUDA device on this machine");
  EXPECT_TRUE(gpuForLocalRank(0, 1, 1).ok());
}

}  // namespace
}  // namespace kiln
