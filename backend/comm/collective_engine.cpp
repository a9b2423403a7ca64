#include "backend/comm/collective_engine.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

#include "backend/comm/sparse_allreduce.h"

namespace kiln {

/// A started collective: its layout (core/collective_layout.h) and, per
/// group, the staging buffer and where each result goes.
struct CollectiveEngine::Job {
  struct Group {
    std::vector<unsigned char>* staging;
    std::vector<std::pair<Tensor, size_t>> outs;  ///< output, byte offset in the staging buffer
  };
  size_t index = 0;
  const CollectiveLayout* layout = nullptr;  ///< the engine's, made at the node's first start
  std::vector<Group> groups;
  /// allreduce_rows (no layout): the staged rows and values, the outputs.
  struct Rows {
    std::vector<unsigned char>*rows, *values;
    size_t capacity, dim, num_rows;
    DType dtype;
    Tensor out_rows, out_values;
  };
  std::optional<Rows> rows;
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
  {  // before its staging buffers are written again
    std::lock_guard<std::mutex> lock(mu_);
    if (started_.count(index)) fail(n.describe() + ": started again before it was waited for");
  }
  auto job = std::make_shared<Job>();
  job->index = index;
  if (n.is(Op::allreduce_rows)) {
    startRows(*job, n, ins, outs);
  } else {
    startDense(*job, n, ins, outs);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    started_[index] = job;
    queue_.push_back(job);
  }
  cv_.notify_all();
}

void CollectiveEngine::startRows(Job& job, const Node& n, std::span<const Tensor> ins, std::span<const Tensor> outs) {
  const size_t index = job.index;
  CollectiveRecord& rec = job.record;
  rec.node = n.describe();
  rec.collective = n.op();
  rec.bucket = n.i("bucket");
  rec.tensors = 1;
  rec.start_ms = sinceStep();
  const Tensor& values = ins[1];
  const size_t dim = static_cast<size_t>(values.shape()[1]);
  rec.dense_bytes = static_cast<uint64_t>(n.i("num_rows")) * dim * dtypeSize(values.dtype());
  auto& buffers = staging_[index];
  buffers.resize(2);
  buffers[0].resize(ins[0].bytes());
  if (ins[0].bytes()) std::memcpy(buffers[0].data(), ins[0].raw(), ins[0].bytes());
  buffers[1].resize(values.bytes());
  // Only the real rows need DDP's division; the padding is zero.
  size_t real = 0;
  const int64_t* r = ins[0].data<int64_t>();
  while (real < static_cast<size_t>(ins[0].numel()) && r[real] >= 0) ++real;
  if (real && n.i("average") && size() > 1) {
    divideInto(buffers[1].data(), values.raw(), real * dim, values.dtype(), size());
  } else if (real) {
    std::memcpy(buffers[1].data(), values.raw(), real * dim * dtypeSize(values.dtype()));
  }
  job.rows = Job::Rows{&buffers[0],
                       &buffers[1],
                       static_cast<size_t>(ins[0].numel()),
                       dim,
                       static_cast<size_t>(n.i("num_rows")),
                       values.dtype(),
                       outs[0],
                       outs[1]};
}

void CollectiveEngine::startDense(Job& job, const Node& n, std::span<const Tensor> ins, std::span<const Tensor> outs) {
  const size_t index = job.index;
  // The layout depends on the node only: made once, kept with the staging.
  auto known = layouts_.find(index);
  if (known == layouts_.end()) known = layouts_.emplace(index, layoutCollective(n, rank(), size())).first;
  job.layout = &known->second;
  const CollectiveLayout& l = known->second;
  CollectiveRecord& rec = job.record;
  rec.node = n.describe();
  rec.collective = n.op();
  rec.bucket = l.kind == CollectiveLayout::Kind::Broadcast ? -1 : n.i("bucket");
  rec.tensors = ins.size();
  rec.start_ms = sinceStep();
  rec.dense_bytes = l.bytes;
  // Each group's staging buffer is kept for the next steps.
  auto& buffers = staging_[index];
  buffers.resize(l.groups.size());
  for (size_t g = 0; g < l.groups.size(); ++g) {
    const CollectiveLayout::Group& lg = l.groups[g];
    std::vector<unsigned char>& buf = buffers[g];
    buf.resize(lg.bytes);
    Job::Group group{&buf, {}};
    for (const CollectiveLayout::Member& m : lg.members) {
      const Tensor& in = ins[m.input];
      // DDP's division by the world size, done while copying (one pass over
      // the gradient instead of two). An allgather reads only what this rank
      // owns: the other inputs are placeholders.
      if (!m.bytes || (l.kind == CollectiveLayout::Kind::AllGather && !m.mine)) {
      } else if (l.average && size() > 1) {
        divideInto(buf.data() + m.offset, in.raw(), static_cast<size_t>(in.numel()), lg.dtype, size());
      } else {
        std::memcpy(buf.data() + m.offset, in.raw(), m.bytes);
      }
      if (m.output >= 0) group.outs.emplace_back(outs[static_cast<size_t>(m.output)], m.offset);
    }
    job.groups.push_back(std::move(group));
  }
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

void CollectiveEngine::runRows(Job& job) {
  CollectiveRecord& rec = job.record;
  rec.begin_ms = sinceStep();
  Job::Rows& r = *job.rows;
  // Rows past the real ones are -1 in the staged copy too; their values
  // were not staged and are not read.
  const SparseAllreduceStats s = sparseRowAllreduce(
      *comm_, RowSparse{reinterpret_cast<const int64_t*>(r.rows->data()), r.values->data(), r.capacity, r.dim},
      RowSparseOut{r.out_rows.data<int64_t>(), static_cast<uint8_t*>(r.out_values.raw()),
                   static_cast<size_t>(r.out_rows.numel())},
      r.num_rows, r.dtype, sparse_max_ratio_);
  rec.algorithm = !s.sparse ? "dense fallback" : s.row_allgather ? "row allgather" : "row owner-sum";
  rec.sent_bytes = s.sent_bytes;
  rec.blocks = s.blocks;
  rec.nonzero_blocks = s.nonzero_blocks;
  rec.end_ms = sinceStep();
}

void CollectiveEngine::run(Job& job) {
  using Kind = CollectiveLayout::Kind;
  if (job.rows) return runRows(job);
  CollectiveRecord& rec = job.record;
  const CollectiveLayout& l = *job.layout;
  rec.begin_ms = sinceStep();
  const int n = size();
  for (size_t gi = 0; gi < l.groups.size(); ++gi) {
    const CollectiveLayout::Group& lg = l.groups[gi];
    Job::Group& g = job.groups[gi];
    const size_t count = lg.bytes / dtypeSize(lg.dtype);
    void* data = g.staging->data();
    if (l.kind == Kind::Allreduce && l.sparse) {
      const SparseAllreduceStats s =
          sparseBlockAllreduce(*comm_, data, count, lg.dtype, static_cast<size_t>(l.block), sparse_max_ratio_);
      rec.algorithm = s.sparse ? "block-sparse" : "dense fallback";
      rec.sent_bytes += s.sent_bytes;
      rec.blocks += s.blocks;
      rec.nonzero_blocks += s.nonzero_blocks;
    } else {
      if (n > 1) switch (l.kind) {
          case Kind::Broadcast:
            comm_->broadcast(data, lg.bytes, static_cast<int>(l.root));
            break;
          case Kind::ReduceScatter:
            comm_->reduceScatterSum(data, lg.counts, lg.dtype);
            break;
          case Kind::AllGather:
            comm_->allGather(data, lg.counts, lg.dtype);
            break;
          case Kind::Allreduce:
            comm_->allreduceSum(data, count, lg.dtype);
            break;
        }
      rec.algorithm = l.kind == Kind::Broadcast   ? "broadcast"
                      : l.kind == Kind::Allreduce ? comm_->allreduceAlgorithm()
                                                  : "ring";
      rec.sent_bytes += l.ringSentBytes(lg, rank(), n);
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
