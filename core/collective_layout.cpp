#include "core/collective_layout.h"

#include <algorithm>
#include <map>

#include "core/result.h"

namespace kiln {

uint64_t ringAllreduceBytes(uint64_t bytes, int ranks) {
  if (ranks <= 1) return 0;
  // 128-bit: 2 (N-1) x bytes overflows 64 bits for tensors past 2^60 / N.
  const unsigned __int128 b = static_cast<unsigned __int128>(bytes) * 2u * static_cast<unsigned>(ranks - 1);
  return static_cast<uint64_t>(b / static_cast<unsigned>(ranks));
}

uint64_t CollectiveLayout::ringSentBytes(const Group& g, int rank, int size) const {
  if (size <= 1) return 0;
  const size_t n = static_cast<size_t>(size), me = static_cast<size_t>(rank), es = dtypeSize(g.dtype);
  switch (kind) {
    case Kind::Broadcast:
      return rank == root ? g.bytes : 0;
    case Kind::ReduceScatter:
      return g.bytes - g.counts[me] * es;
    case Kind::AllGather:
      return g.bytes - g.counts[(me + 1) % n] * es;
    case Kind::Allreduce:
      break;
  }
  return ringAllreduceBytes(g.bytes, size);
}

CollectiveLayout layoutCollective(const Node& n, int rank, int size) {
  using Kind = CollectiveLayout::Kind;
  CollectiveLayout l;
  l.kind = n.is(Op::broadcast)        ? Kind::Broadcast
           : n.is(Op::reduce_scatter) ? Kind::ReduceScatter
           : n.is(Op::allgather)      ? Kind::AllGather
                                        : Kind::Allreduce;
  std::vector<int64_t> owners(n.numInputs(), rank);
  if (l.kind == Kind::Broadcast) {
    l.root = n.i("root");
    if (l.root >= size) fail(n.describe() + ": root rank " + std::to_string(l.root) + " of " + std::to_string(size));
  } else if (l.kind == Kind::Allreduce) {
    l.sparse = n.i("sparse") != 0;
    l.block = n.i("block");
  } else {
    // A ZeRO-1 graph is one rank's: run on another, it would exchange the
    // wrong slices.
    if (n.i("rank") != rank)
      fail(n.describe() + ": compiled for rank " + std::to_string(n.i("rank")) + ", run on rank " +
           std::to_string(rank));
    owners = n.is("owners");
    for (int64_t o : owners)
      if (o >= size) fail(n.describe() + ": owner rank " + std::to_string(o) + " of " + std::to_string(size));
  }
  l.average = (l.kind == Kind::Allreduce || l.kind == Kind::ReduceScatter) && n.i("average") != 0;

  // reduce_scatter: output j is the j-th input this rank owns.
  std::vector<int64_t> output(n.numInputs());
  for (size_t k = 0, j = 0; k < n.numInputs(); ++k)
    output[k] = l.kind != Kind::ReduceScatter ? static_cast<int64_t>(k)
                : owners[k] == rank           ? static_cast<int64_t>(j++)
                                              : -1;
  std::map<DType, std::vector<size_t>> by_dtype;
  for (size_t k = 0; k < n.numInputs(); ++k) by_dtype[n.input(k)->dtype()].push_back(k);
  for (auto& [dt, members] : by_dtype) {
    std::stable_sort(members.begin(), members.end(), [&](size_t a, size_t b) { return owners[a] < owners[b]; });
    CollectiveLayout::Group g;
    g.dtype = dt;
    g.counts.assign(static_cast<size_t>(std::max(size, 1)), 0);
    for (size_t k : members) {
      const TensorType& t = n.input(k)->type();
      g.members.push_back({k, g.bytes, t.bytes(), owners[k] == rank, output[k]});
      g.counts[static_cast<size_t>(owners[k])] += static_cast<size_t>(t.numel());
      g.bytes += t.bytes();
    }
    l.bytes += g.bytes;
    l.groups.push_back(std::move(g));
  }
  return l;
}

}  // namespace kiln
