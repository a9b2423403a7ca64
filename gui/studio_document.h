// What kiln-studio shows: a compile report (docs/report-schema.md) as
// `kiln compile/train --report` writes it, with its final step graph parsed
// back from the report's text IR. Every view reads this one object.
#pragma once

#include <memory>
#include <string>

#include "core/ir.h"
#include "core/result.h"
#include "driver/report_types.h"

namespace kiln::studio {

class StudioDocument {
 public:
  /// Read `path` (a kiln-report JSON, driver/report_json.h). Errors say
  /// what is wrong and where: unreadable, not JSON, not a kiln report,
  /// another schema version, a key missing or of the wrong type.
  static Result<std::shared_ptr<StudioDocument>> open(const std::string& path);
  /// A report already in memory (a model compiled or trained in-process);
  /// `path` names it in errors and the title.
  static Result<std::shared_ptr<StudioDocument>> fromReport(driver::Report report, const std::string& path);

  const std::string& path() const { return path_; }
  const driver::Report& report() const { return report_; }
  /// The final step graph; nullptr when the report carries none (written
  /// before reports held `graph.ir`).
  const Graph* graph() const { return graph_.get(); }
  /// "compile" or "train".
  const std::string& command() const { return report_.command; }
  /// The model path the report names.
  const std::string& modelPath() const { return report_.model.path; }

  const std::vector<driver::ReportPass>& passes() const { return report_.passes; }
  const std::vector<driver::ReportKernel>& kernels() const { return report_.kernels; }

  /// Whether the report keeps each pass's IR (kiln compile --report-pass-ir,
  /// or a model compiled by kiln-studio).
  bool hasPassIr() const;
  /// The text IR before and after pass `i` (values numbered by id); empty
  /// without pass IR. An unchanged pass's before and after are the same.
  std::string passIrBefore(size_t i) const;
  std::string passIrAfter(size_t i) const;

 private:
  std::string path_;
  driver::Report report_;
  std::unique_ptr<Graph> graph_;
};

}  // namespace kiln::studio
