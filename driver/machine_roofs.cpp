#include "driver/machine_roofs.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "backend/cache/compile_cache.h"
#include "backend/cpu/cpu_executor.h"
#include "backend/cpu/cpu_features.h"
#include "core/file_io.h"
#include "core/text_ir.h"
#include "driver/report_json.h"

namespace kiln::driver {
namespace {

/// Fill a float tensor with 0.5 (f32 or bf16): values that keep every
/// product finite, so no kernel takes a slow path for NaN or denormals.
void fillHalf(Tensor& t) {
  if (t.dtype() == DType::BF16) {
    std::fill_n(t.data<uint16_t>(), t.numel(), uint16_t{0x3f00});
  } else {
    std::fill_n(t.data<float>(), t.numel(), 0.5f);
  }
}

/// The best time in ms of node 0 of `ir` over `runs` runs (after one
/// unmeasured run), the executor timing that node alone.
Result<double> bestNodeMillis(const std::string& ir, int threads, int runs, int64_t* used_threads = nullptr) {
  auto g = parseGraph(ir, "<machine bench>");
  if (!g) return g.error();
  auto ex = CpuExecutor::create(*g, {.num_threads = threads});
  if (!ex) return ex.error();
  if (used_threads) *used_threads = ex->threads();
  TensorMap inputs;
  for (const Value* v : g->inputs()) {
    Tensor t = Tensor::empty(v->type());
    fillHalf(t);
    inputs[v->name()] = t;
  }
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r <= runs; ++r) {
    if (Status st = ex->setProfiling(true); !st) return st.error();
    auto out = ex->run(inputs);
    if (!out) return out.error();
    if (r > 0) best = std::min(best, ex->nodeMillis().at(0));
  }
  return best;
}

std::string gemmIr(const std::string& dtype, int64_t n) {
  const std::string t = dtype + "[" + std::to_string(n) + "," + std::to_string(n) + "]";
  // The sum keeps the product an intermediate (in the reused arena) rather
  // than a fresh output buffer each run.
  return "graph gemm(%a: " + t + " data, %b: " + t + " data) {\n  %0 = matmul(%a, %b) : " + t +
         "\n  %1 = sum(%0) : " + dtype + "[]\n  return %1 \"s\"\n}\n";
}

std::string utcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

std::string cpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos) break;
      const size_t start = line.find_first_not_of(" \t", colon + 1);
      return start == std::string::npos ? std::string("unknown CPU") : line.substr(start);
    }
  return "unknown CPU";
}

Result<ReportMachine> measureMachine(int threads, int64_t gemm_n,
                                     const std::function<void(const std::string&)>& progress) {
  if (gemm_n < 16 || gemm_n > 16384)
    return Error{"the GEMM size must be between 16 and 16384, got " + std::to_string(gemm_n)};
  ReportMachine m;
  m.cpu = cpuModelName();
  m.gemm_size = gemm_n;
  m.measured_at = utcNow();
  const double flops = 2.0 * double(gemm_n) * double(gemm_n) * double(gemm_n);
  auto say = [&](const std::string& s) {
    if (progress) progress(s);
  };
  say("f32 GEMM " + std::to_string(gemm_n) + "^3");
  auto f32 = bestNodeMillis(gemmIr("f32", gemm_n), threads, 5, &m.threads);
  if (!f32) return f32.error();
  m.fp32_gemm_flops = flops / (*f32 / 1000.0);
  if (cpu::cpuHasNativeBf16()) {
    say("bf16 GEMM " + std::to_string(gemm_n) + "^3");
    auto bf16 = bestNodeMillis(gemmIr("bf16", gemm_n), threads, 5);
    if (!bf16) return bf16.error();
    m.bf16_gemm_flops = flops / (*bf16 / 1000.0);
  }
  // 3 x 128 MiB: far beyond any cache, so the add streams from memory.
  constexpr int64_t kElements = int64_t{32} << 20;
  say("memory bandwidth (add of 128 MiB tensors)");
  const std::string t = "f32[" + std::to_string(kElements) + "]";
  auto add = bestNodeMillis("graph stream(%a: " + t + " data, %b: " + t + " data) {\n  %0 = add(%a, %b) : " + t +
                                "\n  %1 = sum(%0) : f32[]\n  return %1 \"s\"\n}\n",
                            threads, 5);
  if (!add) return add.error();
  m.bandwidth_bytes = 3.0 * double(kElements) * 4.0 / (*add / 1000.0);
  return m;
}

std::string machineFile(const std::string& cache_dir) {
  return (cache_dir.empty() ? CompileCache::defaultDir() : cache_dir) + "/machine.json";
}

namespace {

Result<nlohmann::json> readMachines(const std::string& path) {
  if (!std::filesystem::exists(path)) return nlohmann::json::array();
  auto text = readFile(path);
  if (!text) return text.error();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("machines") || !j["machines"].is_array())
    return Error{path + ": not a machine file (expected {\"machines\": [...]} as kiln bench --machine writes it)"};
  return j["machines"];
}

}  // namespace

Status saveMachine(const std::string& path, const ReportMachine& m) {
  auto machines = readMachines(path);
  if (!machines) return machines.error();
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& e : *machines) {
    auto old = machineFromJson(e);
    if (old && old->cpu == m.cpu && old->threads == m.threads) continue;  // replaced
    out.push_back(nlohmann::ordered_json::parse(e.dump()));  // kept as it was
  }
  out.push_back(toJson(m));
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return Error{path + ": cannot make its directory (" + ec.message() + ")"};
  return writeFileAtomic(path, nlohmann::ordered_json{{"machines", out}}.dump(2) + "\n");
}

Result<std::optional<ReportMachine>> loadMachine(const std::string& path, int64_t threads,
                                                 std::vector<int64_t>* other_threads) {
  auto machines = readMachines(path);
  if (!machines) return machines.error();
  const std::string cpu = cpuModelName();
  for (size_t i = 0; i < machines->size(); ++i) {
    auto m = machineFromJson((*machines)[i]);
    if (!m) return Error{path + ": machines[" + std::to_string(i) + "]." + m.error().message};
    if (m->cpu == cpu && m->threads == threads) return std::optional<ReportMachine>(*m);
    if (m->cpu == cpu && other_threads) other_threads->push_back(m->threads);
  }
  return std::optional<ReportMachine>();
}

void addMachine(Report& report, const std::string& cache_dir) {
  if (report.device != "cpu") return;
  std::vector<int64_t> others;
  auto m = loadMachine(machineFile(cache_dir), report.execution.threads, &others);
  if (!m) {
    std::cerr << "kiln: warning: the report has no machine roofs: " << m.error().message << "\n";
  } else if (*m) {
    report.machine = **m;
  } else if (!others.empty()) {  // roofs scale with threads: another count's would mislead
    std::cerr << "kiln: note: the report has no machine roofs: kiln bench --machine measured " << others.size()
              << " other thread count(s), this run uses " << report.execution.threads
              << " (kiln bench --machine --threads " << report.execution.threads << ")\n";
  }
}

}  // namespace kiln::driver
