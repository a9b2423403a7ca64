// The table of every pass: one entry per pass with its name, a one-line
// summary and a description, and the function that runs it. Pipelines
// (passes/pipelines.h) and the command line (--passes=a,b,c) name passes
// through this table only.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "passes/pass.h"

namespace kiln {

/// Runs one pass over a graph in place.
using PassFn = Result<PassResult> (*)(Graph&, PassContext&);

/// One registered pass.
struct PassInfo {
  const char* name;         ///< what --passes and --print-ir-after use
  const char* summary;      ///< one line, for `kiln passes` and reports
  const char* description;  ///< what it needs before it runs and guarantees after
  PassFn run;
};

/// Every pass Kiln has, in no particular order.
const std::vector<PassInfo>& allPasses();

/// The pass called `name`, or nullptr.
const PassInfo* findPass(std::string_view name);

/// "a, b, c": the registered names, for error messages.
std::string knownPassNames();

}  // namespace kiln
