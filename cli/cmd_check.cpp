// kiln check MODEL: imports as far as it can and lists every operator it
// could not import at once (grouped, with counts, source lines and module
// scopes), where the other commands stop at the first with one line. Exit
// status 0 when the whole model imports, 1 when something does not, 2 when
// the file cannot be read at all.
#include <iostream>
#include <map>
#include <memory>

#include "cli/commands.h"
#include "driver/messages.h"
#include "driver/model_args.h"

namespace kiln::cli {
namespace {

constexpr size_t kPlacesShown = 3;

int check(const ModelArgs& args) {
  std::vector<UnsupportedOp> found;
  auto model = loadAndVerify(args, &found);
  if (found.empty()) {
    if (!model.ok()) return reportError(model.error());
    std::cout << args.path << ": every op imports (" << model->graph.numNodes() << " Kiln nodes)\n";
    return 0;
  }
  // Grouped by op and reason, in the order first seen.
  std::vector<std::pair<std::string, std::string>> order;
  std::map<std::pair<std::string, std::string>, std::vector<const UnsupportedOp*>> groups;
  for (const UnsupportedOp& u : found) {
    auto key = std::make_pair(u.op, u.reason);
    auto& g = groups[key];
    if (g.empty()) order.push_back(key);
    g.push_back(&u);
  }
  std::map<std::string, int> ops;
  for (const auto& key : order) ops[key.first]++;
  std::cout << args.path << ": " << ops.size() << " unsupported op" << (ops.size() == 1 ? "" : "s") << " ("
            << found.size() << " node" << (found.size() == 1 ? "" : "s")
            << "; what is computed from them was not checked)\n";
  for (const auto& key : order) {
    const auto& nodes = groups[key];
    std::cout << "  " << key.first << "  x" << nodes.size() << "  " << key.second << "\n";
    for (size_t i = 0; i < nodes.size() && i < kPlacesShown; ++i) {
      const UnsupportedOp& u = *nodes[i];
      std::cout << "      at " << (u.location.empty() ? std::string("(no source location)") : u.location)
                << " (scope " << (u.scope.empty() ? std::string("<root>") : u.scope) << ")\n";
    }
    if (nodes.size() > kPlacesShown) std::cout << "      and " << nodes.size() - kPlacesShown << " more\n";
  }
  return 1;
}

}  // namespace

void addCheckCommand(CLI::App& app) {
  auto args = std::make_shared<ModelArgs>();
  CLI::App* sub = app.add_subcommand("check", "list every operator of a model that Kiln cannot import, at once");
  addModelOptionsTo(sub, *args);
  sub->callback([args] {
    int rc = check(*args);
    if (rc) throw CLI::RuntimeError(rc);
  });
}

}  // namespace kiln::cli
