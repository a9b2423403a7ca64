// Token files (core/data/batch_source.h): windows of seq_len + 1 ids cut from
// a flat file of u16, i32 or i64 ids, batch after batch, wrapping around at
// the end; ids wider than 16 bits survive; a file that is not a whole number
// of ids, holds a negative id, is shorter than one window or is missing is
// refused with its path.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/data/batch_source.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

class TokenFileSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_token_file_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                        "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  template <typename T>
  std::string write(const std::string& name, const std::vector<T>& ids) {
    const std::string path = (dir_ / name).string();
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * sizeof(T)));
    return path;
  }

  fs::path dir_;
};

/// Every row of `batch` is the window starting at ((step * rows + b) % windows) * seq.
void expectWindows(BatchSource& src, int64_t step, const std::vector<int64_t>& ids, int64_t rows, int64_t seq) {
  auto b = src.batch(step);
  ASSERT_TRUE(b) << b.error().message;
  const Tensor& in = b->at("input0");
  const Tensor& tg = b->at("target");
  ASSERT_EQ(in.type().dtype, DType::I64);
  ASSERT_EQ(in.type().shape, (std::vector<int64_t>{rows, seq}));
  ASSERT_EQ(tg.type().shape, (std::vector<int64_t>{rows, seq}));
  const int64_t windows = (static_cast<int64_t>(ids.size()) - 1) / seq;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t start = ((step * rows + r) % windows) * seq;
    for (int64_t j = 0; j < seq; ++j) {
      EXPECT_EQ(in.data<int64_t>()[r * seq + j], ids[static_cast<size_t>(start + j)]) << "step " << step << " row " << r;
      EXPECT_EQ(tg.data<int64_t>()[r * seq + j], ids[static_cast<size_t>(start + j + 1)]) << "step " << step << " row " << r;
    }
  }
}

TEST_F(TokenFileSourceTest, U16WindowsFollowEachOtherAndWrapAround) {
  std::vector<uint16_t> raw;
  std::vector<int64_t> ids;
  for (int i = 0; i < 101; ++i) {
    raw.push_back(static_cast<uint16_t>(65535 - i * 37));  // the top of the range: read unsigned
    ids.push_back(raw.back());
  }
  auto src = tokenFileSource(write("t.u16", raw), "u16", 3, 8);
  ASSERT_TRUE(src) << src.error().message;
  EXPECT_EQ((*src)->epochBatches(), 4);  // 12 windows of 8 + 1 in 101 ids, 3 a batch
  EXPECT_NE((*src)->describe().find("101 tokens"), std::string::npos) << (*src)->describe();
  for (int64_t step : {0, 1, 3, 4, 7}) expectWindows(**src, step, ids, 3, 8);  // 4 and 7 wrap around
}

TEST_F(TokenFileSourceTest, WideIdsKeepTheirValue) {
  std::vector<int32_t> raw32;
  std::vector<int64_t> ids32;
  for (int i = 0; i < 40; ++i) {
    raw32.push_back(70000 + i * 100003);
    ids32.push_back(raw32.back());
  }
  auto s32 = tokenFileSource(write("t.i32", raw32), "i32", 2, 5);
  ASSERT_TRUE(s32) << s32.error().message;
  for (int64_t step : {0, 2, 5}) expectWindows(**s32, step, ids32, 2, 5);

  std::vector<int64_t> ids64;
  for (int i = 0; i < 40; ++i) ids64.push_back((int64_t{1} << 40) + i);
  auto s64 = tokenFileSource(write("t.i64", ids64), "i64", 2, 5);
  ASSERT_TRUE(s64) << s64.error().message;
  for (int64_t step : {0, 3}) expectWindows(**s64, step, ids64, 2, 5);
}

// A source set up again while the first is alive (a recipe's schedule point)
// shares its bytes; a file rewritten since is read again, not served stale.
TEST_F(TokenFileSourceTest, ARewrittenFileIsReadAgain) {
  std::vector<uint16_t> first(33), second(33);
  std::vector<int64_t> first_ids, second_ids;
  for (int i = 0; i < 33; ++i) {
    first[i] = static_cast<uint16_t>(i);
    second[i] = static_cast<uint16_t>(1000 + i);
    first_ids.push_back(first[i]);
    second_ids.push_back(second[i]);
  }
  const std::string path = write("t.u16", first);
  auto a = tokenFileSource(path, "u16", 2, 4);
  ASSERT_TRUE(a) << a.error().message;
  auto again = tokenFileSource(path, "u16", 1, 8);  // another window length over the same bytes
  ASSERT_TRUE(again) << again.error().message;
  expectWindows(**again, 1, first_ids, 1, 8);

  const auto written = fs::last_write_time(path);
  write("t.u16", second);
  fs::last_write_time(path, written + std::chrono::seconds(1));  // the same size: only the time tells
  auto b = tokenFileSource(path, "u16", 2, 4);
  ASSERT_TRUE(b) << b.error().message;
  expectWindows(**b, 0, second_ids, 2, 4);
  expectWindows(**a, 0, first_ids, 2, 4);  // the first source keeps what it read
}

TEST_F(TokenFileSourceTest, RefusesFilesThatAreNotWholeWindowsOfIds) {
  auto expectError = [](const Result<std::unique_ptr<BatchSource>>& r, const std::string& needle) {
    ASSERT_FALSE(r) << "accepted; expected an error with '" << needle << "'";
    EXPECT_NE(r.error().message.find(needle), std::string::npos) << r.error().message;
  };
  const std::string odd = write("odd.u16", std::vector<uint8_t>{1, 2, 3});
  expectError(tokenFileSource(odd, "u16", 1, 1), "3 bytes is not a whole number of u16 tokens");
  expectError(tokenFileSource(odd, "u16", 1, 1), odd);

  std::vector<int32_t> negative(20, 5);
  negative[13] = -2;
  expectError(tokenFileSource(write("neg.i32", negative), "i32", 1, 4), "token 13 is negative");

  expectError(tokenFileSource(write("short.u16", std::vector<uint16_t>(8, 1)), "u16", 1, 8),
              "8 tokens, fewer than one window of 9");
  const std::string missing = (dir_ / "missing.u16").string();
  expectError(tokenFileSource(missing, "u16", 1, 4), missing);
  expectError(tokenFileSource(odd, "u8", 1, 1), "not one of u16, i32, i64");
  expectError(tokenFileSource(odd, "u16", 0, 1), "positive batch size");
}

}  // namespace
}  // namespace kiln
