// kiln grad MODEL --input-file BATCH --loss L --output GRADS.safetensors
// One forward and backward at the model's weights, no update: writes the
// gradient of every trainable parameter (keyed by each of its state_dict
// names) and the loss. For checking Kiln's gradients against PyTorch's and
// for debugging a model's training graph.
#include <iostream>

#include "cli/commands.h"
#include "core/safetensors.h"
#include "driver/compile.h"
#include "driver/messages.h"
#include "driver/option_table.h"
#include "driver/ranks.h"

namespace kiln::cli {
namespace {

struct GradCmd {
  CompileOptions train;
  std::string output;
};

int grad(const GradCmd& c) {
  if (shouldLaunch(c.train)) return launchRanks(c.train);
  CompileOptions args = c.train;
  if (Status st = joinRanks(args); !st) return reportError(st.error());
  auto setup = compileStep(args, TrainingGraphKind::Gradients);
  if (!setup) return reportError(setup.error(), c.train.verbose);
  TrainingSession& s = *setup->session;
  auto batch = setup->batches->batch(0);
  if (!batch) return reportError(batch.error());
  if (Status st = s.step(*batch); !st) return reportError(st.error(), c.train.verbose);
  auto loss = s.readLoss();
  if (!loss) return reportError(loss.error());
  if (!isLeadRank(args)) return 0;  // every rank holds the same mean gradients: rank 0 writes them
  TensorMap out = s.gradients();
  // f64 holds the loss and metrics of any model exactly (f32 would round an f64 model's).
  out["loss"] = Tensor::scalar(DType::F64, *loss);
  for (const auto& [k, v] : s.readMetrics()) out["metric:" + k] = Tensor::scalar(DType::F64, v);
  if (Status st = writeSafetensors(c.output, out); !st) return reportError(st.error());
  std::cout << "loss " << *loss << "; wrote " << s.gradients().size() << " gradients (backward graph "
            << s.graph().numNodes() << " nodes) to " << c.output << "\n";
  return 0;
}

}  // namespace

void addGradCommand(CLI::App& app) {
  auto c = std::make_shared<GradCmd>();
  CLI::App* sub = app.add_subcommand("grad", "compute the loss and every parameter's gradient once (no update)");
  addOptions(sub, c->train, kGrad);
  sub->add_option("--output,-o", c->output, "where to write the gradients (safetensors)")->required();
  sub->callback([c] {
    int rc = grad(*c);
    if (rc) throw CLI::RuntimeError(rc);
  });
}

}  // namespace kiln::cli
