// kiln export MODEL --format json|text|dot|svg|fx -o FILE [--graph forward|step|gradients]
//             [training options]: write a graph. `forward` (the default) is
// the imported model; `step` and `gradients` are the optimized training
// step and gradient graph, built exactly as `kiln compile` builds them (the
// same options and pipeline, --passes included).
// kiln ops: list every op Kiln knows, with its CPU kernels.
#include <iostream>
#include <memory>

#include "backend/kernel.h"
#include "backend/training_session.h"
#include "cli/commands.h"
#include "core/file_io.h"
#include "core/op_table.h"
#include "core/text_ir.h"
#include "driver/compile.h"
#include "driver/export_graph.h"
#include "driver/messages.h"
#include "driver/model_args.h"
#include "driver/option_table.h"

namespace kiln::cli {
namespace {

struct ExportCmd {
  CompileOptions train;
  std::string graph = "forward";
  std::string format = "text";
  std::string out;
};

int exportGraph(const ExportCmd& c) {
  size_t nodes = 0;
  Status written;
  if (c.graph == "forward") {
    auto model = loadAndVerify(c.train.model);
    if (!model) return reportError(model.error());
    auto text = formatGraph(model->graph, c.format, model->weights);
    written = text ? writeFileAtomic(c.out, *text) : Status(text.error());
    nodes = model->graph.numNodes();
  } else {
    CompileOptions args = c.train;
    args.compile_only = true;
    auto setup = compileStep(args, c.graph == "step" ? TrainingGraphKind::Step : TrainingGraphKind::Gradients);
    if (!setup) return reportError(setup.error(), c.train.verbose);
    written = exportStepGraph(setup->session->graph(), c.train.model, c.format, c.out);
    nodes = setup->session->graph().numNodes();
  }
  if (!written) return reportError(written.error());
  std::cout << "wrote the " << c.graph << " graph (" << nodes << " nodes) as " << c.format << " to " << c.out << "\n";
  return 0;
}

int listOps() {
  const KernelRegistry& kernels = KernelRegistry::cpu();
  size_t with_kernel = 0, with_grad = 0, no_grad = 0;
  const std::string indent(23, ' ');
  for (const auto& [name, def] : OpTable::get().all()) {
    std::string line = name;
    line.resize(std::max<size_t>(line.size(), 22), ' ');
    std::string ks;
    for (const KernelDef* k : kernels.candidates(name)) ks += (ks.empty() ? "" : ", ") + k->name;
    if (!ks.empty()) ++with_kernel;
    std::string grad = def.grad ? "rule" : !def.no_grad_reason.empty() ? "none (" + def.no_grad_reason + ")" : "-";
    with_grad += def.grad != nullptr;
    no_grad += !def.grad && !def.no_grad_reason.empty();
    std::cout << line << " " << def.summary << "\n"
              << indent << "cpu: " << (ks.empty() ? "-" : ks) << "\n"
              << indent << "gradient: " << grad << "\n";
  }
  std::cout << OpTable::get().all().size() << " ops, " << with_kernel << " with a CPU kernel, " << with_grad
            << " with a gradient rule, " << no_grad << " without a gradient by nature\n";
  return 0;
}

}  // namespace

void addExportCommand(CLI::App& app) {
  auto c = std::make_shared<ExportCmd>();
  CLI::App* sub = app.add_subcommand(
      "export", "write a model's graph, or its optimized training step, as JSON, text IR, Graphviz DOT or SVG");
  addOptions(sub, c->train, kExport);
  sub->add_option("--graph", c->graph,
                  "forward (the imported model, default), step (the optimized training step, as kiln compile "
                  "builds it from the training options) or gradients (as kiln grad)")
      ->check(CLI::IsMember({"forward", "step", "gradients"}));
  sub->add_option("--format", c->format,
                  "json (loads back), text (IR), dot, svg (laid out by Graphviz), or fx (a Python file that "
                  "rebuilds the graph as a torch.fx.GraphModule of aten ops)")
      ->check(CLI::IsMember({"json", "text", "dot", "svg", "fx"}));
  sub->add_option("-o,--output", c->out, "output file")->required();
  sub->callback([c] {
    int rc = exportGraph(*c);
    if (rc) throw CLI::RuntimeError(rc);
  });
}

void addOpsCommand(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("ops", "list the ops Kiln supports and their kernels");
  sub->callback([] { listOps(); });
}

}  // namespace kiln::cli
