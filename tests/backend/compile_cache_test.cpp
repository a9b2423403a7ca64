// The compile cache's entry format and directory operations
// (backend/cache/compile_cache.h), and the file fingerprints it keys on
// (core/file_fingerprint.h). End to end through the CLI: tests/cli/cache_cli.sh.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "backend/cache/compile_cache.h"
#include "core/file_fingerprint.h"
#include "core/file_io.h"
#include "tests/zip_of.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("kiln_cache_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

TEST(CompileCache, EntriesRoundTripAndRejectEveryDamage) {
  const std::string payload = "{\"graph\": \"...\"}\n\x01\x02 binary too";
  const std::string bytes = encodeCacheEntry(payload);
  auto back = decodeCacheEntry(bytes);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, payload);
  std::string flipped = bytes;
  flipped[flipped.size() - 3] ^= 1;
  EXPECT_NE(decodeCacheEntry(flipped).error().message.find("checksum"), std::string::npos);
  EXPECT_NE(decodeCacheEntry(bytes.substr(0, bytes.size() - 1)).error().message.find("truncated"), std::string::npos);
  EXPECT_FALSE(decodeCacheEntry(bytes + "x").ok());
  EXPECT_FALSE(decodeCacheEntry("").ok());
  EXPECT_FALSE(decodeCacheEntry("PK\x03\x04 a zip file\n").ok());
  std::string other = bytes;
  other.replace(other.find(" 1 "), 3, " 9 ");
  EXPECT_NE(decodeCacheEntry(other).error().message.find("format 9"), std::string::npos);
}

TEST(CompileCache, StoreLoadListClear) {
  const fs::path dir = scratch("dir");
  CompileCache cache((dir / "nested").string());
  EXPECT_FALSE(cache.load("k1").payload) << "an empty cache misses";
  ASSERT_TRUE(cache.store("k1", "one").ok());
  ASSERT_TRUE(cache.store("k2", "two").ok());
  ASSERT_TRUE(cache.store("k2", "two again").ok());  // replaced whole
  EXPECT_EQ(cache.load("k1").payload.value_or(""), "one");
  EXPECT_EQ(cache.load("k2").payload.value_or(""), "two again");
  auto entries = cache.list();
  ASSERT_TRUE(entries.ok());
  EXPECT_EQ(entries->size(), 2u);
  for (const auto& e : fs::directory_iterator(dir / "nested"))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << "a temporary file was left";
  cache.count("hit");
  cache.count("hit");
  cache.count("miss");
  auto st = cache.stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->entries, 2u);
  EXPECT_EQ(st->hits, 2u);
  EXPECT_EQ(st->misses, 1u);

  // A damaged entry is reported, deleted and missed, never returned.
  { std::ofstream(cache.entryPath("k1"), std::ios::binary | std::ios::app) << "junk"; }
  CacheLookup bad = cache.load("k1");
  EXPECT_FALSE(bad.payload);
  EXPECT_NE(bad.problem.find("corrupt"), std::string::npos) << bad.problem;
  EXPECT_FALSE(fs::exists(cache.entryPath("k1")));

  auto removed = cache.clear();
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 1u);
  EXPECT_TRUE(fs::is_empty(dir / "nested"));
  fs::remove_all(dir);
}

TEST(FileFingerprint, FollowsContentNotName) {
  const fs::path dir = scratch("fp");
  fs::create_directories(dir);
  ASSERT_TRUE(writeFileAtomic((dir / "a.json").string(), "{\"x\": 1}").ok());
  ASSERT_TRUE(writeFileAtomic((dir / "b.json").string(), "{\"x\": 1}").ok());
  ASSERT_TRUE(writeFileAtomic((dir / "c.json").string(), "{\"x\": 2}").ok());
  auto a = fileFingerprint((dir / "a.json").string()), b = fileFingerprint((dir / "b.json").string()),
       c = fileFingerprint((dir / "c.json").string());
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->size(), 32u);
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
  EXPECT_FALSE(fileFingerprint((dir / "missing.pt").string()).ok());
  fs::remove_all(dir);
}

using test::zipOf;

TEST(FileFingerprint, AModelsStructureLeavesOutItsWeightsValuesAndItsFileName) {
  const fs::path dir = scratch("model_fp");
  fs::create_directories(dir);
  auto archive = [&](const std::string& name, const std::string& root, uint32_t code_crc, uint32_t weight_crc,
                     const std::string& weight, uint32_t constant_crc) {
    const std::string path = (dir / name).string();
    EXPECT_TRUE(writeFileAtomic(path, zipOf({{root + "/code/__torch__/m.py", "def forward", code_crc},
                                             {root + "/data.pkl", "pickle", 7},
                                             {root + "/data/0", weight, weight_crc},
                                             {root + "/constants/0", "cons", constant_crc},
                                             {root + "/.data/serialization_id", "0123", weight_crc + 1}}))
                    .ok());
    auto fp = modelFingerprint(path);
    EXPECT_TRUE(fp.ok()) << (fp.ok() ? "" : fp.error().message);
    auto whole = fileFingerprint(path);
    EXPECT_TRUE(whole.ok() && fp.ok() && *whole == fp->contents) << "contents is fileFingerprint's";
    return fp.ok() ? *fp : ModelFingerprint{};
  };
  const ModelFingerprint base = archive("a.pt", "a", 1, 2, "0000", 3);
  ASSERT_EQ(base.structure.size(), 32u);
  EXPECT_NE(base.structure, base.contents);
  // Other weights (and the serialization id that follows them), under another root folder: one structure.
  const ModelFingerprint other = archive("b.pt", "b", 1, 9, "1111", 3);
  EXPECT_EQ(other.structure, base.structure);
  EXPECT_NE(other.contents, base.contents);
  EXPECT_NE(archive("code.pt", "a", 5, 2, "0000", 3).structure, base.structure) << "the code is structure";
  EXPECT_NE(archive("const.pt", "a", 1, 2, "0000", 4).structure, base.structure) << "constants are structure";
  EXPECT_NE(archive("size.pt", "a", 1, 2, "00000000", 3).structure, base.structure) << "a tensor's size is";
  // Not a zip file: both fingerprints are the whole file's.
  ASSERT_TRUE(writeFileAtomic((dir / "m.fx.json").string(), "{\"nodes\": []}").ok());
  auto fx = modelFingerprint((dir / "m.fx.json").string());
  ASSERT_TRUE(fx.ok());
  EXPECT_EQ(fx->structure, fx->contents);
  EXPECT_EQ(fx->contents, *fileFingerprint((dir / "m.fx.json").string()));
  EXPECT_FALSE(modelFingerprint((dir / "missing.pt").string()).ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
