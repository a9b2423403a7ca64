// The compile cache as `kiln train`, `compile`, `memory` and `bench` use it:
// the key of a training step (what it depends on: the model file's
// structure fingerprint, the batch's types or the shape options, every
// option that changes the step, the target CPU and the Kiln build), and the
// entry that holds the compiled step: the optimized graph in its scheduled
// order, the pass trace, the frozen parameters, the kernel chosen for each
// node, the memory plan's arena size and the model it was compiled from. A
// hit is checked before use: the graph must parse to the same structural
// hash, and binding it must choose the same kernels and plan the same
// arena; anything else is a stale entry, rebuilt. A hit from another file of
// the same structure (other weights) is used only when the model's import
// makes the graph the entry's import made: the passes never read a tensor's
// value, but an import may (a 0-d tensor attribute becomes a scalar).
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backend/cache/compile_cache.h"
#include "backend/training_session.h"
#include "driver/compile.h"

namespace kiln::driver {

/// Everything the step depends on, as canonical JSON text; `first_batch` is
/// the batch read from --input-file / --data, whose tensors' names and types
/// (inputs and target) shape the step (empty when the model's declared
/// shapes or --input-shape decide them).
Result<std::string> stepCacheKeyMaterial(const CompileOptions& a, TrainingGraphKind kind, const TensorMap& first_batch);
/// The key: XXH3-128 of the material, 32 hex digits.
std::string stepCacheKey(const std::string& material);

/// The model file an entry was compiled from, beyond the key's structure
/// fingerprint: the file's contents fingerprint, and the structural hash
/// (hex) of the forward graph its import made at the batch's shapes.
struct ModelIdentity {
  std::string contents, graph;
};

/// A compiled step read back from an entry.
struct CachedStep {
  CompiledStep step;
  std::set<std::string> frozen;
  std::vector<std::string> kernels;  ///< kernel name per node, in order
  /// With --autotune: each node's measured candidates (empty lists for nodes with one).
  std::vector<std::vector<KernelTiming>> timings;
  uint64_t arena_bytes = 0;
  ModelIdentity model;
};

/// The entry's payload for a compiled session, and back.
std::string encodeStep(const TrainingSession& s, const std::string& model_path, const std::string& material,
                       const ModelIdentity& model);
Result<CachedStep> decodeStep(const std::string& payload);
/// Whether the session bound from a cached step chose what the entry says.
Status checkBinding(const TrainingSession& s, const CachedStep& cached);

}  // namespace kiln::driver
