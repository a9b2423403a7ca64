// kiln: the headless command line. Every subcommand prints one line
// "kiln: error: ..." and exits non-zero on bad input.
#include <CLI/CLI.hpp>

#include "cli/commands.h"

int main(int argc, char** argv) {
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
