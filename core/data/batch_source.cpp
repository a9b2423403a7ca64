#include "core/data/batch_source.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <random>

#include "core/file_io.h"
#include "core/safetensors.h"

namespace kiln {
namespace fs = std::filesystem;

namespace {

int64_t readToken(const char* p, size_t width) {
  if (width == 2) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  if (width == 4) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  int64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

class FixedBatch : public BatchSource {
 public:
  FixedBatch(TensorMap b, std::string where) : batch_(std::move(b)), where_(std::move(where)) {}
  Result<TensorMap> batch(int64_t) override { return batch_; }
  std::string describe() const override { return "the batch in " + where_ + " every step"; }
  int64_t epochBatches() const override { return 1; }

 private:
  TensorMap batch_;
  std::string where_;
};

class SafetensorsDir : public BatchSource {
 public:
  SafetensorsDir(std::string dir, std::vector<std::string> files) : dir_(std::move(dir)), files_(std::move(files)) {}
  Result<TensorMap> batch(int64_t step) override {
    const std::string& path = files_[static_cast<size_t>(step) % files_.size()];
    auto f = readSafetensors(path);
    if (!f) return f.error();
    if (!first_.empty()) {
      for (const auto& [k, t] : first_)
        if (!f->tensors.count(k) || f->tensors.at(k).type() != t)
          return Error{path + ": '" + k + "' is missing or has another type than in " + files_[0] + " (" + t.str() +
                       ")"};
    } else {
      for (const auto& [k, t] : f->tensors) first_[k] = t.type();
    }
    return std::move(f->tensors);
  }
  std::string describe() const override {
    return std::to_string(files_.size()) + " batch files in " + dir_ + " (cycled)";
  }
  int64_t epochBatches() const override { return static_cast<int64_t>(files_.size()); }

 private:
  std::string dir_;
  std::vector<std::string> files_;
  std::map<std::string, TensorType> first_;
};

// Holds the file's bytes as stored (shared: tokenBytes below) and widens only
// the windows a batch takes: a 20 MB u16 file stays 20 MB, not 80 MB of int64.
class TokenFile : public BatchSource {
 public:
  TokenFile(std::string path, std::shared_ptr<const std::string> raw, size_t width, int64_t batch, int64_t seq)
      : path_(std::move(path)), raw_(std::move(raw)), width_(width), batch_(batch), seq_(seq) {}
  Result<TensorMap> batch(int64_t step) override {
    const int64_t windows = (numTokens() - 1) / seq_;  // each window needs seq_ + 1 tokens
    Tensor in(DType::I64, {batch_, seq_}), tg(DType::I64, {batch_, seq_});
    int64_t* ip = in.data<int64_t>();
    int64_t* tp = tg.data<int64_t>();
    for (int64_t b = 0; b < batch_; ++b) {
      const int64_t start = ((step * batch_ + b) % windows) * seq_;
      widen(start, ip + b * seq_);
      widen(start + 1, tp + b * seq_);
    }
    return TensorMap{{"input0", in}, {"target", tg}};
  }
  std::string describe() const override {
    return std::to_string(numTokens()) + " tokens in " + path_ + ", windows of " + std::to_string(seq_);
  }
  int64_t epochBatches() const override { return std::max<int64_t>(1, (numTokens() - 1) / seq_ / batch_); }

 private:
  int64_t numTokens() const { return static_cast<int64_t>(raw_->size() / width_); }
  // seq_ tokens from `first` as int64 (the file is little-endian, as x86 and arm64 are).
  void widen(int64_t first, int64_t* out) const {
    const char* p = raw_->data() + static_cast<size_t>(first) * width_;
    for (int64_t i = 0; i < seq_; ++i, p += width_) out[i] = readToken(p, width_);
  }
  std::string path_;
  std::shared_ptr<const std::string> raw_;
  size_t width_;
  int64_t batch_, seq_;
};

class Synthetic : public BatchSource {
 public:
  Synthetic(std::vector<SyntheticSpec> specs, uint64_t seed) : specs_(std::move(specs)), seed_(seed) {}
  Result<TensorMap> batch(int64_t step) override {
    std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(step));
    TensorMap out;
    for (const SyntheticSpec& s : specs_) {
      Tensor t(s.type);
      if (isFloating(s.type.dtype) && s.floats == SyntheticSpec::Floats::Unit) {
        std::uniform_real_distribution<double> d(0, 1);
        for (int64_t i = 0; i < t.numel(); ++i) t.set(i, d(rng));
      } else if (isFloating(s.type.dtype)) {
        std::normal_distribution<double> d(0, 1);
        std::vector<double> v(static_cast<size_t>(t.numel()));
        for (double& x : v) x = d(rng);
        if (s.floats == SyntheticSpec::Floats::Distribution && !s.type.shape.empty() && s.type.shape.back() > 0) {
          const size_t row = static_cast<size_t>(s.type.shape.back());
          for (size_t r = 0; r < v.size(); r += row) {  // softmax of each last-dim row
            double m = v[r], sum = 0;
            for (size_t k = 1; k < row; ++k) m = std::max(m, v[r + k]);
            for (size_t k = 0; k < row; ++k) sum += (v[r + k] = std::exp(v[r + k] - m));
            for (size_t k = 0; k < row; ++k) v[r + k] /= sum;
          }
        }
        for (int64_t i = 0; i < t.numel(); ++i) t.set(i, v[static_cast<size_t>(i)]);
      } else {
        std::uniform_int_distribution<int64_t> d(0, std::max<int64_t>(s.high, 1) - 1);
        for (int64_t i = 0; i < t.numel(); ++i) t.set(i, static_cast<double>(d(rng)));
      }
      out[s.name] = t;
    }
    return out;
  }
  std::string describe() const override { return "synthetic random batches"; }

 private:
  std::vector<SyntheticSpec> specs_;
  uint64_t seed_;
};

}  // namespace

std::unique_ptr<BatchSource> fixedBatchSource(TensorMap batch, std::string where) {
  return std::make_unique<FixedBatch>(std::move(batch), std::move(where));
}

Result<std::unique_ptr<BatchSource>> safetensorsDirSource(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Error{dir + ": not a directory of .safetensors batches"};
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") files.push_back(e.path().string());
  if (ec) return Error{dir + ": " + ec.message()};
  if (files.empty()) return Error{dir + ": holds no .safetensors batch files"};
  std::sort(files.begin(), files.end());
  return std::unique_ptr<BatchSource>(std::make_unique<SafetensorsDir>(dir, std::move(files)));
}

namespace {

// A token file's checked bytes, shared by every source cut from it while one
// is alive: a recipe's schedule point (a freeze, a new sequence length) sets
// the batches up again while the previous step's source still holds them, and
// reading 20 MB again (fresh pages) would cost more than the cached recompile.
// A file changed since (size or modification time) is read again.
Result<std::shared_ptr<const std::string>> tokenBytes(const std::string& path, const std::string& token_type,
                                                       size_t width) {
  struct Entry {
    std::weak_ptr<const std::string> bytes;
    std::string token_type;
    uintmax_t size = 0;
    fs::file_time_type mtime;
  };
  static std::mutex mu;
  static std::map<std::string, Entry> files;
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  const fs::file_time_type mtime = ec ? fs::file_time_type{} : fs::last_write_time(path, ec);
  std::lock_guard<std::mutex> lock(mu);
  if (!ec)
    if (auto it = files.find(path); it != files.end() && it->second.size == size && it->second.mtime == mtime &&
                                    it->second.token_type == token_type)
      if (auto held = it->second.bytes.lock()) return held;
  auto raw = readFile(path);
  if (!raw) return raw.error().prefixed("the token file: ");
  if (raw->size() % width)
    return Error{path + ": " + std::to_string(raw->size()) + " bytes is not a whole number of " + token_type +
                 " tokens"};
  const size_t n = raw->size() / width;
  if (width > 2)  // u16 ids cannot be negative
    for (size_t i = 0; i < n; ++i)
      if (readToken(raw->data() + i * width, width) < 0)
        return Error{path + ": token " + std::to_string(i) + " is negative"};
  auto bytes = std::make_shared<const std::string>(std::move(*raw));
  if (!ec) files[path] = Entry{bytes, token_type, size, mtime};
  return bytes;
}

}  // namespace

Result<std::unique_ptr<BatchSource>> tokenFileSource(const std::string& path, const std::string& token_type,
                                                     int64_t batch, int64_t seq_len) {
  size_t width = token_type == "u16" ? 2 : token_type == "i32" ? 4 : token_type == "i64" ? 8 : 0;
  if (!width) return Error{"token type '" + token_type + "' is not one of u16, i32, i64"};
  if (batch <= 0 || seq_len <= 0) return Error{"token windows need a positive batch size and sequence length"};
  auto bytes = tokenBytes(path, token_type, width);
  if (!bytes) return bytes.error();
  const size_t n = (*bytes)->size() / width;
  if (n < static_cast<size_t>(seq_len) + 1)
    return Error{path + ": " + std::to_string(n) + " tokens, fewer than one window of " + std::to_string(seq_len + 1)};
  return std::unique_ptr<BatchSource>(std::make_unique<TokenFile>(path, std::move(*bytes), width, batch, seq_len));
}

std::unique_ptr<BatchSource> syntheticSource(std::vector<SyntheticSpec> specs, uint64_t seed) {
  return std::make_unique<Synthetic>(std::move(specs), seed);
}

}  // namespace kiln
