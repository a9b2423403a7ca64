// The BLAS library's own thread pool. OpenBLAS (Debian's pthread build)
// keeps a pool of its own, sized to every core and separate from OpenMP's;
// left alone, each data-parallel rank's GEMMs fan out over all the cores
// and the idle workers spin in sched_yield, starving the other ranks (a
// quarter of a 4-rank step on 2 cores went there). The executor sizes it
// like its OpenMP pool for the length of a create() or run().
#pragma once

namespace kiln {

/// The BLAS library's thread count; 0 when it has no such control (not OpenBLAS).
int blasThreads();
/// Set it (threads > 0); nothing when the library has no such control.
void setBlasThreads(int threads);

/// While one lives, BLAS calls run on their calling thread: for kernels
/// that call BLAS on small tiles from their own OpenMP loop (fused
/// attention), where the pool would fan every call out again. Scopes nest
/// and overlap across threads (nodes run side by side): the first one in
/// saves the thread count and sets 1, the last one out restores it.
class SerialBlasScope {
 public:
  SerialBlasScope();
  ~SerialBlasScope();
  SerialBlasScope(const SerialBlasScope&) = delete;
  SerialBlasScope& operator=(const SerialBlasScope&) = delete;
};

}  // namespace kiln
