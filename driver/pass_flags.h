// The PassManager's command-line switches, shared by kiln train, kiln grad
// and kiln opt: --passes, --print-ir-after, --print-ir-after-change,
// --verify-each, --dump-dir.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/result.h"
#include "passes/pass_manager.h"

namespace kiln::driver {

struct PassFlags {
  std::string passes;                       ///< "a,b,c"
  std::vector<std::string> print_ir_after;  ///< pass names
  bool print_ir_after_change = false;
  bool verify_each = false;
  std::string dump_dir;
};

/// Register the switches on `sub`; `passes_help` describes --passes there.
CLI::Option* addPassFlags(CLI::App* sub, PassFlags& f, const std::string& passes_help);

/// Check every pass name up front (one-line errors listing the known
/// passes) and return the --passes pipeline, empty when not given.
Result<std::vector<const PassInfo*>> checkPassFlags(const PassFlags& f);

/// The PassManager options the switches ask for, IR printed to `out`.
PassManagerOptions passManagerOptions(const PassFlags& f, std::ostream* out);

}  // namespace kiln::driver
