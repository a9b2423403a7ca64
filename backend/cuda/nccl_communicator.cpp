#include "backend/cuda/nccl_communicator.h"

#include <nccl.h>

#include <cstring>
#include <functional>

#include "backend/comm/watchdog.h"

namespace kiln::cuda {
namespace {

ncclComm_t asComm(void* p) {
  return static_cast<ncclComm_t>(p);
}

ncclDataType_t ncclType(DType t, const std::string& where) {
  switch (t) {
    case DType::F32:
      return ncclFloat32;
    case DType::F64:
      return ncclFloat64;
    case DType::F16:
      return ncclFloat16;
    case DType::BF16:
      return ncclBfloat16;
    case DType::I32:
      return ncclInt32;
    case DType::I64:
      return ncclInt64;
    default:
      fail(where + ": dtype " + std::string(dtypeName(t)) + " is not supported (f32, f64, f16, bf16, i32, i64)");
  }
}

void checkNccl(ncclResult_t r, const std::string& where, void* comm = nullptr) {
  if (r == ncclSuccess) return;
  std::string why = ncclGetErrorString(r);
  if (comm)
    if (const char* last = ncclGetLastError(asComm(comm)); last && *last) why += ": " + std::string(last);
  fail(where + ": " + why);
}

}  // namespace

std::string NcclCommunicator::version() {
  int v = 0;
  ncclGetVersion(&v);
  return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

Result<std::string> NcclCommunicator::uniqueId() {
  return catchErrors([&]() -> std::string {
    ncclUniqueId id;
    checkNccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    return std::string(id.internal, sizeof id.internal);
  });
}

Result<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(int rank, int size, const std::string& unique_id,
                                                                   NcclTimeouts timeouts) {
  return catchErrors([&]() -> std::unique_ptr<NcclCommunicator> {
    if (size < 1 || rank < 0 || rank >= size)
      fail("nccl communicator: rank " + std::to_string(rank) + " of " + std::to_string(size));
    std::unique_ptr<NcclCommunicator> c(new NcclCommunicator(rank, size));
    c->timeouts_ = timeouts;
    if (size == 1 && unique_id.empty()) return c;  // local: nothing to meet
    ncclUniqueId id;
    if (unique_id.size() != sizeof id.internal)
      fail("nccl communicator: the unique id has " + std::to_string(unique_id.size()) + " bytes, expected " +
           std::to_string(sizeof id.internal));
    std::memcpy(id.internal, unique_id.data(), sizeof id.internal);
    // Non-blocking: a rank that never joins must not hang this one.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    const ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
    c->comm_ = comm;  // aborted (not leaked) if joining fails below
    c->settle(r, c->where("joining the NCCL ranks"), timeouts.init,
              "a rank did not join (did every rank start, each with a GPU?)");
    return c;
  });
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) ncclCommDestroy(asComm(comm_));
}

std::string NcclCommunicator::asyncError() const {
  if (!comm_) return "";
  ncclResult_t state = ncclSuccess;
  if (ncclCommGetAsyncError(asComm(comm_), &state) != ncclSuccess) return "ncclCommGetAsyncError failed";
  if (state == ncclSuccess || state == ncclInProgress) return "";
  std::string why = ncclGetErrorString(state);
  if (const char* last = ncclGetLastError(asComm(comm_)); last && *last) why += ": " + std::string(last);
  return why;
}

void NcclCommunicator::abort() {
  if (!comm_) return;
  ncclCommAbort(asComm(comm_));  // ends the kernels that spin on a dead peer
  comm_ = nullptr;
  aborted_ = true;
}

void NcclCommunicator::settle(ncclResult_t r, const std::string& where, std::chrono::milliseconds timeout,
                              const std::string& hint) {
  if (r == ncclInProgress) {
    ncclResult_t state = ncclInProgress;
    watchUntilDone({[&] {
                      if (ncclCommGetAsyncError(asComm(comm_), &state) != ncclSuccess) state = ncclInternalError;
                      return state != ncclInProgress;
                    },
                    [] { return std::string(); }, [&] { abort(); }},
                   timeout, where, hint);
    r = state;
  }
  if (r != ncclSuccess) {
    std::string why = ncclGetErrorString(r);
    if (comm_)
      if (const char* last = ncclGetLastError(asComm(comm_)); last && *last) why += ": " + std::string(last);
    abort();
    fail(where + ": " + why);
  }
}

void NcclCommunicator::call(ncclResult_t r, const std::string& where) {
  settle(r, where, timeouts_.collective, "a rank died or hangs");
}

std::shared_ptr<const HostWaitWatch> NcclCommunicator::hostWaitWatch() {
  if (!comm_) return nullptr;
  auto w = std::make_shared<HostWaitWatch>();
  w->timeout = timeouts_.collective;
  w->failure = [this] { return asyncError(); };
  w->abort = [this] { abort(); };
  w->hint = "a rank died or hangs in a collective (" + where("the step's collectives") + ")";
  return w;
}

std::string NcclCommunicator::where(const char* what) const {
  return std::string("nccl ") + what + " (rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ")";
}

void NcclCommunicator::allreduceSum(void* data, size_t count, DType dtype, cudaStream_t stream) {
  const std::string w = where("allreduce");
  if (aborted_) fail(w + ": the NCCL communicator was aborted after an earlier failure");
  if (!comm_ || count == 0) return;
  call(ncclAllReduce(data, data, count, ncclType(dtype, w), ncclSum, asComm(comm_), stream), w);
}

void NcclCommunicator::perRankSlices(const char* what, const std::vector<size_t>& counts, size_t elem_bytes,
                                     const std::function<ncclResult_t(size_t offset, size_t count, int root)>& call) {
  const std::string w = where(what);
  if (counts.size() != static_cast<size_t>(size_)) fail(w + ": " + std::to_string(counts.size()) + " counts");
  if (aborted_) fail(w + ": the NCCL communicator was aborted after an earlier failure");
  if (!comm_) return;
  checkNccl(ncclGroupStart(), w);
  size_t at = 0;
  for (int r = 0; r < size_; ++r) {
    // In a group, non-blocking calls report ncclInProgress only at its end.
    if (counts[r])
      if (const ncclResult_t e = call(at * elem_bytes, counts[r], r); e != ncclInProgress) checkNccl(e, w, comm_);
    at += counts[r];
  }
  this->call(ncclGroupEnd(), w);
}

void NcclCommunicator::reduceScatterSum(void* data, const std::vector<size_t>& counts, DType dtype,
                                        cudaStream_t stream) {
  // Rank r's slice summed onto rank r: one ncclReduce per owner, grouped.
  const ncclDataType_t t = ncclType(dtype, where("reduce-scatter"));
  auto* p = static_cast<char*>(data);
  perRankSlices("reduce-scatter", counts, dtypeSize(dtype), [&](size_t offset, size_t count, int root) {
    return ncclReduce(p + offset, p + offset, count, t, ncclSum, root, asComm(comm_), stream);
  });
}

void NcclCommunicator::allGather(void* data, const std::vector<size_t>& counts, DType dtype, cudaStream_t stream) {
  // Each rank's slice broadcast from it: uneven slices, grouped.
  auto* p = static_cast<char*>(data);
  const size_t es = dtypeSize(dtype);
  perRankSlices("all-gather", counts, es, [&](size_t offset, size_t count, int root) {
    return ncclBroadcast(p + offset, p + offset, count * es, ncclUint8, root, asComm(comm_), stream);
  });
}

void NcclCommunicator::broadcast(void* data, size_t bytes, int root, cudaStream_t stream) {
  const std::string w = where("broadcast");
  if (aborted_) fail(w + ": the NCCL communicator was aborted after an earlier failure");
  if (!comm_ || bytes == 0) return;
  call(ncclBroadcast(data, data, bytes, ncclUint8, root, asComm(comm_), stream), w);
}

}  // namespace kiln::cuda
