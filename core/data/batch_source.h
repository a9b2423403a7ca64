// Where training batches come from. Every source is deterministic in the
// step number: batch(s) is the same tensor data whenever it is asked for, so
// a run resumed from a checkpoint sees exactly the batches that an
// uninterrupted run would have seen.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "core/tensor.h"

namespace kiln {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  /// The batch of step `step` (0-based): tensors keyed input0, ..., target.
  virtual Result<TensorMap> batch(int64_t step) = 0;
  /// One line for the log: "3 batches from data/", "synthetic", ...
  virtual std::string describe() const = 0;
  /// How many different batches the source holds before it repeats (an
  /// epoch: an evaluation set is read once through); 0: no end (synthetic).
  virtual int64_t epochBatches() const { return 0; }
};

/// The same batch every step (kiln train --input-file).
std::unique_ptr<BatchSource> fixedBatchSource(TensorMap batch, std::string where);

/// A directory of safetensors batch files, used in file-name order and
/// cycled: step s reads file s mod count. All files must hold the same keys
/// and types (checked when each is read).
Result<std::unique_ptr<BatchSource>> safetensorsDirSource(const std::string& dir);

/// A flat binary file of token ids (little-endian u16, i32 or i64), cut into
/// windows of seq_len + 1 tokens: input0 = window[:-1], target = window[1:],
/// both i64 [batch, seq_len]. Windows follow each other through the file and
/// wrap around at its end; step s uses windows s*batch ... s*batch+batch-1.
/// An epoch is the whole batches the file's windows make (at least one).
/// `token_type` is "u16" (nanoGPT's format), "i32" or "i64".
Result<std::unique_ptr<BatchSource>> tokenFileSource(const std::string& path, const std::string& token_type,
                                                     int64_t batch, int64_t seq_len);

/// What a synthetic batch tensor looks like: floats are N(0, 1) (or, for
/// targets that must be probabilities, U[0, 1) or a softmax of N(0, 1) over
/// the last dim); integers are uniform in [0, high).
struct SyntheticSpec {
  enum class Floats { Normal, Unit, Distribution };
  std::string name;
  TensorType type;
  int64_t high = 2;
  Floats floats = Floats::Normal;
};

/// Random batches drawn from (seed, step).
std::unique_ptr<BatchSource> syntheticSource(std::vector<SyntheticSpec> specs, uint64_t seed);

}  // namespace kiln
