#include "gui/studio_document.h"

#include "core/file_io.h"
#include "core/text_ir.h"

namespace kiln::studio {

namespace {
constexpr int kKnownReportVersion = 1;  // cli/report.h kReportVersion
}

Result<std::shared_ptr<StudioDocument>> StudioDocument::open(const std::string& path) {
  auto text = readFile(path);
  if (!text) return text.error();
  auto doc = std::make_shared<StudioDocument>();
  doc->path_ = path;
  try {
    doc->report_ = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::parse_error& e) {
    return Error{path + ": not JSON (" + std::string(e.what()) + ")"};
  }
  const nlohmann::json& r = doc->report_;
  if (!r.is_object() || r.value("schema", "") != "kiln-report")
    return Error{path + ": not a kiln report (no \"schema\": \"kiln-report\"; write one with kiln compile --report)"};
  if (r.value("version", 0) > kKnownReportVersion)
    return Error{path + ": report version " + std::to_string(r.value("version", 0)) + " is newer than this " +
                 "kiln-studio reads (" + std::to_string(kKnownReportVersion) + ")"};
  if (r.contains("graph") && r["graph"].contains("ir") && r["graph"]["ir"].is_string()) {
    auto g = parseGraph(r["graph"]["ir"].get<std::string>(), path + " (graph.ir)");
    if (!g) return Error{path + ": graph.ir: " + g.error().message};
    doc->graph_ = std::make_unique<Graph>(std::move(*g));
  }
  return doc;
}

std::string StudioDocument::command() const {
  return report_.value("command", "");
}

std::string StudioDocument::modelPath() const {
  return report_.contains("model") ? report_["model"].value("path", "") : "";
}

}  // namespace kiln::studio
