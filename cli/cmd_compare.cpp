// kiln compare ACTUAL.safetensors EXPECTED.safetensors [--tol T]: per-tensor
// parity report using the project's measure, max|a-e| / max|e|;
// exits non-zero when a tensor is missing, differs in type, or exceeds T.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "core/safetensors.h"
#include "core/tensor_compare.h"
#include "driver/messages.h"
#include "driver/model_args.h"

namespace kiln::cli {
namespace {

int compare(const std::string& actual_path, const std::string& expected_path, double tol,
            const std::string& prefix) {
  auto actual = readSafetensors(actual_path);
  if (!actual.ok()) return reportError(actual.error());
  auto expected = readSafetensors(expected_path);
  if (!expected.ok()) return reportError(expected.error());
  int bad = 0, checked = 0;
  for (const auto& [name, e] : expected->tensors) {
    if (!prefix.empty() && name.rfind(prefix, 0) != 0) continue;
    ++checked;
    auto it = actual->tensors.find(name);
    if (it == actual->tensors.end()) {
      std::printf("  %-32s MISSING\n", name.c_str());
      ++bad;
      continue;
    }
    const Tensor& a = it->second;
    if (a.type() != e.type()) {
      std::printf("  %-32s %s, expected %s\n", name.c_str(), a.type().str().c_str(), e.type().str().c_str());
      ++bad;
      continue;
    }
    double err = parityError(a, e);
    bool ok = err <= tol;
    bad += !ok;
    std::printf("  %-32s %-16s rel. max error %.3g %s\n", name.c_str(), e.type().str().c_str(), err,
                ok ? "ok" : "EXCEEDS TOLERANCE");
  }
  if (checked == 0) return reportError(Error{expected_path + ": no tensors to compare"});
  std::printf("%d of %d tensors within %.g\n", checked - bad, checked, tol);
  return bad ? 1 : 0;
}

}  // namespace

void addCompareCommand(CLI::App& app) {
  auto actual = std::make_shared<std::string>(), expected = std::make_shared<std::string>();
  auto prefix = std::make_shared<std::string>();
  auto tol = std::make_shared<double>(1e-4);
  CLI::App* sub = app.add_subcommand("compare", "compare two safetensors files tensor by tensor");
  sub->add_option("actual", *actual, "e.g. kiln run's output")->required();
  sub->add_option("expected", *expected, "e.g. PyTorch's output")->required();
  sub->add_option("--tol", *tol, "tolerance on max|a-e| / max|e| (default 1e-4)");
  sub->add_option("--only", *prefix, "compare only tensors whose name starts with this");
  sub->callback([=] {
    int rc = compare(*actual, *expected, *tol, *prefix);
    if (rc) throw CLI::RuntimeError(rc);
  });
}

}  // namespace kiln::cli
