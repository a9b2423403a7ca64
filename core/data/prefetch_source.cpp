#include "core/data/prefetch_source.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/trace.h"

namespace kiln {
namespace {

class Prefetcher final : public PrefetchSource {
 public:
  Prefetcher(std::unique_ptr<BatchSource> inner, int depth, TraceRecorder* trace)
      : inner_(std::move(inner)), depth_(std::max(depth, 1)), trace_(trace) {
    worker_ = std::thread([this] { loop(); });
  }

  ~Prefetcher() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    worker_.join();
  }

  Result<TensorMap> batch(int64_t step) override {
    const auto t0 = TraceRecorder::Clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    // Ask for this one (first in line) and the next `depth` after it.
    for (int64_t s = step; s <= step + depth_; ++s)
      if (!ready_.count(s) && s != busy_) wanted_.insert(s);
    std::erase_if(wanted_, [&](int64_t s) { return s < step; });
    std::erase_if(ready_, [&](const auto& kv) { return kv.first < step; });
    wake_.notify_all();
    const bool was_ready = ready_.count(step) > 0;
    done_.wait(lock, [&] { return ready_.count(step) > 0; });
    Result<TensorMap> out = std::move(ready_.at(step));
    ready_.erase(step);
    const auto t1 = TraceRecorder::Clock::now();
    if (was_ready) {
      ++stats_.served_ready;
    } else {
      ++stats_.served_waited;
      stats_.waited_ms += std::chrono::duration<double, std::milli>(t1 - t0).count();
      lock.unlock();
      if (trace_) trace_->slice("wait for batch " + std::to_string(step), "wait", t0, t1);
    }
    return out;
  }

  std::string describe() const override { return inner_->describe() + ", read " + std::to_string(depth_) + " ahead"; }
  int64_t epochBatches() const override { return inner_->epochBatches(); }

  PrefetchStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    PrefetchStats out = stats_;
    out.ready_now = static_cast<int64_t>(ready_.size());
    return out;
  }

 private:
  void loop() {
    if (trace_) trace_->nameThread("data prefetch", "prefetch");
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      wake_.wait(lock, [&] { return stop_ || !wanted_.empty(); });
      if (stop_) return;
      const int64_t step = *wanted_.begin();
      wanted_.erase(wanted_.begin());
      busy_ = step;
      lock.unlock();
      Result<TensorMap> b = [&] {
        TraceScope scope(trace_, "batch " + std::to_string(step), "data");
        try {
          return inner_->batch(step);
        } catch (const std::exception& e) {  // sources return errors; this is only a backstop
          return Result<TensorMap>(Error{e.what()});
        }
      }();
      lock.lock();
      busy_ = -1;
      ready_.emplace(step, std::move(b));
      done_.notify_all();
    }
  }

  std::unique_ptr<BatchSource> inner_;
  const int64_t depth_;
  TraceRecorder* trace_;
  mutable std::mutex mu_;
  std::condition_variable wake_, done_;
  std::set<int64_t> wanted_;  // steps to read, lowest first
  std::map<int64_t, Result<TensorMap>> ready_;
  int64_t busy_ = -1;  // the step being read now
  bool stop_ = false;
  PrefetchStats stats_;
  std::thread worker_;
};

}  // namespace

std::unique_ptr<PrefetchSource> prefetchingSource(std::unique_ptr<BatchSource> inner, int depth, TraceRecorder* trace) {
  return std::make_unique<Prefetcher>(std::move(inner), depth, trace);
}

}  // namespace kiln
