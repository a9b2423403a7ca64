// kiln verify GRAPH.kir|GRAPH.json: parse a graph written by `kiln export`
// (text IR or JSON) and run the verifier; prints its structural hash.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "core/file_io.h"
#include "core/graph_hash.h"
#include "core/graph_json.h"
#include "core/text_ir.h"
#include "core/verifier.h"
#include "driver/messages.h"
#include "driver/model_args.h"

namespace kiln::cli {
namespace {

int verifyFile(const std::string& path) {
  auto text = readFile(path);
  if (!text.ok()) return reportError(text.error());
  bool json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  auto g = json ? graphFromJsonText(*text, path) : parseGraph(*text, path);
  if (!g.ok()) return reportError(g.error());
  Status s = verify(*g);
  if (!s.ok()) return reportError(Error{path + ": " + s.error().message}, /*verbose=*/true);
  std::cout << path << ": ok, " << g->numNodes() << " nodes, hash " << hashHex(structuralHash(*g)) << "\n";
  return 0;
}

}  // namespace

void addVerifyCommand(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand("verify", "parse and verify a graph file (text IR or JSON)");
  sub->add_option("graph", *path, "a .kir text-IR file or a .json graph from kiln export")->required();
  sub->callback([path] {
    int rc = verifyFile(*path);
    if (rc) throw CLI::RuntimeError(rc);
  });
}

}  // namespace kiln::cli
