#include "backend/comm/collective_engine.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "backend/comm/sparse_allreduce.h"

namespace kiln {

/// A started collective. Tensors of one dtype share one staging buffer.
struct CollectiveEngine::Job {
  enum class Kind { Allreduce, Broadcast, ReduceScatter, AllGather };
  struct Group {
    DType dtype;
    std::vector<unsigned char>* staging;
    std::vector<std::pair<Tensor, size_t>> outs;  ///< output, byte offset in the staging buffer
    /// reduce_scatter / allgather: elements per rank, the ranks' slices laid
    /// out in rank order.
    std::vector<size_t> counts;
  };
  size_t index = 0;
  Kind kind = Kind::Allreduce;
  bool average = false, sparse = false;
  int64_t root = 0, block = 0;
  std::vector<Group> groups;
  CollectiveRecord record;
  bool done = false;
  std::exception_ptr error;
};

namespace {

/// dst = src / n: the division DDP applies to each gradient before the sum.
void divideInto(void* dst, const void* src, size_t count, DType dt, int n) {
  switch (dt) {
    case DType::F32: {
      auto* d = static_cast<float*>(dst);
      const auto* s = static_cast<const float*>(src);
      for (size_t i = 0; i < count; ++i) d[i] = s[i] / static_cast<float>(n);
      return;
    }
    case DType::F64: {
      auto* d = static_cast<double*>(dst);
      const auto* s = static_cast<const double*>(src);
      for (size_t i = 0; i < count; ++i) d[i] = s[i] / n;
      return;
    }
    case DType::BF16: {
      auto* d = static_cast<uint16_t*>(dst);
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) d[i] = floatToBf16(bf16ToFloat(s[i]) / static_cast<float>(n));
      return;
    }
    case DType::F16: {
      auto* d = static_cast<uint16_t*>(dst);
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) d[i] = floatToHalf(halfToFloat(s[i]) / static_cast<float>(n));
      return;
    }
    default:
      fail("allreduce: cannot average " + std::string(dtypeName(dt)) + " tensors");
  }
}

}  // namespace

CollectiveEngine::CollectiveEngine(std::shared_ptr<Communicator> comm, double sparse_max_ratio)
    : comm_(std::move(comm)), sparse_max_ratio_(sparse_max_ratio), step_origin_(std::chrono::steady_clock::now()) {
  thread_ = std::thread([this] { loop(); });
}

CollectiveEngine::~CollectiveEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

double CollectiveEngine::sinceStep() const {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - step_origin_).count();
}

void CollectiveEngine::beginStep() {
  step_origin_ = std::chrono::steady_clock::now();
}

void CollectiveEngine::start(size_t index, const Node& n, std::span<const Tensor> ins, std::span<const Tensor> outs) {
  using Kind = Job::Kind;
  auto job = std::make_shared<Job>();
  job->index = index;
  job->kind = n.op() == "broadcast"        ? Kind::Broadcast
              : n.op() == "reduce_scatter" ? Kind::ReduceScatter
              : n.op() == "allgather"      ? Kind::AllGather
                                           : Kind::Allreduce;
  std::vector<int64_t> owners(ins.size(), 0);  // reduce_scatter / allgather: each tensor's rank
  if (job->kind == Kind::Broadcast) {
    job->root = n.i("root");
    if (job->root >= size())
      fail(n.describe() + ": root rank " + std::to_string(job->root) + " of " + std::to_string(size()));
  } else if (job->kind == Kind::Allreduce) {
    job->sparse = n.i("sparse") != 0;
    job->block = n.i("block");
  } else {
    // A ZeRO-1 graph is one rank's: running it on another would exchange
    // the wrong slices.
    if (n.i("rank") != rank())
      fail(n.describe() + ": compiled for rank " + std::to_string(n.i("rank")) + ", run on rank " +
           std::to_string(rank()));
    owners = n.is("owners");
    for (int64_t o : owners)
      if (o >= size()) fail(n.describe() + ": owner rank " + std::to_string(o) + " of " + std::to_string(size()));
  }
  job->average = job->kind != Kind::Broadcast && job->kind != Kind::AllGather && n.i("average") != 0;
  CollectiveRecord& rec = job->record;
  rec.node = n.describe();
  rec.collective = n.op();
  rec.bucket = job->kind == Kind::Broadcast ? -1 : n.i("bucket");
  rec.tensors = ins.size();
  rec.start_ms = sinceStep();
  // Group the tensors by dtype (a bucket of gradients is one group); lay
  // each group out in one staging buffer, kept for the next steps. For a
  // reduce_scatter or allgather the members go in owner order, so that each
  // rank's tensors are one slice.
  std::map<DType, std::vector<size_t>> by_dtype;
  for (size_t k = 0; k < ins.size(); ++k) by_dtype[ins[k].dtype()].push_back(k);
  for (auto& [dt, members] : by_dtype)
    std::stable_sort(members.begin(), members.end(), [&](size_t a, size_t b) { return owners[a] < owners[b]; });
  // reduce_scatter: output j is the j-th input this rank owns.
  std::vector<size_t> out_of(ins.size(), 0);
  for (size_t k = 0, j = 0; k < ins.size(); ++k) out_of[k] = owners[k] == rank() ? j++ : k;
  auto& buffers = staging_[index];
  buffers.resize(by_dtype.size());
  size_t g = 0;
  for (const auto& [dt, members] : by_dtype) {
    size_t bytes = 0;
    for (size_t k : members) bytes += ins[k].bytes();
    std::vector<unsigned char>& buf = buffers[g++];
    buf.resize(bytes);
    Job::Group group{dt, &buf, {}, std::vector<size_t>(static_cast<size_t>(size()), 0)};
    size_t at = 0;
    for (size_t k : members) {
      const bool mine = owners[k] == rank();
      group.counts[static_cast<size_t>(owners[k])] += static_cast<size_t>(ins[k].numel());
      // DDP's division by the world size, done while copying (one pass over
      // the gradient instead of two). An allgather reads only what this rank
      // owns: the other inputs are placeholders.
      if (!ins[k].bytes() || (job->kind == Kind::AllGather && !mine)) {
      } else if (job->average && size() > 1) {
        divideInto(buf.data() + at, ins[k].raw(), static_cast<size_t>(ins[k].numel()), dt, size());
      } else {
        std::memcpy(buf.data() + at, ins[k].raw(), ins[k].bytes());
      }
      if (job->kind != Kind::ReduceScatter)
        group.outs.emplace_back(outs[k], at);
      else if (mine)
        group.outs.emplace_back(outs[out_of[k]], at);
      at += ins[k].bytes();
    }
    rec.dense_bytes += bytes;
    job->groups.push_back(std::move(group));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (started_.count(index)) fail(n.describe() + ": started again before it was waited for");
    started_[index] = job;
    queue_.push_back(job);
  }
  cv_.notify_all();
}

void CollectiveEngine::loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_
      job = queue_.front();
      queue_.pop_front();
    }
    try {
      run(*job);
    } catch (...) {
      job->error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      job->done = true;
    }
    cv_.notify_all();
  }
}

void CollectiveEngine::run(Job& job) {
  CollectiveRecord& rec = job.record;
  rec.begin_ms = sinceStep();
  const int n = size();
  for (Job::Group& g : job.groups) {
    const size_t bytes = g.staging->size();
    const size_t count = bytes / dtypeSize(g.dtype);
    void* data = g.staging->data();
    const size_t es = dtypeSize(g.dtype);
    const size_t me = static_cast<size_t>(rank());
    if (job.kind == Job::Kind::Broadcast) {
      comm_->broadcast(data, bytes, static_cast<int>(job.root));
      rec.algorithm = "broadcast";
      // A ring/tree broadcast sends each byte about once per rank.
      rec.sent_bytes += rank() == job.root || n <= 1 ? bytes : 0;
    } else if (job.kind == Job::Kind::ReduceScatter) {
      if (n > 1) comm_->reduceScatterSum(data, g.counts, g.dtype);
      rec.algorithm = "ring";
      // The ring passes on every slice but this rank's own.
      rec.sent_bytes += n > 1 ? bytes - g.counts[me] * es : 0;
    } else if (job.kind == Job::Kind::AllGather) {
      if (n > 1) comm_->allGather(data, g.counts, g.dtype);
      rec.algorithm = "ring";
      // The ring passes on every slice but the next rank's (it has it).
      rec.sent_bytes += n > 1 ? bytes - g.counts[(me + 1) % static_cast<size_t>(n)] * es : 0;
    } else {
      if (job.sparse) {
        const SparseAllreduceStats s =
            sparseBlockAllreduce(*comm_, data, count, g.dtype, static_cast<size_t>(job.block), sparse_max_ratio_);
        rec.algorithm = s.sparse ? "block-sparse" : "dense fallback";
        rec.sent_bytes += s.sent_bytes;
        rec.blocks += s.blocks;
        rec.nonzero_blocks += s.nonzero_blocks;
      } else {
        if (n > 1) comm_->allreduceSum(data, count, g.dtype);
        rec.algorithm = comm_->allreduceAlgorithm();
        rec.sent_bytes += ringAllreduceBytes(bytes, n);
      }
    }
    for (auto& [out, at] : g.outs) {
      Tensor t = out;  // shares the buffer the executor bound
      if (t.bytes()) std::memcpy(t.raw(), g.staging->data() + at, t.bytes());
    }
  }
  rec.end_ms = sinceStep();
}

void CollectiveEngine::wait(size_t index) {
  std::shared_ptr<Job> job;
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = started_.find(index);
    if (it == started_.end()) return;
    job = it->second;
    const auto t0 = std::chrono::steady_clock::now();
    cv_.wait(lock, [&] { return job->done; });
    job->record.waited_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    started_.erase(it);
    records_.push_back(job->record);
  }
  if (job->error) std::rethrow_exception(job->error);
}

void CollectiveEngine::waitAll() {
  std::vector<size_t> indices;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [i, job] : started_) indices.push_back(i);
  }
  std::sort(indices.begin(), indices.end());
  std::exception_ptr first;
  for (size_t i : indices) {
    try {
      wait(i);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void CollectiveEngine::drain() noexcept {
  try {
    waitAll();
  } catch (...) {
  }
}

std::vector<CollectiveRecord> CollectiveEngine::takeRecords() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<CollectiveRecord> out = std::move(records_);
  records_.clear();
  std::sort(out.begin(), out.end(),
            [](const CollectiveRecord& a, const CollectiveRecord& b) { return a.start_ms < b.start_ms; });
  return out;
}

}  // namespace kiln
