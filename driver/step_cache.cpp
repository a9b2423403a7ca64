#include "driver/step_cache.h"

#include "backend/aten/torch_plugin.h"
#include "backend/comm/collective_engine.h"
#include "backend/device_step.h"

#include <xxhash.h>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/file_fingerprint.h"
#include "core/graph_hash.h"
#include "core/text_ir.h"
#include "driver/option_table.h"

namespace kiln::driver {
namespace fs = std::filesystem;
namespace {

/// A file's size and modification time, "" when it cannot be read.
std::string fileStamp(const fs::path& file) {
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  if (ec) return "";
  const auto mtime = fs::last_write_time(file, ec).time_since_epoch().count();
  return std::to_string(size) + "-" + std::to_string(mtime);
}

/// This build of Kiln: a rebuilt binary never reads another build's entries
/// (its passes or kernels may differ even at the same version number), nor
/// does one with a rebuilt plugin (the TorchScript importer and the CUDA
/// kernels live in libkiln_torch.so / libkiln_cuda.so).
std::string buildId() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "unknown";
  std::string id = fileStamp(exe);
#ifdef KILN_HAVE_TORCH  // a build without libtorch has no TorchScript plugin
  if (auto torch = findPlugin(torchPluginSpec())) id += " torch " + fileStamp(*torch);
#endif
  if (auto spec = cudaPluginSpec())
    if (auto cuda = findPlugin(*spec)) id += " cuda " + fileStamp(*cuda);
  return id;
}

/// The CPU features kernel selection depends on (a cache directory may be
/// shared between machines).
std::string cpuTarget() {
  std::string t = "cpu";
  if (__builtin_cpu_supports("avx2")) t += "+avx2";
  if (__builtin_cpu_supports("fma")) t += "+fma";
  if (__builtin_cpu_supports("avx512f")) t += "+avx512f";
  return t;
}

nlohmann::ordered_json traceJson(const std::vector<PassTraceEntry>& trace) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const PassTraceEntry& p : trace)
    out.push_back({{"pass", p.pass},
                   {"millis", p.millis},
                   {"changed", p.result.changed},
                   {"statistics", p.result.statistics},
                   {"nodes", p.nodes_after},
                   {"hash", p.hash_after},
                   {"flops", p.flops_after},
                   {"peak_bytes", p.peak_bytes_after}});
  return out;
}

std::vector<PassTraceEntry> traceFrom(const nlohmann::json& j) {
  std::vector<PassTraceEntry> out;
  for (const auto& p : j) {
    PassTraceEntry e;
    e.pass = p.at("pass").get<std::string>();
    e.millis = p.at("millis").get<double>();
    e.result.changed = p.at("changed").get<bool>();
    e.result.statistics = p.at("statistics").get<std::map<std::string, double>>();
    e.nodes_after = p.at("nodes").get<size_t>();
    e.hash_after = p.at("hash").get<uint64_t>();
    e.flops_after = p.at("flops").get<double>();
    e.peak_bytes_after = p.at("peak_bytes").get<uint64_t>();
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

Result<std::string> stepCacheKeyMaterial(const CompileOptions& a, TrainingGraphKind kind,
                                         const TensorMap& first_batch) {
  const int ranks = a.collectives ? a.collectives->size() : a.compile_only ? a.nnodes * a.nproc : 1;
  // Every option that changes the compiled step, by the option table's
  // declaration (the model's and the class weights' files by fingerprint).
  auto options = compiledOptionsJson(a, ranks);
  if (!options) return options.error();
  nlohmann::ordered_json j;
  j["kiln"] = std::string(KILN_VERSION) + " " + buildId();
  j["target"] = cpuTarget();
  if (a.device == "cuda") {  // the plans of one GPU (kernels, autotuned choices) are not another's
    auto backend = cudaBackend();
    if (!backend) return backend.error();
    j["device_target"] = (*backend)->target();
  }
  j["graph"] = kind == TrainingGraphKind::Step ? "step" : kind == TrainingGraphKind::Eval ? "eval" : "gradients";
  j["options"] = std::move(*options);
  // What the options imply beyond their values: an FX dump's weights file
  // (its shapes; its values change nothing compiled), the batch's types,
  // whether --data is a token file, and the ranks.
  if (const std::string p = a.model.path; p.size() > 8 && p.ends_with(".fx.json")) {
    const std::string weights = p.substr(0, p.size() - 8) + ".safetensors";
    if (fs::exists(weights)) {
      auto w = fileFingerprint(weights);
      if (!w) return w.error();
      j["weights"] = *w;
    }
  }
  nlohmann::ordered_json types = nlohmann::ordered_json::object();
  for (const auto& [name, t] : first_batch) types[name] = t.type().str();
  j["batch_types"] = types;
  j["token_data"] = !a.data.empty() && !fs::is_directory(a.data);
  if (ranks > 1)  // the graph holds the buckets' allreduces; a ZeRO-1 graph is one rank's
    j["data_parallel"] = {{"world_size", ranks}, {"rank", a.zero && a.collectives ? a.collectives->rank() : 0}};
  return j.dump();
}

std::string stepCacheKey(const std::string& material) {
  const XXH128_hash_t h = XXH3_128bits(material.data(), material.size());
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return buf;
}

std::string encodeStep(const TrainingSession& s, const std::string& model_path, const std::string& material,
                       const ModelIdentity& model) {
  nlohmann::ordered_json j;
  j["model"] = model_path;
  j["model_contents"] = model.contents;
  j["model_graph"] = model.graph;
  j["created"] =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  j["key_material"] = nlohmann::json::parse(material);
  j["nodes"] = s.graph().numNodes();
  j["hash"] = structuralHash(s.graph());
  j["frozen"] = s.config().passes.training.frozen;
  std::vector<std::string> kernels;
  for (const KernelChoice& k : s.kernelChoices()) kernels.push_back(k.kernel);
  j["kernels"] = kernels;
  nlohmann::ordered_json timings = nlohmann::ordered_json::array();
  bool timed = false;
  for (const KernelChoice& k : s.kernelChoices()) {
    nlohmann::ordered_json t = nlohmann::ordered_json::array();
    for (const KernelTiming& c : k.timings) t.push_back({{"kernel", c.kernel}, {"millis", c.millis}});
    timed |= !k.timings.empty();
    timings.push_back(t);
  }
  if (timed) j["autotune"] = timings;
  j["arena_bytes"] = s.memoryPlan().arena_bytes;
  j["trace"] = traceJson(s.passTrace());
  j["graph"] = printGraph(s.graph());
  return j.dump();
}

Result<CachedStep> decodeStep(const std::string& payload) {
  try {
    const nlohmann::json j = nlohmann::json::parse(payload);
    CachedStep c;
    auto g = parseGraph(j.at("graph").get<std::string>(), "cache entry");
    if (!g) return g.error();
    if (structuralHash(*g) != j.at("hash").get<uint64_t>()) return Error{"the graph does not read back the same"};
    c.step.graph = std::move(*g);
    c.step.trace = traceFrom(j.at("trace"));
    c.frozen = j.at("frozen").get<std::set<std::string>>();
    c.kernels = j.at("kernels").get<std::vector<std::string>>();
    c.arena_bytes = j.at("arena_bytes").get<uint64_t>();
    c.model = {j.at("model_contents").get<std::string>(), j.at("model_graph").get<std::string>()};
    if (j.contains("autotune")) {
      for (const auto& node : j.at("autotune")) {
        c.timings.emplace_back();
        for (const auto& t : node)
          c.timings.back().push_back({t.at("kernel").get<std::string>(), t.at("millis").get<double>(), ""});
      }
      if (c.timings.size() != c.kernels.size()) return Error{"the autotune timings do not match the kernels"};
    }
    return c;
  } catch (const std::exception& e) {
    return Error{std::string("malformed entry: ") + e.what()};
  }
}

Status checkBinding(const TrainingSession& s, const CachedStep& cached) {
  const auto& choices = s.kernelChoices();
  if (choices.size() != cached.kernels.size())
    return Error{"it binds " + std::to_string(choices.size()) + " kernels, the entry " +
                 std::to_string(cached.kernels.size())};
  for (size_t i = 0; i < choices.size(); ++i)
    if (choices[i].kernel != cached.kernels[i])
      return Error{"node " + std::to_string(i) + " binds " + choices[i].kernel + ", the entry " + cached.kernels[i]};
  if (s.memoryPlan().arena_bytes != cached.arena_bytes) return Error{"the memory plan differs"};
  return {};
}

}  // namespace kiln::driver
