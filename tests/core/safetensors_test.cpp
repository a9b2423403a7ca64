// safetensors reader/writer: round trips of every dtype, one test per kind of
// malformed input (each must fail with a message naming the problem, not
// crash), and a cross-check against PyTorch through /usr/bin/python3.
#include "core/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "core/file_io.h"

#ifndef KILN_PYTHON
#define KILN_PYTHON "/usr/bin/python3"
#endif

namespace kiln {
namespace {

namespace fs = std::filesystem;

constexpr DType kAllDTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64,
                                DType::I32, DType::I16, DType::I8,  DType::U8,   DType::Bool};

/// Deterministic values that every dtype represents exactly (u8/bool too).
Tensor sample(DType dtype, Shape shape) {
  Tensor t(dtype, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = dtype == DType::Bool ? (i % 3 == 0) : dtype == DType::U8 ? (i * 7) % 251 : (i % 9) * 1.5 - 6;
    if (isIntegral(dtype)) v = std::floor(v);
    t.set(i, v);
  }
  return t;
}

bool sameTensor(const Tensor& a, const Tensor& b) {
  return a.type() == b.type() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

Result<SafetensorsFile> parse(const std::string& bytes, const std::string& where = "test.safetensors") {
  return parseSafetensors({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, where);
}

/// A file image from a header text and a data buffer, as a writer would make it.
std::string image(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

/// Parses `bytes`, expects failure, and returns the message.
std::string errorOf(const std::string& bytes) {
  auto r = parse(bytes);
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << "message must be one line";
  EXPECT_EQ(r.error().message.rfind("test.safetensors: ", 0), 0u) << r.error().message;
  return r.error().message;
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "message: " << (haystack)

/// A scratch directory removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "kiln-st-XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path); }
};

// ---- round trips -------------------------------------------------------------

TEST(SafetensorsTest, RoundTripsEveryDTypeWithScalarsAndEmptyTensors) {
  TensorMap in;
  for (DType t : kAllDTypes) {
    std::string n(dtypeName(t));
    in[n + ".matrix"] = sample(t, {2, 3});
    in[n + ".scalar"] = sample(t, {});
    in[n + ".empty"] = sample(t, {0, 4});
    in[n + ".odd"] = sample(t, {5});  // odd byte counts misalign what follows
  }
  auto out = parse(serializeSafetensors(in));
  ASSERT_TRUE(out.ok()) << out.error().message;
  ASSERT_EQ(out->tensors.size(), in.size());
  for (const auto& [name, t] : in) {
    ASSERT_TRUE(out->tensors.count(name)) << name;
    EXPECT_TRUE(sameTensor(out->tensors.at(name), t)) << name;
  }
  EXPECT_TRUE(out->metadata.empty());
}

TEST(SafetensorsTest, RoundTripsMetadata) {
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "ünïcode \"quoted\"\n"}, {"", ""}};
  auto out = parse(serializeSafetensors({{"w", sample(DType::F32, {2})}}, meta));
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(out->metadata, meta);
  EXPECT_EQ(out->tensors.size(), 1u);
}

TEST(SafetensorsTest, RoundTripsAnEmptyMap) {
  auto out = parse(serializeSafetensors({}));
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_TRUE(out->tensors.empty());
}

TEST(SafetensorsTest, WriterPadsHeaderAndPacksDataInKeyOrder) {
  TensorMap in = {{"b", sample(DType::I8, {3})}, {"a", sample(DType::F32, {2})}};
  std::string bytes = serializeSafetensors(in, {{"k", "v"}});
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.find_last_not_of(' ') + 1, header.find_last_of('}') + 1) << "padding must be spaces";
  auto j = nlohmann::json::parse(header);
  EXPECT_EQ(j["a"]["data_offsets"], nlohmann::json({0, 8}));
  EXPECT_EQ(j["b"]["data_offsets"], nlohmann::json({8, 11}));
  EXPECT_EQ(j["a"]["dtype"], "F32");
  EXPECT_EQ(bytes.size(), 8 + n + 11) << "no trailing bytes";
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + n, in["a"].raw(), 8), 0);
}

TEST(SafetensorsTest, WriterRejectsUndefinedTensorsAndReservedName) {
  TempDir dir;
  std::string path = (dir.path / "x.safetensors").string();
  auto s = writeSafetensors(path, {{"w", Tensor()}});
  ASSERT_FALSE(s.ok());
  EXPECT_CONTAINS(s.error().message, "'w' is undefined");
  EXPECT_CONTAINS(s.error().message, path);
  s = writeSafetensors(path, {{"__metadata__", sample(DType::F32, {1})}});
  ASSERT_FALSE(s.ok());
  EXPECT_CONTAINS(s.error().message, "__metadata__");
  s = writeSafetensors(path, {{"bad\xff", sample(DType::F32, {1})}});
  ASSERT_FALSE(s.ok());
  EXPECT_CONTAINS(s.error().message, "UTF-8");
  EXPECT_TRUE(fs::is_empty(dir.path)) << "a failed write leaves nothing behind";
}

TEST(SafetensorsTest, WritesAndReadsAFile) {
  TempDir dir;
  std::string path = (dir.path / "w.safetensors").string();
  TensorMap in = {{"layer.weight", sample(DType::BF16, {4, 2})}, {"layer.bias", sample(DType::F32, {4})}};
  ASSERT_TRUE(writeSafetensors(path, in, {{"step", "3"}}).ok());
  auto out = readSafetensors(path);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_TRUE(sameTensor(out->tensors.at("layer.weight"), in["layer.weight"]));
  EXPECT_EQ(out->metadata.at("step"), "3");
}

TEST(SafetensorsTest, ReadNamesAMissingFile) {
  auto r = readSafetensors("/nonexistent/dir/w.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_CONTAINS(r.error().message, "/nonexistent/dir/w.safetensors");
}

TEST(SafetensorsTest, ReadErrorsNameTheFile) {
  TempDir dir;
  std::string path = (dir.path / "bad.safetensors").string();
  ASSERT_TRUE(writeFileAtomic(path, "abc").ok());
  auto r = readSafetensors(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message.rfind(path + ": ", 0), 0u) << r.error().message;
}

// ---- accepted layouts other writers produce ----------------------------------

TEST(SafetensorsTest, AcceptsGapsTrailingBytesAndUnorderedOffsets) {
  // "b" comes first in the buffer, a 4-byte gap, then "a", then trailing bytes.
  std::string data(24, '\0');
  float a = 1.5f, b = -2.0f;
  std::memcpy(data.data() + 8, &a, 4);
  std::memcpy(data.data() + 0, &b, 4);
  auto r = parse(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
                       R"("b":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})",
                       data));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->tensors.at("a").at(0), 1.5);
  EXPECT_EQ(r->tensors.at("b").at(0), -2.0);
  EXPECT_EQ(r->tensors.at("b").rank(), 0);
}

TEST(SafetensorsTest, AcceptsEmptyTensorsInsideOthers) {
  // An empty range overlaps nothing, wherever it points inside the buffer.
  auto r = parse(image(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                       R"("e":{"dtype":"F32","shape":[0,3],"data_offsets":[2,2]}})",
                       "abcd"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->tensors.at("e").numel(), 0);
}

TEST(SafetensorsTest, NormalizesBoolBytes) {
  auto r = parse(image(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", std::string("\0\x07\x01", 3)));
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto* p = r->tensors.at("m").data<uint8_t>();
  EXPECT_EQ(p[0], 0);
  EXPECT_EQ(p[1], 1);
  EXPECT_EQ(p[2], 1);
}

// ---- malformed input: one test per check -------------------------------------

TEST(SafetensorsTest, RejectsFileShorterThanEightBytes) {
  EXPECT_CONTAINS(errorOf(""), "shorter than the 8-byte header length");
  EXPECT_CONTAINS(errorOf("1234567"), "7 bytes");
}

TEST(SafetensorsTest, RejectsHeaderLongerThanFile) {
  std::string bytes = image("{}");
  bytes[0] = 100;  // claims 100 header bytes, has 2
  EXPECT_CONTAINS(errorOf(bytes), "header length 100 is larger than the 2 bytes");
}

TEST(SafetensorsTest, RejectsHeaderOverTheLimitWithoutAllocating) {
  std::string bytes = image("{}");
  uint64_t huge = 100'000'001;
  std::memcpy(bytes.data(), &huge, 8);
  EXPECT_CONTAINS(errorOf(bytes), "exceeds the limit");
  huge = ~0ull;  // would overflow 8 + n
  std::memcpy(bytes.data(), &huge, 8);
  EXPECT_CONTAINS(errorOf(bytes), "exceeds the limit");
}

TEST(SafetensorsTest, RejectsInvalidJson) {
  EXPECT_CONTAINS(errorOf(image(R"({"a": )")), "header is not valid JSON");
  EXPECT_CONTAINS(errorOf(image("")), "header is not valid JSON");
  EXPECT_CONTAINS(errorOf(image("{\"\xff\":1}")), "header is not valid JSON");  // not UTF-8
}

TEST(SafetensorsTest, RejectsJsonThatIsNotAnObject) {
  EXPECT_CONTAINS(errorOf(image("[1,2]")), "header must be a JSON object, got array");
  EXPECT_CONTAINS(errorOf(image("42")), "got number");
}

TEST(SafetensorsTest, RejectsDeeplyNestedJson) {
  std::string deep = R"({"a":)" + std::string(10000, '[') + std::string(10000, ']') + "}";
  EXPECT_CONTAINS(errorOf(image(deep)), "nests deeper than");
}

TEST(SafetensorsTest, RejectsDuplicateTensorNames) {
  EXPECT_CONTAINS(errorOf(image(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                R"("w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                                "ab")),
                  "names 'w' more than once");
}

TEST(SafetensorsTest, RejectsEntryThatIsNotAnObject) {
  EXPECT_CONTAINS(errorOf(image(R"({"w":[1]})")), "tensor 'w': entry must be an object");
}

TEST(SafetensorsTest, RejectsMissingFields) {
  EXPECT_CONTAINS(errorOf(image(R"({"w":{"shape":[1],"data_offsets":[0,1]}})", "a")),
                  "tensor 'w': missing \"dtype\"");
  EXPECT_CONTAINS(errorOf(image(R"({"w":{"dtype":"U8","data_offsets":[0,1]}})", "a")),
                  "tensor 'w': missing \"shape\"");
  EXPECT_CONTAINS(errorOf(image(R"({"w":{"dtype":"U8","shape":[1]}})", "a")),
                  "tensor 'w': missing \"data_offsets\"");
}

TEST(SafetensorsTest, RejectsUnknownDType) {
  std::string msg = errorOf(image(R"({"w":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", "a"));
  EXPECT_CONTAINS(msg, "tensor 'w': unknown dtype 'F8_E4M3'");
  EXPECT_CONTAINS(errorOf(image(R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,1]}})", "a")),
                  "\"dtype\" must be a string");
}

TEST(SafetensorsTest, RejectsShapeThatIsNotAListOfNonNegativeInts) {
  auto entry = [](const std::string& shape) {
    return image(R"({"w":{"dtype":"U8","shape":)" + shape + R"(,"data_offsets":[0,1]}})", "a");
  };
  EXPECT_CONTAINS(errorOf(entry("3")), "tensor 'w': \"shape\" must be a list of ints, got number");
  EXPECT_CONTAINS(errorOf(entry("[-1]")), "\"shape\" must be a list of non-negative ints, got -1");
  EXPECT_CONTAINS(errorOf(entry("[1.0]")), "non-negative ints, got a number");
  EXPECT_CONTAINS(errorOf(entry("[\"1\"]")), "non-negative ints, got a string");
  EXPECT_CONTAINS(errorOf(entry("[true]")), "non-negative ints, got a boolean");
  EXPECT_CONTAINS(errorOf(entry("[9223372036854775808]")), "got 9223372036854775808");
}

TEST(SafetensorsTest, RejectsShapeWhoseElementCountOverflows) {
  std::string msg = errorOf(
      image(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]}})", "a"));
  EXPECT_CONTAINS(msg, "tensor 'w': element count of shape [4294967296,4294967296] overflows int64");
}

TEST(SafetensorsTest, RejectsShapeWhoseByteSizeOverflows) {
  std::string msg =
      errorOf(image(R"({"w":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,8]}})", "a"));
  EXPECT_CONTAINS(msg, "tensor 'w': byte size of F64[2305843009213693952] overflows int64");
}

TEST(SafetensorsTest, RejectsOffsetsThatAreNotTwoInts) {
  auto entry = [](const std::string& offsets) {
    return image(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":)" + offsets + "}}", "a");
  };
  EXPECT_CONTAINS(errorOf(entry("[0]")), "tensor 'w': \"data_offsets\" must be a list of two ints");
  EXPECT_CONTAINS(errorOf(entry("[0,1,2]")), "must be a list of two ints");
  EXPECT_CONTAINS(errorOf(entry("{}")), "must be a list of two ints");
  EXPECT_CONTAINS(errorOf(entry("[0,\"1\"]")), "\"data_offsets\" must be two non-negative ints");
  EXPECT_CONTAINS(errorOf(entry("[-1,0]")), "must be two non-negative ints");
  EXPECT_CONTAINS(errorOf(entry("[0,1.5]")), "must be two non-negative ints");
}

TEST(SafetensorsTest, RejectsOffsetsWithBeginAfterEnd) {
  EXPECT_CONTAINS(errorOf(image(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[1,0]}})", "a")),
                  "tensor 'w': \"data_offsets\" begin 1 is after end 0");
}

TEST(SafetensorsTest, RejectsOffsetsThatDoNotMatchTheSize) {
  EXPECT_CONTAINS(errorOf(image(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,12]}})",
                                std::string(24, '\0'))),
                  "tensor 'w': \"data_offsets\" span 12 bytes but F32[2,3] needs 24");
}

TEST(SafetensorsTest, RejectsOffsetsPastTheEndOfTheBuffer) {
  EXPECT_CONTAINS(errorOf(image(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                                std::string(16, '\0'))),
                  "tensor 'w': \"data_offsets\" [8, 24] run past the end of the 16-byte data buffer");
  // Near-UINT64 offsets must not wrap around.
  EXPECT_CONTAINS(errorOf(image(R"({"w":{"dtype":"U8","shape":[1],)"
                                R"("data_offsets":[9223372036854775806,9223372036854775807]}})",
                                "a")),
                  "run past the end");
}

TEST(SafetensorsTest, RejectsOverlappingTensors) {
  std::string msg = errorOf(image(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                  R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                                  std::string(16, '\0')));
  EXPECT_CONTAINS(msg, "tensors 'a' [0, 16) and 'b' [8, 16) overlap");
  // Two tensors sharing exactly the same bytes overlap too.
  EXPECT_CONTAINS(errorOf(image(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                R"("b":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}})",
                                "a")),
                  "overlap");
}

TEST(SafetensorsTest, RejectsMetadataThatIsNotAStringMap) {
  EXPECT_CONTAINS(errorOf(image(R"({"__metadata__":["a"]})")), "\"__metadata__\" must be an object of strings");
  EXPECT_CONTAINS(errorOf(image(R"({"__metadata__":{"epoch":3}})")),
                  "\"__metadata__\" value for key 'epoch' must be a string, got number");
}

TEST(SafetensorsTest, ErrorMessagesEscapeHostileNames) {
  std::string msg = errorOf(image("{\"evil\\nname\":{\"dtype\":\"X\",\"shape\":[],\"data_offsets\":[0,0]}}"));
  EXPECT_CONTAINS(msg, "'evil\\x0aname'");
  msg = errorOf(image("{\"" + std::string(1000, 'n') + "\":3}"));
  EXPECT_LT(msg.size(), 300u);
}

#ifdef KILN_TESTS_DIR
// The fuzz seed corpus is named by intent; keep it honest so the fuzzer
// starts from inputs on both sides of every check.
TEST(SafetensorsTest, FuzzSeedCorpusMatchesItsNames) {
  fs::path dir = fs::path(KILN_TESTS_DIR) / "fuzz" / "corpus" / "safetensors";
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  int seen = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::string name = entry.path().filename().string();
    auto r = readSafetensors(entry.path().string());
    if (name.rfind("valid_", 0) == 0) EXPECT_TRUE(r.ok()) << name << ": " << r.error().message;
    else if (name.rfind("invalid_", 0) == 0) EXPECT_FALSE(r.ok()) << name;
    ++seen;
  }
  EXPECT_GE(seen, 8);
}
#endif

// ---- cross-check with PyTorch ----------------------------------------------

bool pythonHasTorch() {
  static const bool has = std::system(KILN_PYTHON " -c 'import torch' >/dev/null 2>&1") == 0;
  return has;
}

/// Runs a Python script file with arguments; returns its exit status.
int runPython(const fs::path& script, const std::string& args) {
  std::string cmd = std::string(KILN_PYTHON) + " '" + script.string() + "' " + args;
  return std::system(cmd.c_str());
}

void writeText(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

// Parses the file by hand (no safetensors package) and compares every tensor
// to the expected values in the spec, converted by torch itself.
constexpr const char* kPythonReader = R"PY(
import json, struct, sys, torch
path, spec_path = sys.argv[1], sys.argv[2]
dtypes = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
          "U8": torch.uint8, "BOOL": torch.bool}
raw = open(path, "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
assert n % 8 == 0, "header not padded to 8"
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
spec = json.load(open(spec_path))
assert header.pop("__metadata__") == spec.pop("__metadata__"), "metadata differs"
assert sorted(header) == sorted(spec), (sorted(header), sorted(spec))
offset = 0
for name in sorted(header):
    info, want = header[name], spec[name]
    begin, end = info["data_offsets"]
    assert begin == offset, f"{name}: data not contiguous in key order"
    offset = end
    dtype = dtypes[info["dtype"]]
    assert info["dtype"] == want["dtype"] and info["shape"] == want["shape"], name
    if end > begin:
        got = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype).reshape(info["shape"])
    else:
        got = torch.empty(info["shape"], dtype=dtype)
    expected = torch.tensor(want["values"], dtype=torch.float64).to(dtype).reshape(want["shape"])
    assert torch.equal(got, expected), f"{name}: {got} != {expected}"
assert offset == len(data), "trailing bytes"
print("python: checked", len(header), "tensors")
)PY";

TEST(SafetensorsTest, PyTorchReadsWhatKilnWrites) {
  if (!pythonHasTorch()) GTEST_SKIP() << "needs " KILN_PYTHON " with torch (apt install python3-torch)";
  TempDir dir;
  TensorMap tensors;
  nlohmann::json spec;
  spec["__metadata__"] = {{"format", "pt"}, {"source", "kiln test"}};
  for (DType t : kAllDTypes) {
    for (const Shape& shape : {Shape{2, 3}, Shape{}, Shape{0, 2}, Shape{7}}) {
      std::string name = std::string(dtypeName(t)) + "." + shapeStr(shape);
      Tensor x = sample(t, shape);
      std::vector<double> values;
      for (int64_t i = 0; i < x.numel(); ++i) values.push_back(x.at(i));
      tensors[name] = x;
      spec[name] = {{"dtype", dtypeSafetensorsName(t)}, {"shape", shape}, {"values", values}};
    }
  }
  fs::path file = dir.path / "kiln.safetensors";
  ASSERT_TRUE(writeSafetensors(file.string(), tensors, spec["__metadata__"].get<std::map<std::string, std::string>>()).ok());
  writeText(dir.path / "spec.json", spec.dump());
  writeText(dir.path / "reader.py", kPythonReader);
  EXPECT_EQ(runPython(dir.path / "reader.py", "'" + file.string() + "' '" + (dir.path / "spec.json").string() + "'"),
            0);
}

// Writes a file by hand from torch tensors (with a gap and unsorted data, as
// other writers may) and the expected values as JSON for Kiln to compare.
constexpr const char* kPythonWriter = R"PY(
import json, struct, sys, torch
path, values_path = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
tensors = {
    "fc.weight": torch.randn(3, 4),
    "fc.bias": torch.randn(3).to(torch.float64),
    "emb.weight": torch.randn(2, 5).to(torch.bfloat16),
    "half": torch.randn(6).to(torch.float16),
    "ids": torch.randint(-1000, 1000, (2, 2), dtype=torch.int64),
    "i32": torch.randint(-1000, 1000, (3,), dtype=torch.int32),
    "i16": torch.randint(-1000, 1000, (3,), dtype=torch.int16),
    "i8": torch.randint(-100, 100, (3,), dtype=torch.int8),
    "u8": torch.randint(0, 255, (4,), dtype=torch.uint8),
    "mask": torch.rand(5) > 0.5,
    "step": torch.tensor(7, dtype=torch.int64),
    "none": torch.zeros(0, 3),
}
names = {torch.float32: "F32", torch.float64: "F64", torch.bfloat16: "BF16", torch.float16: "F16",
         torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
         torch.bool: "BOOL"}
header, data = {"__metadata__": {"format": "pt"}}, b""
for name in reversed(sorted(tensors)):  # data deliberately not in key order
    t = tensors[name].contiguous()
    raw = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
    data += b"\0" * 3  # a gap before every tensor
    header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [len(data), len(data) + len(raw)]}
    data += raw
text = json.dumps(header).encode()
open(path, "wb").write(struct.pack("<Q", len(text)) + text + data)
json.dump({k: v.to(torch.float64).flatten().tolist() for k, v in tensors.items()}, open(values_path, "w"))
)PY";

TEST(SafetensorsTest, KilnReadsWhatPyTorchWrites) {
  if (!pythonHasTorch()) GTEST_SKIP() << "needs " KILN_PYTHON " with torch (apt install python3-torch)";
  TempDir dir;
  fs::path file = dir.path / "torch.safetensors", values = dir.path / "values.json";
  writeText(dir.path / "writer.py", kPythonWriter);
  ASSERT_EQ(runPython(dir.path / "writer.py", "'" + file.string() + "' '" + values.string() + "'"), 0);
  auto r = readSafetensors(file.string());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->metadata.at("format"), "pt");
  auto expected = nlohmann::json::parse(std::ifstream(values));
  ASSERT_EQ(r->tensors.size(), expected.size());
  for (const auto& [name, want] : expected.items()) {
    const Tensor& got = r->tensors.at(name);
    ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << name;
    for (int64_t i = 0; i < got.numel(); ++i) EXPECT_EQ(got.at(i), want[i].get<double>()) << name << "[" << i << "]";
  }
  EXPECT_EQ(r->tensors.at("fc.weight").shape(), (Shape{3, 4}));
  EXPECT_EQ(r->tensors.at("step").rank(), 0);
  EXPECT_EQ(r->tensors.at("mask").dtype(), DType::Bool);
}

}  // namespace
}  // namespace kiln
