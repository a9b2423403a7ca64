// ZeRO-1's pieces that do not need a training run: the parameter partition
// (torch's ZeroRedundancyOptimizer rule) and the gather of every rank's
// optimizer state into one map for a checkpoint. The end-to-end check, the
// weights after 5 steps against single-process training, is
// tests/dist/dp_parity.py's zero_* variants.
#include <gtest/gtest.h>

#include "backend/comm/gather_tensors.h"
#include "passes/data_parallel.h"
#include "tests/comm/thread_communicator.h"

namespace kiln {
namespace {

TEST(ZeroOwners, LargestFirstToTheLeastLoadedRank) {
  // Sorted: 30 (index 1) -> rank 0; 9 (2) -> rank 1; 3 (0) -> rank 1 (9 < 30).
  EXPECT_EQ(zeroOwners({3, 30, 9}, 2), (std::vector<int>{1, 0, 1}));
  // Ties keep the given order and go to the lowest of the least loaded ranks.
  EXPECT_EQ(zeroOwners({4, 4, 4, 4, 4}, 3), (std::vector<int>{0, 1, 2, 0, 1}));
  // More ranks than tensors: the last ranks own nothing.
  EXPECT_EQ(zeroOwners({5, 7}, 4), (std::vector<int>{1, 0}));
  EXPECT_EQ(zeroOwners({}, 2), std::vector<int>{});
  // One rank owns everything.
  EXPECT_EQ(zeroOwners({1, 2, 3}, 1), (std::vector<int>{0, 0, 0}));
}

TEST(ZeroOwners, BalancesElements) {
  std::vector<int64_t> numels;
  for (int64_t i = 1; i <= 40; ++i) numels.push_back(i * 97 % 301 + 1);
  const std::vector<int> owners = zeroOwners(numels, 4);
  std::vector<int64_t> load(4, 0);
  int64_t largest = 0;
  for (size_t i = 0; i < numels.size(); ++i) {
    load[static_cast<size_t>(owners[i])] += numels[i];
    largest = std::max(largest, numels[i]);
  }
  // Greedy largest-first: no two ranks differ by more than the largest tensor.
  EXPECT_LE(*std::max_element(load.begin(), load.end()) - *std::min_element(load.begin(), load.end()), largest);
}

Tensor filled(DType dt, Shape shape, double base) {
  Tensor t(dt, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, base + static_cast<double>(i));
  return t;
}

TEST(AllGatherTensors, EveryRankGetsTheUnion) {
  for (int n : {1, 2, 3}) {
    std::vector<TensorMap> got(static_cast<size_t>(n));
    auto errors = testing::runThreadRanks(n, [&](Communicator& comm) {
      TensorMap mine;
      const int r = comm.rank();
      // Rank r holds exp_avg.p<r> (f32, r+1 rows) and, on odd ranks, an i64
      // scalar and an empty tensor; every rank holds "step" (its own value).
      mine["exp_avg.p" + std::to_string(r)] = filled(DType::F32, {r + 1, 3}, 10.0 * r);
      if (r % 2) {
        mine["count" + std::to_string(r)] = filled(DType::I64, {}, 7.0 * r);
        mine["empty" + std::to_string(r)] = Tensor(DType::F64, {0, 4});
      }
      mine["step"] = filled(DType::F64, {}, 100.0 + r);
      got[static_cast<size_t>(r)] = allGatherTensors(comm, mine);
    });
    for (const std::string& e : errors) ASSERT_EQ(e, "") << n << " ranks";
    for (int r = 0; r < n; ++r) {
      const TensorMap& m = got[static_cast<size_t>(r)];
      for (int q = 0; q < n; ++q) {
        const Tensor& t = m.at("exp_avg.p" + std::to_string(q));
        ASSERT_EQ(t.type(), (TensorType{DType::F32, {q + 1, 3}}));
        for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t.at(i), 10.0 * q + static_cast<double>(i));
        if (q % 2) {
          EXPECT_EQ(m.at("count" + std::to_string(q)).at(0), 7.0 * q);
          EXPECT_EQ(m.at("empty" + std::to_string(q)).type(), (TensorType{DType::F64, {0, 4}}));
        }
      }
      EXPECT_EQ(m.at("step").at(0), 100.0) << "a name on several ranks keeps rank 0's tensor";
      EXPECT_EQ(m.size(), static_cast<size_t>(n + 2 * (n / 2) + 1));
    }
  }
}

}  // namespace
}  // namespace kiln
