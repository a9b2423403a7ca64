// kiln: the headless command line. Every subcommand prints one line
// "kiln: error: ..." and exits non-zero on bad input.
#include <unistd.h>
#include <iostream>

#include <cstdio>
#include <cstdlib>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

int main(int argc, char** argv) {
  // How long OpenMP's idle threads spin before they sleep. libgomp's default
  // (300000 spins) makes every kernel crawl as soon as anything else runs
  // on the machine (a step of many small kernels went from 16 ms to 340 ms
  // on 2 busy cores); never spinning (OMP_WAIT_POLICY=PASSIVE) makes every
  // parallel region wait for a sleeping thread to wake, tens of microseconds
  // each (resnet_mini's step: 9.9 ms). A short spin is the best of both:
  // 3.2 ms on a quiet machine, and 16 ms instead of PASSIVE's 20 ms with two
  // trainings sharing 2 cores.
  // OpenBLAS's own worker threads (the pthread build, Debian's default) spin
  // for 2^28 cycles (~0.1 s) after every GEMM, taking the cores from the
  // OpenMP kernels that follow: ViT-B/16's f32 step went from 2.80-3.03 s
  // to 2.54-2.75 s with 2^13 (attention forward 103-107 -> 57-59 ms, AdamW
  // 205-265 -> 154-175 ms), GPT-2-style 1.98-2.09 -> 1.71 s.
  // libgomp and OpenBLAS read these when they load, before main, so set them
  // and start again; a user's own settings are respected.
  bool restart = false;
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT"))
    restart |= setenv("GOMP_SPINCOUNT", "2000", 1) == 0;
  if (!std::getenv("OPENBLAS_THREAD_TIMEOUT")) restart |= setenv("OPENBLAS_THREAD_TIMEOUT", "13", 1) == 0;
  if (restart) execv("/proc/self/exe", argv);  // returns only on failure: carry on as is
  // Progress lines reach a log file as they happen (`kiln train ... > log`,
  // tail -f), not when a 4 KiB buffer fills or the run ends.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CLI::App app{"kiln: a training compiler for PyTorch models"};
  app.set_version_flag("--version", std::string("kiln ") + KILN_VERSION);
  app.require_subcommand(1);
  kiln::cli::addInspectCommand(app);
  kiln::cli::addCheckCommand(app);
  kiln::cli::addRunCommand(app);
  kiln::cli::addExportCommand(app);
  kiln::cli::addOpsCommand(app);
  kiln::cli::addCompareCommand(app);
  kiln::cli::addCompareReportsCommand(app);
  kiln::cli::addVerifyCommand(app);
  kiln::cli::addTrainCommand(app);
  kiln::cli::addCommCommand(app);
  kiln::cli::addGradCommand(app);
  kiln::cli::addPassesCommand(app);
  kiln::cli::addOptCommand(app);
  kiln::cli::addCompileCommand(app);
  kiln::cli::addBenchCommand(app);
  kiln::cli::addMemoryCommand(app);
  kiln::cli::addCacheCommand(app);
  kiln::cli::addOptionsCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {  // a bug or a device failure below a command: one line, no abort
    std::cerr << "kiln: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
