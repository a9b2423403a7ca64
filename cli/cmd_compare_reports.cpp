// kiln compare-reports A.json B.json [--top N]: two reports of `kiln
// compile/train --report` side by side (driver/report_compare.h): step time,
// peak memory, communication, then where the difference comes from by op,
// scope and node, and what each pass left on each side.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "driver/messages.h"
#include "driver/report_compare.h"
#include "driver/report_json.h"

namespace kiln::cli {

void addCompareReportsCommand(CLI::App& app) {
  auto a = std::make_shared<std::string>(), b = std::make_shared<std::string>();
  auto top = std::make_shared<int>(10);
  CLI::App* sub = app.add_subcommand(
      "compare-reports", "compare two reports (kiln compile/train --report): step time, memory, communication, and "
                         "the differences by op, scope, node and pass");
  sub->add_option("a", *a, "the first report (the baseline)")->required();
  sub->add_option("b", *b, "the second report")->required();
  sub->add_option("--top", *top, "rows per table (default 10)");
  sub->callback([a, b, top] {
    if (*top < 1) throw CLI::RuntimeError(driver::reportError(Error{"--top must be at least 1"}));
    auto ra = driver::readReport(*a);
    if (!ra) throw CLI::RuntimeError(driver::reportError(ra.error()));
    auto rb = driver::readReport(*b);
    if (!rb) throw CLI::RuntimeError(driver::reportError(rb.error()));
    if (ra->model.path != rb->model.path)
      std::cerr << "kiln: warning: the reports are of different models (" << ra->model.path << ", "
                << rb->model.path << "): nodes and scopes may not correspond\n";
    driver::printComparison(std::cout, driver::compareReports(*ra, *rb), *a, *b, static_cast<size_t>(*top));
  });
}

}  // namespace kiln::cli
