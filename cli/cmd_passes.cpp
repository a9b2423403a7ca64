// kiln passes: every registered pass with its summary and description, and
// the default training pipelines with the reason each pass sits where it is.
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string_view>
#include <utility>

#include "cli/commands.h"
#include "passes/pass_registry.h"
#include "passes/pipelines.h"

namespace kiln::cli {
namespace {

void listPasses(bool verbose) {
  // The name column: the longest name and two spaces.
  size_t width = 0;
  for (const PassInfo& p : allPasses()) width = std::max(width, std::string_view(p.name).size() + 2);
  const int w = static_cast<int>(width);
  std::cout << "passes:\n";
  for (const PassInfo& p : allPasses()) {
    std::cout << "  " << std::left << std::setw(w) << p.name << p.summary << "\n";
    if (verbose) std::cout << "  " << std::setw(w) << "" << p.description << "\n";
  }
  for (auto [kind, title] :
       {std::pair{TrainingGraphKind::Step, "kiln train"}, std::pair{TrainingGraphKind::Gradients, "kiln grad"},
        std::pair{TrainingGraphKind::Eval, "the evaluation step (kiln train --eval-data)"}}) {
    std::cout << "\ndefault pipeline of " << title << ":\n";
    int i = 1;
    for (const PipelineEntry& e : trainingPipeline(kind))
      std::cout << "  " << i++ << ". " << std::left << std::setw(w) << e.pass << e.why << "\n";
  }
}

}  // namespace

void addPassesCommand(CLI::App& app) {
  auto verbose = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand("passes", "list the compiler passes and the default pipelines");
  sub->add_flag("-v,--verbose", *verbose, "also print each pass's description");
  sub->callback([verbose] { listPasses(*verbose); });
}

}  // namespace kiln::cli
