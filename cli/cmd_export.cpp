// kiln export MODEL --format json|text|dot -o FILE: write the imported graph.
// kiln ops: list every op Kiln knows, with its CPU kernels.
#include <iostream>
#include <memory>

#include "backend/kernel.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "core/file_io.h"
#include "core/graph_dot.h"
#include "core/graph_json.h"
#include "core/op_table.h"
#include "core/text_ir.h"

namespace kiln::cli {

void addModelOptionsTo(CLI::App* sub, ModelArgs& a);

namespace {

int exportGraph(const ModelArgs& args, const std::string& format, const std::string& out) {
  auto model = loadAndVerify(args);
  if (!model.ok()) return reportError(model.error());
  std::string text;
  if (format == "json") text = graphToJsonText(model->graph);
  else if (format == "text") text = printGraph(model->graph);
  else text = graphToDot(model->graph);
  Status s = writeFileAtomic(out, text);
  if (!s.ok()) return reportError(s.error());
  std::cout << "wrote " << format << " graph (" << model->graph.numNodes() << " nodes) to " << out << "\n";
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
    std::cout << line << " " << def.summary << "\n" << indent << "cpu: " << (ks.empty() ? "-" : ks) << "\n"
              << indent << "gradient: " << grad << "\n";
  }
  std::cout << OpTable::get().all().size() << " ops, " << with_kernel << " with a CPU kernel, " << with_grad
            << " with a gradient rule, " << no_grad << " without a gradient by nature\n";
  return 0;
}

}  // namespace

void addExportCommand(CLI::App& app) {
  auto args = std::make_shared<ModelArgs>();
  auto format = std::make_shared<std::string>("text");
  auto out = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand("export", "write a model's graph as JSON, text IR or Graphviz DOT");
  addModelOptionsTo(sub, *args);
  sub->add_option("--format", *format, "json | text | dot")->check(CLI::IsMember({"json", "text", "dot"}));
  sub->add_option("-o,--output", *out, "output file")->required();
  sub->callback([args, format, out] {
    int rc = exportGraph(*args, *format, *out);
    if (rc) throw CLI::RuntimeError(rc);
  });
}

void addOpsCommand(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("ops", "list the ops Kiln supports and their kernels");
  sub->callback([] { listOps(); });
}

}  // namespace kiln::cli
