#include "driver/pass_flags.h"

namespace kiln::driver {

Result<std::vector<const PassInfo*>> checkPassFlags(const PassFlags& f) {
  for (const std::string& n : f.print_ir_after)
    if (!findPass(n)) return Error{"--print-ir-after: unknown pass '" + n + "' (known: " + knownPassNames() + ")"};
  if (f.passes.empty()) return std::vector<const PassInfo*>{};
  auto names = splitPassList(f.passes);
  if (!names) return Error{"--passes: " + names.error().message};
  return resolvePipeline(*names, "--passes");
}

PassManagerOptions passManagerOptions(const PassFlags& f, std::ostream* out) {
  return {.print_ir_after = {f.print_ir_after.begin(), f.print_ir_after.end()},
          .print_ir_after_change = f.print_ir_after_change,
          .verify_each = f.verify_each,
          .dump_dir = f.dump_dir,
          .out = out};
}

}  // namespace kiln::driver
