// kiln: the headless command line. Every subcommand prints one line
// "kiln: error: ..." and exits non-zero on bad input.
#include <unistd.h>

#include <cstdlib>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

int main(int argc, char** argv) {
  // OpenMP threads that spin between parallel regions make every kernel crawl
  // as soon as anything else runs on the machine (a training step of many
  // small kernels went from 16 ms to 340 ms on 2 busy cores). libgomp reads
  // OMP_WAIT_POLICY when it loads, before main, so set it and start again;
  // a user's own setting is respected.
  if (!std::getenv("OMP_WAIT_POLICY") && setenv("OMP_WAIT_POLICY", "PASSIVE", 1) == 0)
    execv("/proc/self/exe", argv);  // returns only on failure: carry on as is
  CLI::App app{"kiln: a training compiler for PyTorch models"};
  app.set_version_flag("--version", std::string("kiln ") + KILN_VERSION);
  app.require_subcommand(1);
  kiln::cli::addInspectCommand(app);
  kiln::cli::addRunCommand(app);
  kiln::cli::addExportCommand(app);
  kiln::cli::addOpsCommand(app);
  kiln::cli::addCompareCommand(app);
  kiln::cli::addVerifyCommand(app);
  kiln::cli::addTrainCommand(app);
  kiln::cli::addGradCommand(app);
  kiln::cli::addPassesCommand(app);
  kiln::cli::addOptCommand(app);
  kiln::cli::addCompileCommand(app);
  kiln::cli::addBenchCommand(app);
  kiln::cli::addMemoryCommand(app);
  kiln::cli::addCacheCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
