#include "core/data/shard_source.h"

#include <cstring>

namespace kiln {

Result<TensorMap> shardBatch(const TensorMap& batch, int rank, int ranks, const std::string& where) {
  if (ranks <= 1) return batch;
  TensorMap out;
  for (const auto& [name, t] : batch) {
    const Shape& s = t.type().shape;
    if (s.empty())
      return Error{where + ": '" + name + "' is 0-d: it cannot be split between " + std::to_string(ranks) + " ranks"};
    if (s[0] % ranks != 0)
      return Error{where + ": '" + name + "' has " + std::to_string(s[0]) + " rows along its first dimension, which " +
                   std::to_string(ranks) + " ranks cannot split evenly (use a batch divisible by --nproc)"};
    TensorType part = t.type();
    part.shape[0] = s[0] / ranks;
    Tensor slice(part);
    if (part.bytes())
      std::memcpy(slice.raw(), static_cast<const unsigned char*>(t.raw()) + part.bytes() * static_cast<size_t>(rank),
                  part.bytes());
    out[name] = std::move(slice);
  }
  return out;
}

namespace {

class ShardedSource : public BatchSource {
 public:
  ShardedSource(std::unique_ptr<BatchSource> source, int rank, int ranks)
      : source_(std::move(source)), rank_(rank), ranks_(ranks) {}
  Result<TensorMap> batch(int64_t step) override {
    auto b = source_->batch(step);
    if (!b) return b;
    return shardBatch(*b, rank_, ranks_, source_->describe() + " (step " + std::to_string(step) + ")");
  }
  std::string describe() const override {
    return source_->describe() + ", rank " + std::to_string(rank_) + "'s 1/" + std::to_string(ranks_);
  }
  int64_t epochBatches() const override { return source_->epochBatches(); }

 private:
  std::unique_ptr<BatchSource> source_;
  int rank_, ranks_;
};

}  // namespace

std::unique_ptr<BatchSource> shardedSource(std::unique_ptr<BatchSource> source, int rank, int ranks) {
  if (ranks <= 1) return source;
  return std::make_unique<ShardedSource>(std::move(source), rank, ranks);
}

}  // namespace kiln
