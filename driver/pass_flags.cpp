#include "driver/pass_flags.h"

namespace kiln::driver {

CLI::Option* addPassFlags(CLI::App* sub, PassFlags& f, const std::string& passes_help) {
  CLI::Option* passes = sub->add_option("--passes", f.passes, passes_help);
  sub->add_option("--print-ir-after", f.print_ir_after, "print the text IR after this pass (repeatable)");
  sub->add_flag("--print-ir-after-change", f.print_ir_after_change,
                "print the text IR after every pass that changed it");
  sub->add_flag("--verify-each", f.verify_each, "verify the graph after every pass (else once at the end)");
  sub->add_option("--dump-dir", f.dump_dir, "write the text IR before and after every pass into this directory");
  return passes;
}

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
