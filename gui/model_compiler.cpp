#include "gui/model_compiler.h"

#include <chrono>

#include "driver/compile.h"
#include "driver/report.h"

namespace kiln::studio {

Result<driver::Report> compileModelReport(driver::CompileOptions args, const CompileProgress& progress,
                                          const std::atomic<bool>* cancel) {
  const auto t0 = std::chrono::steady_clock::now();
  args.compile_only = true;
  args.keep_pass_ir = true;  // implies no compile-cache read: a cached step has no pass IR
  struct Progress : driver::CompileObserver {
    const CompileProgress& tell;
    const std::atomic<bool>* cancel;
    Progress(const CompileProgress& p, const std::atomic<bool>* c) : tell(p), cancel(c) {}
    bool onStage(int percent, const std::string& stage) override {
      return keepGoing() && (!tell || tell(percent, stage));
    }
    bool keepGoing() override { return !cancel || !cancel->load(); }
  } observer(progress, cancel);
  auto setup = driver::compileStep(args, TrainingGraphKind::Step, &observer);
  if (!setup) return setup.error();
  if (progress) progress(95, "writing the report");
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return driver::buildReport("compile", args, *setup, ms);
}

}  // namespace kiln::studio
