#include "core/import/recorded_inputs.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "core/zip_directory.h"

namespace kiln {
namespace {

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::optional<TensorType> typeOf(const nlohmann::json& e) {
  auto dtype = parseDType(e.at("dtype").get<std::string>());
  if (!dtype) return std::nullopt;
  return TensorType{*dtype, e.at("shape").get<Shape>()};
}

}  // namespace

std::optional<std::vector<TensorType>> recordedInputTypes(const std::string& path) {
  try {
    std::vector<TensorType> types;
    if (endsWith(path, ".json")) {  // an FX dump: the placeholders of kind "input", by index
      auto text = readFile(path);
      if (!text) return std::nullopt;
      const nlohmann::json doc = nlohmann::json::parse(*text);
      std::vector<std::pair<int64_t, TensorType>> inputs;
      for (const auto& p : doc.at("placeholders"))
        if (p.at("kind") == "input") {
          auto t = typeOf(p);
          if (!t) return std::nullopt;
          inputs.emplace_back(p.at("index").get<int64_t>(), *t);
        }
      std::sort(inputs.begin(), inputs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      for (auto& [index, t] : inputs) types.push_back(std::move(t));
      return types;
    }
    // A TorchScript archive: torch.jit.save stores its extra files uncompressed.
    auto record = readStoredZipEntry(path, "/extra/kiln_inputs.json");
    if (!record) return std::nullopt;
    for (const auto& e : nlohmann::json::parse(*record)) {
      auto t = typeOf(e);
      if (!t) return std::nullopt;
      types.push_back(*t);
    }
    return types;
  } catch (const std::exception&) {  // malformed: the importer says what is wrong
    return std::nullopt;
  }
}

}  // namespace kiln
