// Reading a model file's recorded input types without importing it
// (core/import/recorded_inputs.h) and the zip reading under it
// (core/zip_directory.h): stored entries found by suffix; a compressed,
// absent, truncated or foreign file gives nothing (the caller imports the
// model instead), never a crash. Zips are written by hand (tests/zip_of.h),
// as torch.jit.save writes them (stored, no compression).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/import/recorded_inputs.h"
#include "core/zip_directory.h"
#include "tests/zip_of.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

using test::zipOf;

struct File {
  std::string path;
  File(const std::string& name, const std::string& bytes)
      : path((fs::temp_directory_path() / ("kiln_recorded_" + std::to_string(::getpid()) + name)).string()) {
    std::ofstream(path, std::ios::binary) << bytes;
  }
  ~File() { fs::remove(path); }
};

const std::string kRecord = R"([{"dtype": "f32", "shape": [8, 3, 224, 224]}, {"dtype": "i64", "shape": [8]}])";

TEST(RecordedInputs, AnArchivesKilnInputsEntryIsReadWithoutImportingIt) {
  File pt("model.pt", zipOf({{"model/data.pkl", "pickle bytes"},
                             {"model/data/0", std::string(1000, '\1')},
                             {"model/extra/kiln_inputs.json", kRecord}}));
  auto types = recordedInputTypes(pt.path);
  ASSERT_TRUE(types.has_value());
  ASSERT_EQ(types->size(), 2u);
  EXPECT_EQ((*types)[0].str(), "f32[8,3,224,224]");
  EXPECT_EQ((*types)[1].str(), "i64[8]");
  EXPECT_EQ(readStoredZipEntry(pt.path, "/data.pkl").value_or(""), "pickle bytes");
  EXPECT_FALSE(readStoredZipEntry(pt.path, "/absent").has_value());
}

TEST(RecordedInputs, AnythingElseGivesNothingAndNeverCrashes) {
  const std::string good = zipOf({{"m/extra/kiln_inputs.json", kRecord}});
  std::vector<std::pair<std::string, std::string>> cases = {
      {"no_record.pt", zipOf({{"m/data.pkl", "x"}})},
      {"compressed.pt", zipOf({{"m/extra/kiln_inputs.json", kRecord}}, 8)},
      {"bad_json.pt", zipOf({{"m/extra/kiln_inputs.json", "[{\"dtype\": "}})},
      {"bad_dtype.pt", zipOf({{"m/extra/kiln_inputs.json", R"([{"dtype": "q7", "shape": [1]}])"}})},
      {"not_zip.pt", "just some text that is not a zip file at all"},
      {"empty.pt", ""},
  };
  for (size_t cut : {good.size() - 1, good.size() - 30, good.size() / 2, size_t{10}})
    cases.push_back({"truncated" + std::to_string(cut) + ".pt", good.substr(0, cut)});
  std::string lying = good;  // the directory's size field claims more than the file holds
  lying[lying.size() - 10] = '\x7f';
  cases.push_back({"lying.pt", lying});
  for (const auto& [name, bytes] : cases) {
    File f(name, bytes);
    EXPECT_FALSE(recordedInputTypes(f.path).has_value()) << name;
  }
  EXPECT_FALSE(recordedInputTypes("/nonexistent/model.pt").has_value());
}

TEST(RecordedInputs, AnFxDumpsInputPlaceholdersInIndexOrder) {
  File fx("model.fx.json", R"({"placeholders": [
    {"name": "arg0_1", "kind": "param", "key": "w", "dtype": "f32", "shape": [4, 4]},
    {"name": "arg2_1", "kind": "input", "key": "input1", "index": 1, "dtype": "i64", "shape": [2]},
    {"name": "arg1_1", "kind": "input", "key": "input0", "index": 0, "dtype": "f32", "shape": [2, 4]}]})");
  auto types = recordedInputTypes(fx.path);
  ASSERT_TRUE(types.has_value());
  ASSERT_EQ(types->size(), 2u);
  EXPECT_EQ((*types)[0].str(), "f32[2,4]");
  EXPECT_EQ((*types)[1].str(), "i64[2]");
  File bad("bad.fx.json", R"({"placeholders": 3})");
  EXPECT_FALSE(recordedInputTypes(bad.path).has_value());
}

}  // namespace
}  // namespace kiln
