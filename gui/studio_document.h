// What kiln-studio shows: a compile report (docs/report-schema.md) as
// `kiln compile/train --report` writes it, with its final step graph parsed
// back from the report's text IR. Every view reads this one object.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/ir.h"
#include "core/result.h"

namespace kiln::studio {

class StudioDocument {
 public:
  /// Read `path` (a kiln-report JSON). Errors say what is wrong and where:
  /// unreadable, not JSON, not a kiln report, a newer schema version.
  static Result<std::shared_ptr<StudioDocument>> open(const std::string& path);
  /// A report already in memory (a model compiled in-process); `path` names
  /// it in errors and the title.
  static Result<std::shared_ptr<StudioDocument>> fromReport(nlohmann::json report, const std::string& path);

  const std::string& path() const { return path_; }
  const nlohmann::json& report() const { return report_; }
  /// The final step graph; nullptr when the report carries none (written
  /// before reports held `graph.ir`).
  const Graph* graph() const { return graph_.get(); }
  /// "compile" or "train".
  std::string command() const;
  /// The model path the report names.
  std::string modelPath() const;

  /// report.passes / report.kernels, or an empty array (no copy: the pass
  /// entries may hold megabytes of IR).
  const nlohmann::json& passes() const;
  const nlohmann::json& kernels() const;

  /// Whether the report keeps each pass's IR (kiln compile --report-pass-ir,
  /// or a model compiled by kiln-studio).
  bool hasPassIr() const;
  /// The text IR before and after pass `i` (values numbered by id); empty
  /// without pass IR. An unchanged pass's before and after are the same.
  std::string passIrBefore(size_t i) const;
  std::string passIrAfter(size_t i) const;

 private:
  std::string path_;
  nlohmann::json report_;
  std::unique_ptr<Graph> graph_;
};

}  // namespace kiln::studio
