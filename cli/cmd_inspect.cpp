// kiln inspect MODEL [--ir]: inputs, parameters, op histogram, flops.
#include <iostream>
#include <map>
#include <memory>

#include "cli/commands.h"
#include "core/graph_hash.h"
#include "core/op_table.h"
#include "core/text_ir.h"
#include "driver/messages.h"
#include "driver/model_args.h"

namespace kiln::cli {
namespace {

int inspect(const ModelArgs& args, bool ir) {
  auto model = loadAndVerify(args);
  if (!model.ok()) return reportError(model.error());
  const Graph& g = model->graph;
  std::cout << "model   " << args.path << "\n";
  std::cout << "hash    " << hashHex(structuralHash(g)) << "\n";
  std::cout << "inputs\n";
  for (const Value* v : g.inputs())
    if (v->role() == ValueRole::Data) std::cout << "  " << v->name() << "  " << v->type().str() << "\n";
  double params = 0, param_bytes = 0, buffers = 0;
  size_t n_params = 0, n_buffers = 0, n_consts = 0;
  for (const Value* v : g.inputs()) {
    if (v->role() == ValueRole::Param) {
      ++n_params;
      params += static_cast<double>(v->type().numel());
      param_bytes += static_cast<double>(v->type().bytes());
    } else if (v->role() == ValueRole::Buffer) {
      ++n_buffers;
      buffers += static_cast<double>(v->type().numel());
    } else if (v->role() == ValueRole::Const) {
      ++n_consts;
    }
  }
  std::cout << "parameters  " << n_params << " tensors, " << humanCount(params, "") << "elements, "
            << humanCount(param_bytes, "B") << "\n";
  if (!model->aliases.empty()) {
    std::cout << "tied        ";
    for (const auto& [alias, target] : model->aliases) std::cout << alias << " = " << target << "  ";
    std::cout << "\n";
  }
  std::cout << "buffers     " << n_buffers << " tensors, " << humanCount(buffers, "") << "elements\n";
  if (n_consts) std::cout << "constants   " << n_consts << " tensors\n";
  std::cout << "outputs\n";
  for (const GraphOutput& o : g.outputs())
    std::cout << "  " << o.name << "  " << o.value->type().str()
              << (o.role == OutputRole::Output ? "" : "  (" + std::string(outputRoleName(o.role)) + ")") << "\n";
  std::map<std::string, std::pair<int, double>> hist;
  double flops = 0, bytes = 0;
  for (const auto& n : g.nodes()) {
    Cost c = nodeCost(*n);
    flops += c.flops;
    bytes += c.bytes;
    auto& h = hist[n->op()];
    h.first++;
    h.second += c.flops;
  }
  std::cout << "ops         " << g.numNodes() << " nodes, " << hist.size() << " kinds, "
            << humanCount(flops, "FLOP") << " per forward, " << humanCount(bytes, "B") << " moved\n";
  for (const auto& [op, h] : hist) {
    std::string name = op;
    name.resize(std::max<size_t>(name.size(), 22), ' ');
    std::cout << "  " << name << " " << h.first << "  (" << humanCount(h.second, "FLOP") << ")\n";
  }
  if (ir) std::cout << "\n" << printGraph(g);
  return 0;
}

}  // namespace

void addInspectCommand(CLI::App& app) {
  auto args = std::make_shared<ModelArgs>();
  auto ir = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand("inspect", "show a model's inputs, parameters, ops and flops");
  addModelOptionsTo(sub, *args);
  sub->add_flag("--ir", *ir, "also print the text IR");
  sub->callback([args, ir] {
    int rc = inspect(*args, *ir);
    if (rc) throw CLI::RuntimeError(rc);
  });
}

}  // namespace kiln::cli
