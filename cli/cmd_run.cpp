// kiln run MODEL --input-file IN.safetensors --output-file OUT.safetensors:
// runs the forward on the CPU executor; outputs are keyed output0, ...;
// BufferUpdate outputs (training-mode BatchNorm) are keyed buffer:<name>.
#include <chrono>
#include <iostream>
#include <memory>

#include "backend/cpu/cpu_executor.h"
#include "cli/commands.h"
#include "core/safetensors.h"
#include "driver/messages.h"
#include "driver/model_args.h"

namespace kiln::cli {

namespace {

struct RunArgs {
  ModelArgs model;
  std::string output_file;
  std::string device = "cpu";
  int threads = 0;
  uint64_t seed = 0;
  bool verbose = false;
};

int run(const RunArgs& a) {
  if (a.device != "cpu")
    return reportError(Error{"device '" + a.device + "' is not available in this build; use --device cpu"});
  if (a.model.input_file.empty()) return reportError(Error{"kiln run needs --input-file"});
  auto inputs = readInputs(a.model.input_file);
  if (!inputs.ok()) return reportError(inputs.error());
  auto t0 = std::chrono::steady_clock::now();
  auto model = loadAndVerify(a.model);
  if (!model.ok()) return reportError(model.error(), a.verbose);
  if (model->shapes_only)
    return reportError(
        Error{a.model.path + ": a shapes-only dump (no weights) cannot run; export it with its weights"});
  auto t1 = std::chrono::steady_clock::now();
  CpuExecutorOptions opts;
  opts.num_threads = a.threads;
  opts.seed = a.seed;
  auto ex = CpuExecutor::create(model->graph, opts);
  if (!ex.ok()) return reportError(ex.error(), a.verbose);
  auto outs = ex->runModel(*model, *inputs);
  if (!outs.ok()) return reportError(outs.error(), a.verbose);
  auto t2 = std::chrono::steady_clock::now();
  TensorMap result;
  const auto& gouts = model->graph.outputs();
  for (size_t i = 0; i < gouts.size(); ++i) {
    std::string key = gouts[i].role == OutputRole::Output ? gouts[i].name : "buffer:" + gouts[i].name;
    result[key] = (*outs)[i];
  }
  Status s = writeSafetensors(a.output_file, result);
  if (!s.ok()) return reportError(s.error());
  using ms = std::chrono::duration<double, std::milli>;
  std::cout << "imported " << model->graph.numNodes() << " nodes in " << ms(t1 - t0).count() << " ms; ran forward in "
            << ms(t2 - t1).count() << " ms; wrote " << result.size() << " tensors to " << a.output_file << "\n";
  if (a.verbose)
    for (const KernelChoice& k : ex->kernelChoices()) std::cout << "  " << k.kernel << "  <- " << k.node << "\n";
  return 0;
}

}  // namespace

void addRunCommand(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* sub = app.add_subcommand("run", "run a model's forward on given inputs");
  addModelOptionsTo(sub, a->model);
  sub->add_option("--output-file", a->output_file, "where to write output0, output1, ... (safetensors)")->required();
  sub->add_option("--device", a->device, "cpu (cuda comes with the CUDA backend)");
  sub->add_option("--threads", a->threads, "CPU threads (0: all cores)");
  sub->add_option("--seed", a->seed, "seed for random ops (dropout in training mode)");
  sub->add_flag("--verbose,-v", a->verbose, "print the kernel chosen for every node and full error messages");
  sub->callback([a] {
    int rc = run(*a);
    if (rc) throw CLI::RuntimeError(rc);
  });
}

}  // namespace kiln::cli
