#include "gui/studio_document.h"

#include "core/file_io.h"
#include "core/text_ir.h"
#include "driver/report.h"
#include "driver/report_schema.h"

namespace kiln::studio {


Result<std::shared_ptr<StudioDocument>> StudioDocument::open(const std::string& path) {
  auto text = readFile(path);
  if (!text) return text.error();
  nlohmann::json report;
  try {
    report = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::parse_error& e) {
    return Error{path + ": not JSON (" + std::string(e.what()) + ")"};
  }
  return fromReport(std::move(report), path);
}

Result<std::shared_ptr<StudioDocument>> StudioDocument::fromReport(nlohmann::json report, const std::string& path) {
  auto doc = std::make_shared<StudioDocument>();
  doc->path_ = path;
  doc->report_ = std::move(report);
  const nlohmann::json& r = doc->report_;
  if (!r.is_object() || r.value("schema", "") != "kiln-report")
    return Error{path + ": not a kiln report (no \"schema\": \"kiln-report\"; write one with kiln compile --report)"};
  if (r.value("version", 0) > driver::kReportVersion)
    return Error{path + ": report version " + std::to_string(r.value("version", 0)) + " is newer than this " +
                 "kiln-studio reads (" + std::to_string(driver::kReportVersion) + ")"};
  // Every key the views read, with its type: a renamed or retyped key is an
  // error naming it, not a view that shows 0.
  if (Status st = driver::checkReport(r); !st) return Error{path + ": " + st.error().message};
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

namespace {
/// report[key] when it is an array, else an empty one.
const nlohmann::json& arrayAt(const nlohmann::json& report, const char* key) {
  static const nlohmann::json kNone = nlohmann::json::array();
  auto it = report.find(key);
  return it != report.end() && it->is_array() ? *it : kNone;
}

/// entry[key] when it is a string, else "" (a report is user input).
std::string stringAt(const nlohmann::json& entry, const char* key) {
  auto it = entry.is_object() ? entry.find(key) : entry.end();
  return it != entry.end() && it->is_string() ? it->get<std::string>() : std::string();
}
}  // namespace

const nlohmann::json& StudioDocument::passes() const {
  return arrayAt(report_, "passes");
}

const nlohmann::json& StudioDocument::kernels() const {
  return arrayAt(report_, "kernels");
}

bool StudioDocument::hasPassIr() const {
  const nlohmann::json& passes = this->passes();
  return !passes.empty() && passes[0].is_object() && passes[0].contains("ir_before");
}

std::string StudioDocument::passIrBefore(size_t i) const {
  const nlohmann::json& passes = this->passes();
  if (!hasPassIr() || i >= passes.size()) return {};
  // The graph after the last pass before i that changed it, else the input.
  for (size_t k = i; k-- > 0;)
    if (passes[k].is_object() && passes[k].contains("ir")) return stringAt(passes[k], "ir");
  return stringAt(passes[0], "ir_before");
}

std::string StudioDocument::passIrAfter(size_t i) const {
  const nlohmann::json& passes = this->passes();
  if (!hasPassIr() || i >= passes.size()) return {};
  if (passes[i].is_object() && passes[i].contains("ir")) return stringAt(passes[i], "ir");
  return passIrBefore(i);
}

}  // namespace kiln::studio
