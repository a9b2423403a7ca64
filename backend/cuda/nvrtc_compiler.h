// Runtime compilation of generated CUDA C++ (fused_codegen.h) with NVRTC,
// and loading of the result with the CUDA runtime's library API.
//
// Compilation: NVRTC with `-std=c++17 --fmad=false -default-device` (no
// FMA contraction: the CPU builds with -ffp-contract=off, and the generated
// formulas must round as it does) for sm_XY of the current device
// (cudaGetDeviceProperties), or of an explicit arch where there is no
// device (the tests here). The result is a CUBIN; for a device newer than
// this NVRTC knows, PTX for the newest arch it does know, which the driver
// compiles at load time. A failure is an Error carrying NVRTC's log and the
// source's first lines and those around the first error (the whole source
// is written beside the cache as failed-<key>.cu when it can be).
//
// Caches, both keyed by the xxh3-128 of (source, target arch, NVRTC
// version, options):
//   - in memory, for the process: each source compiles once;
//   - on disk, under <CompileCache::defaultDir()>/nvrtc/<key>.cubin (.ptx for
//     PTX; $KILN_CACHE_DIR respected): the CUBIN behind the kiln-cache
//     header line (backend/cache/compile_cache.h: payload size and xxh3-64
//     checksum), written to a temporary file and renamed into place. A
//     corrupt or truncated file is removed, ignored and rebuilt. An
//     unwritable cache directory only costs the next process a compile.
//
// Loading: cudaLibraryLoadData + cudaLibraryGetKernel (CUDA runtime 12+),
// launched with cudaLaunchKernel: no driver API, so libcuda never becomes a
// link dependency. Loaded modules are kept for the life of the process.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"

namespace kiln::cuda {

/// A compiled translation unit.
struct CompiledCudaImage {
  std::string image;       ///< CUBIN (ELF) bytes, or PTX text when `ptx`
  int arch = 0;            ///< the arch it targets: 90 for sm_90
  bool ptx = false;        ///< PTX (the device's arch is newer than this NVRTC's)
  bool from_disk = false;  ///< read from the on-disk cache, not compiled by this call
  std::string key;         ///< the cache key (32 hex digits)
  std::string log;         ///< NVRTC's log (warnings), when it compiled
};

/// Process-wide counts, for tests and reports.
struct NvrtcCounters {
  uint64_t compiles = 0;       ///< successful nvrtcCompileProgram calls
  uint64_t failures = 0;       ///< failed compilations
  uint64_t memory_hits = 0;    ///< answered from the in-memory cache
  uint64_t disk_hits = 0;      ///< read from the on-disk cache
  uint64_t disk_writes = 0;    ///< files written to the on-disk cache
  uint64_t disk_rejected = 0;  ///< corrupt or truncated cache files ignored and rebuilt
  uint64_t loads = 0;          ///< modules loaded with cudaLibraryLoadData
};

/// "13.0": the NVRTC library's version.
std::string nvrtcVersionString();
/// The archs (XY of sm_XY) this NVRTC compiles for.
std::vector<int> nvrtcSupportedArchs();
/// XY of the current device's sm_XY (cudaGetDeviceProperties); throws
/// KilnException when there is no device.
int currentDeviceArch();
/// The NVRTC options for a target: the arch option first.
std::vector<std::string> nvrtcOptions(int arch);
/// The cache key of `source` for `arch`, and the on-disk cache file.
std::string nvrtcCacheKey(const std::string& source, int arch);
std::string nvrtcCachePath(const std::string& source, int arch);

/// Compile `source` for sm_<arch> through both caches. `what` names it in
/// errors (e.g. the node).
Result<std::shared_ptr<const CompiledCudaImage>> compileCudaSource(const std::string& source, int arch,
                                                                   const std::string& what = "generated CUDA source");

NvrtcCounters nvrtcCounters();
/// Forget the in-memory compilations (tests of the disk cache); loaded
/// modules stay loaded.
void clearNvrtcMemoryCache();

/// A loaded module and the kernels asked for, in order.
struct LoadedCudaModule {
  cudaLibrary_t library = nullptr;
  std::vector<cudaKernel_t> kernels;
  int arch = 0;
};

/// Compile `source` for the current device (cached) and load it (once per
/// source and kernel list); kernels looked up by their extern "C" names.
Result<std::shared_ptr<const LoadedCudaModule>> loadCudaSource(const std::string& source,
                                                               const std::vector<std::string>& kernel_names,
                                                               const std::string& what = "generated CUDA source");

}  // namespace kiln::cuda
