#include "gui/model_compiler.h"

#include <chrono>

#include "driver/report.h"
#include "driver/compile.h"

namespace kiln::studio {

Result<nlohmann::json> compileModelReport(driver::CompileOptions args, const CompileProgress& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string& path = args.model.path;
  args.compile_only = true;
  args.keep_pass_ir = true;  // implies no compile-cache read: a cached step has no pass IR
  bool cancelled = false;
  if (progress && !progress(0, "importing " + path)) return Error{"cancelled"};
  args.pass_progress = [&](size_t index, size_t count, const std::string& pass) {
    const int percent = 10 + static_cast<int>(80 * index / std::max<size_t>(count, 1));
    const std::string stage = "pass " + std::to_string(index + 1) + " of " + std::to_string(count) + ": " + pass;
    if (progress && !progress(percent, stage)) cancelled = true;
    return !cancelled;
  };
  auto setup = driver::compileStep(args, TrainingGraphKind::Step);
  if (!setup) return Error{cancelled ? "cancelled" : setup.error().message};
  if (progress) progress(95, "writing the report");
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // ordered_json keeps the CLI's key order; the document reads plain json.
  return nlohmann::json(driver::buildReport("compile", args, *setup, ms));
}

}  // namespace kiln::studio
