// kiln bench MODEL [training options] [--compare torch] [--warmup W]
//                  [--steps N] [--json FILE]
// Times Kiln's compiled training step and, with --compare torch, libtorch's
// eager training step on the same module, weights, batches, loss, optimizer
// and thread count, in one process. The two alternate step by step after
// warm-up, so drift in the machine's state (frequency, other load) hits both
// alike. Reports median step times, the speedup (libtorch median / Kiln
// median) and each side's peak heap memory.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/heap_meter.h"
#include "core/file_io.h"
#include "driver/compile.h"
#include "driver/machine_roofs.h"
#include "driver/messages.h"
#include "driver/option_table.h"
#include "driver/report_json.h"

#ifdef KILN_HAVE_TORCH
#include "backend/aten/torch_plugin.h"
#endif

namespace kiln::cli {
namespace {

std::string fixed(double v, int prec) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(prec) << v;
  return s.str();
}

struct BenchCmd {
  CompileOptions train;
  std::string compare;
  std::string json;
  int64_t warmup = 3;
  int profile = 0;  ///< print the N most expensive ops (0: none)
  bool machine = false;  ///< measure the machine's roofs instead of a model
  int64_t gemm_size = 2048;
};

/// kiln bench --machine: the roofs kiln train --report copies into reports.
int benchMachine(const BenchCmd& c) {
  if (c.gemm_size < 16 || c.gemm_size > 16384)
    return reportError(Error{"--gemm-size must be between 16 and 16384, got " + std::to_string(c.gemm_size)});
  std::cout << "measuring this machine (" << cpuModelName() << ", "
            << (c.train.threads > 0 ? std::to_string(c.train.threads) : std::string("all")) << " threads):\n";
  auto m = measureMachine(c.train.threads, c.gemm_size,
                          [](const std::string& what) { std::cout << "  " << what << " ..." << std::endl; });
  if (!m) return reportError(m.error());
  std::cout << "  f32 GEMM  " << formatQuantity(m->fp32_gemm_flops, "FLOP") << "/s\n";
  if (m->bf16_gemm_flops)
    std::cout << "  bf16 GEMM " << formatQuantity(*m->bf16_gemm_flops, "FLOP") << "/s\n";
  else
    std::cout << "  bf16 GEMM not measured: this CPU has no bf16 instructions\n";
  std::cout << "  memory    " << formatQuantity(m->bandwidth_bytes, "B") << "/s (read + written)\n";
  const std::string file = machineFile(c.train.cache_dir);
  if (Status st = saveMachine(file, *m); !st) return reportError(st.error());
  std::cout << "wrote " << file << " (kiln train --report with " << m->threads
            << " threads puts these roofs in its report)\n";
  if (!c.json.empty()) {
    if (Status st = writeFileAtomic(c.json, toJson(*m).dump(2) + "\n"); !st) return reportError(st.error());
    std::cout << "wrote " << c.json << "\n";
  }
  return 0;
}

/// Kiln's time per kernel over the measured steps, largest first: where a
/// step goes (CPU: wall time per node; CUDA: device time between events).
/// Returns the rows for --json.
nlohmann::json printProfile(const std::vector<KernelChoice>& choices, const std::vector<double>& ms, int64_t steps,
                            int top) {
  std::map<std::string, std::pair<double, int>> by_kernel;  // kernel -> ms, nodes
  double total = 0;
  for (size_t i = 0; i < ms.size() && i < choices.size(); ++i) {
    auto& e = by_kernel[choices[i].kernel];
    e.first += ms[i] / static_cast<double>(steps);
    e.second += 1;
    total += ms[i] / static_cast<double>(steps);
  }
  std::vector<std::pair<std::string, std::pair<double, int>>> rows(by_kernel.begin(), by_kernel.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  std::cout << "\n  Kiln step profile (kernel: ms per step, share, nodes), " << fixed(total, 2) << " ms in kernels\n";
  nlohmann::json j = nlohmann::json::array();
  for (size_t i = 0; i < rows.size(); ++i) {
    const double share = total > 0 ? rows[i].second.first / total : 0;
    if (static_cast<int>(i) < top)
      std::cout << "    " << std::left << std::setw(36) << rows[i].first << std::right << std::setw(9)
                << fixed(rows[i].second.first, 3) << std::setw(7) << fixed(100.0 * share, 1) << "%" << std::setw(6)
                << rows[i].second.second << "\n";
    j.push_back({{"kernel", rows[i].first}, {"ms_per_step", rows[i].second.first}, {"nodes", rows[i].second.second}});
  }
  return j;
}

/// Step times and memory of one side. Memory is attributed by watching the
/// heap around each of the side's own operations (the sides never run at the
/// same time): `resident` is what its creation and its steps left allocated
/// (weights, optimizer state, gradients kept between steps), `peak` the
/// largest resident + transient use seen during one of its steps.
struct SideStats {
  std::vector<double> ms;
  int64_t resident = 0;
  int64_t peak = 0;
  double setup_ms = 0;

  template <typename F>
  Status timed(bool record, F&& step) {
    const int64_t before = heapInUse();
    resetHeapPeak();
    auto t0 = std::chrono::steady_clock::now();
    Status st = step();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!st) return st;
    peak = std::max(peak, resident + (heapPeak() - before));
    resident += heapInUse() - before;
    if (record) ms_push(ms);
    return {};
  }
  void ms_push(double ms) { this->ms.push_back(ms); }

  double median() const {
    std::vector<double> v = ms;
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n == 0 ? NAN : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  }
  double min() const { return ms.empty() ? NAN : *std::min_element(ms.begin(), ms.end()); }

  nlohmann::json toJson() const {
    return {{"median_ms", median()}, {"min_ms", min()},       {"step_ms", ms},
            {"peak_bytes", peak},    {"resident_bytes", resident}, {"setup_ms", setup_ms}};
  }
};

std::string mib(int64_t bytes) { return fixed(static_cast<double>(bytes) / (1024.0 * 1024.0), 1); }

std::string batchDescription(const TensorMap& batch) {
  std::string out;
  for (const auto& [name, t] : batch) out += (out.empty() ? "" : ", ") + name + " " + t.type().str();
  return out;
}

int bench(const BenchCmd& c) {
  if (c.machine) return benchMachine(c);
  if (c.train.model.path.empty()) return reportError(Error{"kiln bench: a MODEL to time, or --machine"});
  if (c.warmup < 0) return reportError(Error{"--warmup must be >= 0"});
  if (c.train.steps < 1) return reportError(Error{"--steps must be at least 1 (the measured steps)"});
  if (!c.compare.empty() && c.compare != "torch")
    return reportError(Error{"--compare " + c.compare + ": the only baseline is 'torch' (libtorch eager)"});
#ifndef KILN_HAVE_TORCH
  if (!c.compare.empty()) return reportError(Error{"--compare torch: this kiln was built without libtorch"});
#endif
  if ((c.train.lr_schedule != "constant" || c.train.warmup_steps > 0) && !c.compare.empty())
    return reportError(Error{"--compare torch runs a constant learning rate; drop --lr-schedule and --warmup-steps"});

  CompileOptions args = c.train;
  // One thread count for both sides: Kiln's executor and libtorch both set
  // the process's OpenMP pool.
  const int threads = args.threads > 0 ? args.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  args.threads = threads;

#ifdef KILN_HAVE_TORCH
  // libtorch is a plugin loaded on first use; its start-up allocations belong
  // to neither side, so it is loaded before anything is measured (as when
  // kiln linked it). A load error is reported by the import itself.
  if (!c.compare.empty() || !args.model.path.ends_with(".json")) (void)torchPlugin();
#endif
  SideStats kiln_stats, torch_stats;
  int64_t h0 = heapInUse();
  auto t0 = std::chrono::steady_clock::now();
  auto setup = compileStep(args, TrainingGraphKind::Step);
  if (!setup) return reportError(setup.error(), args.verbose);
  kiln_stats.setup_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  kiln_stats.resident = heapInUse() - h0;
  TrainingSession& s = *setup->session;

  std::string torch_version;
#ifdef KILN_HAVE_TORCH
  std::unique_ptr<EagerTrainer> torch_tr;
  if (!c.compare.empty()) {
    h0 = heapInUse();
    t0 = std::chrono::steady_clock::now();
    auto plugin = torchPlugin();
    if (!plugin) return reportError(plugin.error());
    torch_version = (*plugin)->torchVersion();
    auto tr = (*plugin)->createEagerTrainer({args.model.path, s.config().passes.training, threads});
    if (!tr) return reportError(tr.error());
    torch_tr = std::move(*tr);
    torch_stats.setup_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    torch_stats.resident = heapInUse() - h0;
  }
#endif
  const bool compare = !c.compare.empty();

  auto first = setup->batches->batch(0);
  if (!first) return reportError(first.error());
  std::cout << "kiln bench " << args.model.path << "\n  batch: " << batchDescription(*first) << "\n  "
            << args.loss << " loss, " << args.optimizer << " lr " << args.lr << ", " << threads << " threads, "
            << c.warmup << " warm-up + " << args.steps << " measured steps"
            << (compare ? ", alternating Kiln and libtorch" : "") << "\n";
  if (compare)
    std::cout << "  libtorch " << torch_version << " eager (torch::optim)"
              << (args.amp == "bf16" ? " under torch.autocast(\"cpu\", torch.bfloat16)" : "") << "\n";

  const int64_t total = c.warmup + args.steps;
  const bool tty = ::isatty(STDERR_FILENO);
  double kiln_loss = NAN, torch_loss = NAN;
  double kiln_first = NAN, torch_first = NAN;  // step 0: same weights and batch on both sides
  for (int64_t i = 0; i < total; ++i) {
    auto batch = setup->batches->batch(i);
    if (!batch) return reportError(batch.error());
    const bool record = i >= c.warmup;
    if (i == c.warmup && c.profile > 0 && !s.executor().profilingChangesRuns())
      if (Status p = s.executor().setProfiling(true); !p) return reportError(p.error());
    const double lr = s.nextLr();
    Status st = kiln_stats.timed(record, [&]() -> Status {
      if (Status r = s.step(*batch); !r) return r;
      auto l = s.readLoss();  // the step is complete when its loss is readable
      if (!l) return l.error();
      kiln_loss = *l;
      if (i == 0) kiln_first = *l;
      return {};
    });
    if (!st) return reportError(st.error(), args.verbose);
#ifdef KILN_HAVE_TORCH
    if (compare) {
      if (Status r = torch_tr->setBatch(*batch); !r) return reportError(r.error());
      st = torch_stats.timed(record, [&]() -> Status {
        if (Status r = torch_tr->step(lr); !r) return r;
        torch_loss = torch_tr->lastLoss();
        if (i == 0) torch_first = torch_loss;
        return {};
      });
      if (!st) return reportError(st.error(), args.verbose);
    }
#endif
    if (tty) std::cerr << "\rstep " << i + 1 << "/" << total << (record ? "" : " (warm-up)") << "          " << std::flush;
  }
  if (tty) std::cerr << "\r" << std::string(40, ' ') << "\r";

  const bool mem = heapMeterAvailable();
  auto row = [&](const char* name, const SideStats& st, double loss) {
    std::cout << "  " << std::left << std::setw(10) << name << std::right << std::setw(11) << fixed(st.median(), 2)
              << std::setw(10) << fixed(st.min(), 2) << std::setw(12) << fixed(1000.0 / st.median(), 2)
              << std::setw(12) << (mem ? mib(st.peak) : "n/a") << std::setw(14) << fixed(loss, 6) << "\n";
  };
  std::cout << "\n  " << std::left << std::setw(10) << "" << std::right << std::setw(11) << "median ms"
            << std::setw(10) << "min ms" << std::setw(12) << "steps/s" << std::setw(12) << "peak MiB" << std::setw(14)
            << "last loss" << "\n";
  row("kiln", kiln_stats, kiln_loss);
  nlohmann::json j{{"schema", "kiln-bench"},
                   {"version", 1},
                   {"kiln_version", KILN_VERSION},
                   {"model", args.model.path},
                   {"batch", batchDescription(*first)},
                   {"loss", args.loss},
                   {"optimizer", args.optimizer},
                   {"amp", args.amp},
                   {"lr", args.lr},
                   {"threads", threads},
                   {"warmup_steps", c.warmup},
                   {"measured_steps", args.steps},
                   {"graph_nodes", s.graph().numNodes()},
                   {"peak_memory_measured", mem},
                   {"kiln", kiln_stats.toJson()}};
  j["kiln"]["last_loss"] = kiln_loss;
  if (compare) {
    row("libtorch", torch_stats, torch_loss);
    const double speedup = torch_stats.median() / kiln_stats.median();
    const double loss_rel = std::abs(kiln_first - torch_first) / std::max(std::abs(torch_first), 1e-30);
    std::cout << "\n  speedup " << fixed(speedup, 2) << "x (libtorch median / Kiln median)";
    if (mem)
      std::cout << ", peak memory " << fixed(static_cast<double>(kiln_stats.peak) / std::max<int64_t>(torch_stats.peak, 1), 2)
                << "x libtorch's";
    std::cout << "\n  first-step losses differ by " << std::setprecision(2) << loss_rel
              << " (relative; same model, weights and batch); float32 rounding may let later steps drift apart\n";
    j["torch"] = torch_stats.toJson();
    j["torch"]["last_loss"] = torch_loss;
#ifdef KILN_HAVE_TORCH
    j["torch"]["version"] = torch_version;
#endif
    j["speedup"] = speedup;
    j["first_loss_rel_diff"] = loss_rel;
    j["kiln"]["first_loss"] = kiln_first;
    j["torch"]["first_loss"] = torch_first;
  }
  if (c.profile > 0 && !s.executor().profilingChangesRuns()) {
    j["profile"] = printProfile(s.kernelChoices(), s.executor().nodeMillis(), args.steps, c.profile);
  } else if (c.profile > 0) {
    // On a device, profiled steps run node by node with an event before
    // each node (no captured graph) and wait for their end, so they follow
    // the measured steps instead of being among them.
    if (Status p = s.executor().setProfiling(true); !p) return reportError(p.error());
    const int64_t profiled = std::min<int64_t>(args.steps, 3);
    for (int64_t k = 0; k < profiled; ++k) {
      auto batch = setup->batches->batch(total + k);
      if (!batch) return reportError(batch.error());
      (void)s.nextLr();
      if (Status r = s.step(*batch); !r) return reportError(r.error(), args.verbose);
      if (auto l = s.readLoss(); !l) return reportError(l.error(), args.verbose);
    }
    j["profile"] = printProfile(s.kernelChoices(), s.executor().nodeMillis(), profiled, c.profile);
    std::cout << "  (device time from each node's start event to the next node's, over " << profiled
              << " extra steps enqueued node by node)\n";
  }
  if (!mem) std::cout << "  (peak memory is not measured in sanitizer builds)\n";
  if (!c.json.empty()) {
    if (Status st = writeFileAtomic(c.json, j.dump(2) + "\n"); !st) return reportError(st.error());
    std::cout << "wrote " << c.json << "\n";
  }
  return 0;
}

}  // namespace

void addBenchCommand(CLI::App& app) {
  auto c = std::make_shared<BenchCmd>();
  c->train.steps = 20;
  CLI::App* sub = app.add_subcommand(
      "bench", "time the compiled training step, optionally against libtorch eager on the same model and batches");
  addOptions(sub, c->train, kBench);
  sub->add_option("--compare", c->compare, "baseline to run alternately in the same process: torch (libtorch eager)");
  sub->add_option("--warmup", c->warmup, "unmeasured steps first (default 3)");
  sub->add_option("--profile", c->profile,
                  "also print Kiln's N most expensive kernels (time per step; with --device cuda, device time "
                  "per node over up to 3 extra steps run node by node)");
  sub->add_option("--json", c->json, "write the measurements here (JSON)");
  sub->get_option("model")->required(false);
  sub->add_flag("--machine", c->machine,
                "measure this machine instead of a model: the f32 (and bf16) GEMM rate and the memory bandwidth, "
                "kept in the cache directory's machine.json for the roofline of kiln train --report");
  sub->add_option("--gemm-size", c->gemm_size, "--machine: n of the n x n x n products (default 2048)");
  sub->callback([c] {
    int rc = bench(*c);
    if (rc) throw CLI::RuntimeError(rc);
  });
}

}  // namespace kiln::cli
