// CPU kernels of the collective ops (dialect gloo): hand the node to the
// step's CollectiveEngine, which runs it on its communication thread; the
// executor waits before the first reader of an output. In a process that is
// not part of a data-parallel run (no engine), a collective over one rank is
// the identity: the outputs are copies of the inputs.
#include <algorithm>
#include <cstring>

#include "backend/comm/collective_engine.h"
#include "backend/kernel.h"

namespace kiln {
namespace {

void collectiveKernel(const Node& n, std::span<const Tensor> ins, std::span<Tensor> outs, KernelContext& ctx) {
  for (size_t i = 0; i < outs.size(); ++i) allocOutput(n, outs, i);
  if (ctx.collectives) {
    ctx.collectives->start(ctx.node_index, n, ins, outs);
    return;
  }
  // One rank: each output is its input (a reduce_scatter's are the inputs
  // this rank owns, in order; allreduce_rows's rows are padded to its
  // capacity).
  if (n.is(Op::allreduce_rows)) {
    Tensor& rows = outs[0];
    std::memset(outs[1].raw(), 0, outs[1].bytes());
    for (int64_t j = 0; j < rows.numel(); ++j) rows.data<int64_t>()[j] = -1;
    std::memcpy(rows.raw(), ins[0].raw(), std::min(ins[0].bytes(), rows.bytes()));
    std::memcpy(outs[1].raw(), ins[1].raw(), std::min(ins[1].bytes(), outs[1].bytes()));
    return;
  }
  for (size_t i = 0, o = 0; i < ins.size() && o < outs.size(); ++i) {
    if (n.is(Op::reduce_scatter) && n.is("owners")[i] != n.i("rank")) continue;
    if (ins[i].bytes()) std::memcpy(outs[o].raw(), ins[i].raw(), ins[i].bytes());
    ++o;
  }
}

}  // namespace

void registerCpuCollectiveKernels(KernelRegistry& r) {
  for (const char* op : {"allreduce", "broadcast", "reduce_scatter", "allgather", "allreduce_rows"}) {
    KernelDef k{op, "gloo", std::string("gloo.") + op, 0, nullptr, collectiveKernel};
    k.runs_beside_others = false;  // one collective at a time, in graph order on every rank
    r.add(k);
  }
}

}  // namespace kiln
