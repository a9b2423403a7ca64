// The PassManager's switches (--passes, --print-ir-after,
// --print-ir-after-change, --verify-each, --dump-dir; their flags are rows
// of the option table): checking them and the PassManager options they ask
// for.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

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


/// Check every pass name up front (one-line errors listing the known
/// passes) and return the --passes pipeline, empty when not given.
Result<std::vector<const PassInfo*>> checkPassFlags(const PassFlags& f);

/// The PassManager options the switches ask for, IR printed to `out`.
PassManagerOptions passManagerOptions(const PassFlags& f, std::ostream* out);

}  // namespace kiln::driver
