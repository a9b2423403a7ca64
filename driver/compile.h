// Compiling a model into a bound training step, for every front end (the
// kiln commands, kiln-studio): the options, importing the model with the
// batch's shapes, the compile cache, building the TrainingSession, and
// choosing the batch source (--input-file, --data, or synthetic batches).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/training_session.h"
#include "core/data/batch_source.h"
#include "core/data/prefetch_source.h"
#include "core/trace.h"
#include "driver/compile_options.h"

namespace kiln::driver {

/// What the compile cache did for this run (the report's `cache` object).
struct CacheUse {
  std::string status = "off";  ///< off, hit, miss, or rebuilt (a corrupt or stale entry replaced)
  std::string dir, key, entry;
  std::string problem;  ///< the corrupt or stale entry's story, when there was one
  double load_ms = 0;   ///< reading and decoding the entry
};

/// A session plus where its batches come from.
struct BoundStep {
  std::unique_ptr<TrainingSession> session;
  std::unique_ptr<BatchSource> batches;
  std::string batch_where;   ///< for error messages ("batch.safetensors", "step 3 of data/")
  bool fixed_batch = false;  ///< --input-file: the same batch every step (checked once)
  size_t num_params = 0;     ///< trainable parameter elements
  double import_ms = 0, compile_ms = 0;
  /// Times the model file was imported: 0 (a compile-cache hit of kiln
  /// compile), 1, or 2 when the file's input types could only be learnt by
  /// importing it (no kiln_inputs.json record) and --batch, --seq-len or
  /// the ranks change them.
  int imports = 0;
  CacheUse cache;
};

/// Told how compiling goes (kiln-studio's progress dialog and Cancel).
class CompileObserver {
 public:
  virtual ~CompileObserver() = default;
  /// A stage begins ("importing model.pt", then "pass 3 of 13: autodiff"),
  /// at `percent` of the whole; false cancels at the next stage boundary
  /// and compileStep fails with compileCancelled().
  virtual bool onStage(int /*percent*/, const std::string& /*stage*/) { return true; }
  /// Asked during the import, between its phases and every few hundred
  /// nodes; false cancels there (libtorch's reading of the archive itself
  /// cannot stop).
  virtual bool keepGoing() { return true; }
};

/// The error of a compile (or a measured run) its observer stopped.
inline Error compileCancelled() {
  return {"cancelled", ErrorKind::kCancelled};
}

/// Validate the options, import the model (once), consult the compile
/// cache, run the passes, bind kernels, build the batch source and check
/// the first batch. Errors are one line.
Result<BoundStep> compileStep(const CompileOptions& a, TrainingGraphKind kind, CompileObserver* observer = nullptr);

}  // namespace kiln::driver
