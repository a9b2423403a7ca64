// safetensors reader and writer.
//
// The reader treats the file as hostile: it validates the header length, the
// JSON, every tensor entry and the layout of the data buffer first, and only
// then allocates tensors. Because validated tensors lie inside the data buffer
// and do not overlap, the bytes it allocates never exceed the file size.
#include "core/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <set>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/file_io.h"

namespace kiln {
namespace {

using nlohmann::json;

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this reader copies it as-is");

// Same limit as the reference Rust implementation: real headers are a few MB.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// A valid header nests three deep ({name: {shape: [..]}}). nlohmann's parser
// keeps a stack entry per level, so 100 MB of '[' would cost gigabytes.
constexpr size_t kMaxNesting = 16;
constexpr const char* kMetadataKey = "__metadata__";

/// A tensor entry that passed validation; data is [begin, end) of the buffer.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

/// Name for an error message: quoted, control bytes escaped, long names cut,
/// so a hostile name cannot break the one-line message.
std::string quoteName(std::string_view name) {
  constexpr size_t kMaxShown = 120;
  std::string out = "'";
  size_t n = name.size() > kMaxShown ? kMaxShown : name.size();
  // Do not cut a UTF-8 sequence in half.
  while (n < name.size() && n > 0 && (static_cast<unsigned char>(name[n]) & 0xC0) == 0x80) --n;
  for (size_t i = 0; i < n; ++i) {
    auto c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\') {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += n < name.size() ? "'..." : "'";
  return out;
}

/// Deepest bracket nesting outside strings. Meaningless for malformed JSON,
/// but then the parser rejects the header anyway.
size_t maxNesting(std::string_view s) {
  size_t depth = 0, worst = 0;
  bool inString = false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (inString) {
      if (c == '\\') ++i;
      else if (c == '"') inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      worst = std::max(worst, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return worst;
}

uint64_t readLe64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

void appendLe64(std::string& out, uint64_t v) {
  char b[8];
  std::memcpy(b, &v, 8);
  out.append(b, 8);
}

/// Validates one image; every error names `where_` and what is wrong.
class Parser {
 public:
  Parser(std::span<const uint8_t> bytes, const std::string& where) : bytes_(bytes), where_(where) {}

  SafetensorsFile parse() {
    std::string_view headerText = splitHeader();
    json header = parseHeader(headerText);
    SafetensorsFile file;
    std::vector<Entry> entries;
    for (const auto& [key, value] : header.items()) {
      if (key == kMetadataKey) file.metadata = parseMetadata(value);
      else entries.push_back(parseEntry(key, value));
    }
    checkNoOverlap(entries);
    for (const Entry& e : entries) file.tensors.emplace(e.name, makeTensor(e));
    return file;
  }

 private:
  [[noreturn]] void error(const std::string& what) const { fail(where_ + ": " + what); }
  [[noreturn]] void tensorError(const std::string& name, const std::string& what) const {
    error("tensor " + quoteName(name) + ": " + what);
  }

  /// Checks the length prefix; sets data_ to the buffer after the header.
  std::string_view splitHeader() {
    if (bytes_.size() < 8)
      error("not a safetensors file: " + std::to_string(bytes_.size()) +
            " bytes is shorter than the 8-byte header length");
    uint64_t n = readLe64(bytes_.data());
    if (n > kMaxHeaderBytes)
      error("header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(kMaxHeaderBytes) +
            " bytes (corrupt or not a safetensors file)");
    if (n > bytes_.size() - 8)
      error("header length " + std::to_string(n) + " is larger than the " + std::to_string(bytes_.size() - 8) +
            " bytes that follow it (truncated or not a safetensors file)");
    data_ = bytes_.subspan(8 + n);
    return {reinterpret_cast<const char*>(bytes_.data() + 8), static_cast<size_t>(n)};
  }

  json parseHeader(std::string_view text) const {
    if (maxNesting(text) > kMaxNesting)
      error("header JSON nests deeper than " + std::to_string(kMaxNesting) + " levels");
    // nlohmann keeps the last of duplicate keys; a repeated tensor name would
    // silently shadow another entry, so note it while parsing.
    std::string duplicate;
    bool hasDuplicate = false;
    std::set<std::string> seen;
    json::parser_callback_t noteDuplicates = [&](int depth, json::parse_event_t event, json& parsed) {
      if (depth == 1 && event == json::parse_event_t::key && !hasDuplicate &&
          !seen.insert(parsed.get<std::string>()).second) {
        hasDuplicate = true;
        duplicate = parsed.get<std::string>();
      }
      return true;
    };
    json header;
    try {
      header = json::parse(text.begin(), text.end(), noteDuplicates);
    } catch (const json::exception& e) {
      std::string msg = e.what();
      // Drop nlohmann's "[json.exception.parse_error.101] " prefix.
      if (auto pos = msg.find("] "); msg.rfind("[json.", 0) == 0 && pos != std::string::npos) msg.erase(0, pos + 2);
      error("header is not valid JSON: " + msg);
    }
    if (!header.is_object()) error(std::string("header must be a JSON object, got ") + header.type_name());
    if (hasDuplicate) error("header names " + quoteName(duplicate) + " more than once");
    return header;
  }

  std::map<std::string, std::string> parseMetadata(const json& value) const {
    if (!value.is_object())
      error(std::string("\"__metadata__\" must be an object of strings, got ") + value.type_name());
    std::map<std::string, std::string> out;
    for (const auto& [k, v] : value.items()) {
      if (!v.is_string())
        error("\"__metadata__\" value for key " + quoteName(k) + " must be a string, got " + v.type_name());
      out.emplace(k, v.get<std::string>());
    }
    return out;
  }

  /// A non-negative JSON integer that fits int64, or nullopt.
  static std::optional<int64_t> nonNegativeInt(const json& v) {
    if (v.is_number_unsigned()) {
      auto u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(u);
    }
    if (v.is_number_integer() && v.get<int64_t>() >= 0) return v.get<int64_t>();
    return std::nullopt;
  }

  const json& field(const std::string& name, const json& entry, const char* key) const {
    auto it = entry.find(key);
    if (it == entry.end()) tensorError(name, std::string("missing \"") + key + "\"");
    return *it;
  }

  Entry parseEntry(const std::string& name, const json& entry) const {
    if (!entry.is_object()) tensorError(name, std::string("entry must be an object, got ") + entry.type_name());
    Entry e;
    e.name = name;
    e.dtype = parseEntryDType(name, field(name, entry, "dtype"));
    e.shape = parseShape(name, field(name, entry, "shape"));
    parseOffsets(e, field(name, entry, "data_offsets"));
    return e;
  }

  DType parseEntryDType(const std::string& name, const json& v) const {
    if (!v.is_string()) tensorError(name, std::string("\"dtype\" must be a string, got ") + v.type_name());
    auto s = v.get<std::string>();
    if (auto t = parseSafetensorsDType(s)) return *t;
    tensorError(name, "unknown dtype " + quoteName(s) +
                          " (supported: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");
  }

  Shape parseShape(const std::string& name, const json& v) const {
    if (!v.is_array()) tensorError(name, std::string("\"shape\" must be a list of ints, got ") + v.type_name());
    Shape shape;
    shape.reserve(v.size());
    for (const json& d : v) {
      auto dim = nonNegativeInt(d);
      if (!dim) tensorError(name, "\"shape\" must be a list of non-negative ints, got " + jsonBrief(d));
      shape.push_back(*dim);
    }
    return shape;
  }

  /// Fills begin/end and checks them against the shape and the buffer.
  void parseOffsets(Entry& e, const json& v) const {
    if (!v.is_array() || v.size() != 2)
      tensorError(e.name, "\"data_offsets\" must be a list of two ints [begin, end]");
    auto begin = nonNegativeInt(v[0]), end = nonNegativeInt(v[1]);
    if (!begin || !end) tensorError(e.name, "\"data_offsets\" must be two non-negative ints");
    if (*begin > *end)
      tensorError(e.name, "\"data_offsets\" begin " + std::to_string(*begin) + " is after end " +
                              std::to_string(*end));
    e.begin = static_cast<uint64_t>(*begin);
    e.end = static_cast<uint64_t>(*end);
    uint64_t need = byteSize(e);
    if (e.end - e.begin != need)
      tensorError(e.name, "\"data_offsets\" span " + std::to_string(e.end - e.begin) + " bytes but " +
                              typeStr(e) + " needs " + std::to_string(need));
    if (e.end > data_.size())
      tensorError(e.name, "\"data_offsets\" [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                              "] run past the end of the " + std::to_string(data_.size()) + "-byte data buffer");
  }

  /// Bytes the entry's dtype and shape need, refusing counts that overflow.
  uint64_t byteSize(const Entry& e) const {
    int64_t numel = 1;
    for (int64_t d : e.shape)
      if (__builtin_mul_overflow(numel, d, &numel))
        tensorError(e.name, "element count of shape " + shapeStr(e.shape) + " overflows int64");
    int64_t bytes;
    if (__builtin_mul_overflow(numel, static_cast<int64_t>(dtypeSize(e.dtype)), &bytes))
      tensorError(e.name, "byte size of " + typeStr(e) + " overflows int64");
    return static_cast<uint64_t>(bytes);
  }

  static std::string typeStr(const Entry& e) {
    return std::string(dtypeSafetensorsName(e.dtype)) + shapeStr(e.shape);
  }

  /// Short description of an unexpected JSON value, without dumping it whole.
  static std::string jsonBrief(const json& v) {
    if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());  // before: unsigned is "integer" too
    if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
    return std::string("a ") + v.type_name();
  }

  /// Gaps and trailing bytes are allowed (many writers align), overlaps are not.
  void checkNoOverlap(std::vector<Entry>& entries) const {
    std::vector<const Entry*> order;
    for (const Entry& e : entries)
      if (e.end > e.begin) order.push_back(&e);  // an empty range overlaps nothing
    std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
      return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    for (size_t i = 1; i < order.size(); ++i) {
      const Entry &a = *order[i - 1], &b = *order[i];
      if (b.begin < a.end)
        error("tensors " + quoteName(a.name) + " [" + std::to_string(a.begin) + ", " + std::to_string(a.end) +
              ") and " + quoteName(b.name) + " [" + std::to_string(b.begin) + ", " + std::to_string(b.end) +
              ") overlap in the data buffer");
    }
  }

  Tensor makeTensor(const Entry& e) const {
    Tensor t(e.dtype, e.shape);
    if (e.end > e.begin) std::memcpy(t.raw(), data_.data() + e.begin, e.end - e.begin);
    if (e.dtype == DType::Bool) {
      // Only 0 and 1 are valid bools; normalize so no consumer sees another byte.
      auto* p = t.data<uint8_t>();
      for (size_t i = 0; i < t.bytes(); ++i) p[i] = p[i] != 0;
    }
    return t;
  }

  std::span<const uint8_t> bytes_;
  std::span<const uint8_t> data_;
  const std::string& where_;
};

/// Compact JSON; strings must be valid UTF-8 (the format requires it).
std::string dumpHeader(const nlohmann::ordered_json& header) {
  try {
    return header.dump();
  } catch (const json::type_error&) {
    fail("cannot write safetensors: a tensor name or metadata string is not valid UTF-8");
  }
}

}  // namespace

Result<SafetensorsFile> parseSafetensors(std::span<const uint8_t> bytes, const std::string& where) {
  return catchErrors([&] { return Parser(bytes, where).parse(); });
}

Result<SafetensorsFile> readSafetensors(const std::string& path) {
  auto data = readFile(path);
  if (!data.ok()) return data.error();
  const auto* p = reinterpret_cast<const uint8_t*>(data->data());
  return parseSafetensors({p, data->size()}, path);
}

// Throws KilnException for an undefined tensor, a tensor named "__metadata__"
// or strings that are not UTF-8; writeSafetensors turns that into an Error.
std::string serializeSafetensors(const TensorMap& tensors, const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {  // std::map: key order
    if (name == kMetadataKey) fail("cannot write safetensors: a tensor may not be named \"__metadata__\"");
    if (!t.defined()) fail("cannot write safetensors: tensor " + quoteName(name) + " is undefined");
    header[name] = {{"dtype", dtypeSafetensorsName(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.bytes()}}};
    offset += t.bytes();
  }
  std::string text = dumpHeader(header);
  // Pad so the data buffer starts 8-byte aligned, as the reference writer does.
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + text.size() + offset);
  appendLe64(out, text.size());
  out += text;
  for (const auto& [name, t] : tensors) out.append(static_cast<const char*>(t.raw()), t.bytes());
  return out;
}

Status writeSafetensors(const std::string& path, const TensorMap& tensors,
                        const std::map<std::string, std::string>& metadata) {
  auto bytes = catchErrors([&] { return serializeSafetensors(tensors, metadata); });
  if (!bytes.ok()) return Error{path + ": " + bytes.error().message};
  return writeFileAtomic(path, *bytes);
}

}  // namespace kiln
