// The recipe's schedule (driver/recipe.h): parsing --freeze-schedule,
// --resize-schedule and --seq-warmup (one-line errors naming the flag), the
// options compiled for each step, the points where the step changes and
// what changes there.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "driver/recipe.h"

namespace kiln::driver {
namespace {

namespace fs = std::filesystem;

TEST(RecipeSchedule, FreezeScheduleAccumulates) {
  CompileOptions a;
  a.freeze = {"embed"};
  a.freeze_schedule = "200:layer2,100:layer1,200:layer3";
  auto s = parseRecipeSchedule(a);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->changePoints(), (std::vector<int64_t>{100, 200}));
  EXPECT_EQ(s->optionsAt(a, 99).freeze, (std::vector<std::string>{"embed"}));
  EXPECT_EQ(s->optionsAt(a, 100).freeze, (std::vector<std::string>{"embed", "layer1"}));
  EXPECT_EQ(s->optionsAt(a, 5000).freeze, (std::vector<std::string>{"embed", "layer1", "layer2", "layer3"}));
  EXPECT_EQ(s->changeAt(200), "freeze layer2, layer3");
  EXPECT_EQ(s->changeAt(150), "");
}

TEST(RecipeSchedule, StepZeroIsTheFirstStepNotAPoint) {
  CompileOptions a;
  a.freeze_schedule = "0:conv1";
  auto s = parseRecipeSchedule(a);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->changePoints().empty());
  EXPECT_EQ(s->optionsAt(a, 0).freeze, (std::vector<std::string>{"conv1"}));
}

TEST(RecipeSchedule, ResizeSchedule) {
  CompileOptions a;
  a.resize_schedule = "0:16,50:24,100:0";
  auto s = parseRecipeSchedule(a);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->changePoints(), (std::vector<int64_t>{50, 100}));
  EXPECT_EQ(s->optionsAt(a, 0).image_size, 16);
  EXPECT_EQ(s->optionsAt(a, 77).image_size, 24);
  EXPECT_EQ(s->optionsAt(a, 100).image_size, 0);
  EXPECT_EQ(s->changeAt(50), "images 24x24");
  EXPECT_EQ(s->changeAt(100), "images at the data's size");
}

TEST(RecipeSchedule, SeqWarmupGrowsInMultiplesOfEight) {
  const fs::path tokens = fs::temp_directory_path() / "kiln_recipe_tokens.bin";
  std::ofstream(tokens, std::ios::binary) << std::string(4096, 'a');
  CompileOptions a;
  a.data = tokens.string();
  a.seq_len = 128;
  a.seq_warmup = "32:96";
  auto s = parseRecipeSchedule(a);
  ASSERT_TRUE(s.ok()) << s.error().message;
  const SeqWarmup& w = *s->seq_warmup;
  EXPECT_EQ(w.lengthAt(0), 32);
  EXPECT_EQ(w.lengthAt(8), 40);   // 32 + 96 * 8 / 96
  EXPECT_EQ(w.lengthAt(9), 40);   // 41 rounded down
  EXPECT_EQ(w.lengthAt(95), 120);
  EXPECT_EQ(w.lengthAt(96), 128);
  EXPECT_EQ(w.lengthAt(1000), 128);
  const auto points = s->changePoints();
  EXPECT_EQ(points.size(), 12u);  // 40, 48, ..., 128
  EXPECT_EQ(points.front(), 8);
  EXPECT_EQ(s->optionsAt(a, 50).seq_len, 80);
  EXPECT_EQ(s->changeAt(8), "seq_len 40");
  fs::remove(tokens);
}

TEST(RecipeSchedule, ErrorsNameTheFlag) {
  auto error = [](void (*set)(CompileOptions&)) {
    CompileOptions a;
    set(a);
    auto s = parseRecipeSchedule(a);
    return s.ok() ? std::string("ok") : s.error().message;
  };
  EXPECT_EQ(error([](CompileOptions& a) { a.freeze_schedule = "10"; }),
            "--freeze-schedule: '10' is not STEP:PATTERN (a step number, a colon, and a parameter pattern as "
            "--freeze takes it)");
  EXPECT_NE(error([](CompileOptions& a) { a.freeze_schedule = "-1:fc"; }).find("'-1:fc' is not STEP:PATTERN"),
            std::string::npos);
  EXPECT_NE(error([](CompileOptions& a) { a.resize_schedule = "10:big"; }).find("--resize-schedule: '10:big'"),
            std::string::npos);
  EXPECT_NE(error([](CompileOptions& a) {
              a.resize_schedule = "10:16";
              a.image_size = 32;
            }).find("not both"),
            std::string::npos);
  EXPECT_NE(error([](CompileOptions& a) { a.seq_warmup = "0:10"; }).find("is not START:STEPS"), std::string::npos);
  EXPECT_NE(error([](CompileOptions& a) { a.seq_warmup = "8:10"; }).find("give --data FILE"), std::string::npos);
}

TEST(RecipeSchedule, TargetsPointTheMetricsWay) {
  EXPECT_TRUE(reachesTarget("accuracy", 0.95, 0.95));
  EXPECT_FALSE(reachesTarget("accuracy", 0.94, 0.95));
  EXPECT_TRUE(reachesTarget("loss", 1.2, 1.25));
  EXPECT_FALSE(reachesTarget("perplexity", 3.5, 3.4));
  CompileOptions a;
  EXPECT_EQ(evalMetric(a), "accuracy");
  a.loss = "mse";
  EXPECT_EQ(evalMetric(a), "loss");
  a.metric = "perplexity";
  EXPECT_EQ(evalMetric(a), "perplexity");
}

}  // namespace
}  // namespace kiln::driver
