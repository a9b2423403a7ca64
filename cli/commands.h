// The kiln subcommands; each registers itself on the CLI11 app.
#pragma once

#include <CLI/CLI.hpp>

namespace kiln::driver {}

namespace kiln::cli {

// The commands are front ends over driver/: flag binding and printing.
using namespace kiln::driver;

void addInspectCommand(CLI::App& app);
void addCheckCommand(CLI::App& app);
void addRunCommand(CLI::App& app);
void addExportCommand(CLI::App& app);
void addOpsCommand(CLI::App& app);
void addCompareCommand(CLI::App& app);
void addCompareReportsCommand(CLI::App& app);
void addVerifyCommand(CLI::App& app);
void addTrainCommand(CLI::App& app);
void addCommCommand(CLI::App& app);  // cmd_train.cpp: kiln comm
void addGradCommand(CLI::App& app);
void addPassesCommand(CLI::App& app);
void addOptCommand(CLI::App& app);
void addCompileCommand(CLI::App& app);
void addBenchCommand(CLI::App& app);
void addMemoryCommand(CLI::App& app);
void addCacheCommand(CLI::App& app);
void addOptionsCommand(CLI::App& app);

}  // namespace kiln::cli
