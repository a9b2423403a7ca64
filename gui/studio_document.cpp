#include "gui/studio_document.h"

#include "core/file_io.h"
#include "core/text_ir.h"
#include "driver/report_json.h"

namespace kiln::studio {


Result<std::shared_ptr<StudioDocument>> StudioDocument::open(const std::string& path) {
  // Every key the views read, with its type: a renamed or retyped key is an
  // error naming it, not a view that shows 0.
  auto report = driver::readReport(path);
  if (!report) return report.error();
  return fromReport(std::move(*report), path);
}

Result<std::shared_ptr<StudioDocument>> StudioDocument::fromReport(driver::Report report, const std::string& path) {
  auto doc = std::make_shared<StudioDocument>();
  doc->path_ = path;
  doc->report_ = std::move(report);
  if (const auto& ir = doc->report_.graph.ir) {
    auto g = parseGraph(*ir, path + " (graph.ir)");
    if (!g) return Error{path + ": graph.ir: " + g.error().message};
    doc->graph_ = std::make_unique<Graph>(std::move(*g));
  }
  return doc;
}

bool StudioDocument::hasPassIr() const {
  return !passes().empty() && passes()[0].ir_before.has_value();
}

std::string StudioDocument::passIrBefore(size_t i) const {
  const auto& passes = this->passes();
  if (!hasPassIr() || i >= passes.size()) return {};
  // The graph after the last pass before i that changed it, else the input.
  for (size_t k = i; k-- > 0;)
    if (passes[k].ir) return *passes[k].ir;
  return *passes[0].ir_before;
}

std::string StudioDocument::passIrAfter(size_t i) const {
  const auto& passes = this->passes();
  if (!hasPassIr() || i >= passes.size()) return {};
  if (passes[i].ir) return *passes[i].ir;
  return passIrBefore(i);
}

}  // namespace kiln::studio
