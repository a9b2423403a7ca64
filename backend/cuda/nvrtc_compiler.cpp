// NVRTC compilation with in-memory and on-disk caches, and loading through
// the CUDA runtime's library API: see nvrtc_compiler.h.
#include "backend/cuda/nvrtc_compiler.h"

#include <cuda_runtime.h>
#include <nvrtc.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>

#include "backend/cache/compile_cache.h"
#include "backend/cuda/cuda_check.h"
#include "core/file_io.h"

// Inline: no link dependency on libxxhash (the CUDA plugin takes Kiln's
// symbols from the executable, which need not hold XXH3_128bits).
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kiln::cuda {
namespace fs = std::filesystem;
namespace {

constexpr const char* kProgramName = "kiln_generated.cu";

struct State {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<const CompiledCudaImage>> images;  ///< by key
  std::map<std::string, std::shared_ptr<const LoadedCudaModule>> modules;  ///< by key + kernel names
  NvrtcCounters counters;
};

State& state() {
  static State* s = new State();  // never destroyed: loaded modules live as long as the process
  return *s;
}

void bump(uint64_t NvrtcCounters::*c) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  ++(s.counters.*c);
}

std::string nvrtcError(nvrtcResult r) {
  return nvrtcGetErrorString(r);
}

/// The arch NVRTC targets for a device of `arch`, and whether as PTX: the
/// device's own when NVRTC knows it, else PTX of the newest it knows.
std::pair<int, bool> target(int arch) {
  const std::vector<int> known = nvrtcSupportedArchs();
  if (known.empty() || std::find(known.begin(), known.end(), arch) != known.end()) return {arch, false};
  if (arch > known.back()) return {known.back(), true};
  fail("NVRTC " + nvrtcVersionString() + " cannot compile for sm_" + std::to_string(arch) + " (it knows sm_" +
       std::to_string(known.front()) + " to sm_" + std::to_string(known.back()) + ")");
}

std::string hex128(XXH128_hash_t h) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return buf;
}

std::string cacheDir() {
  return (fs::path(CompileCache::defaultDir()) / "nvrtc").string();
}

/// The numbered lines [from, to] of `source` (1-based, clamped).
std::string numberedLines(const std::string& source, int from, int to) {
  std::istringstream in(source);
  std::ostringstream out;
  std::string line;
  for (int k = 1; std::getline(in, line) && k <= to; ++k)
    if (k >= from) {
      char num[16];
      std::snprintf(num, sizeof num, "%5d| ", k);
      out << num << line << "\n";
    }
  return out.str();
}

/// The error for a failed compilation: NVRTC's log, the source's first
/// lines and those around the first error the log names.
std::string compileError(const std::string& what, const std::string& target_name, nvrtcResult r, const std::string& log,
                         const std::string& source, const std::string& key) {
  std::ostringstream m;
  m << what << ": NVRTC " << nvrtcVersionString() << " failed to compile the generated source for " << target_name
    << " (" << nvrtcError(r) << ")\nNVRTC log:\n"
    << (log.empty() ? "(empty)\n" : log);
  if (!log.empty() && log.back() != '\n') m << "\n";
  constexpr int kFirst = 12;
  m << "generated source, first lines:\n" << numberedLines(source, 1, kFirst);
  std::smatch at;
  const std::regex where(std::string(kProgramName) + R"(\((\d+)\): error)");
  if (std::regex_search(log, at, where)) {
    const int line = std::stoi(at[1].str());
    if (line + 3 > kFirst)
      m << "around line " << line << ":\n" << numberedLines(source, std::max(kFirst + 1, line - 3), line + 3);
  }
  // The whole source beside the cache, for a closer look (best effort).
  std::error_code ec;
  fs::create_directories(cacheDir(), ec);
  const std::string path = (fs::path(cacheDir()) / ("failed-" + key + ".cu")).string();
  if (!ec && writeFileAtomic(path, source).ok()) m << "whole source: " << path << "\n";
  return m.str();
}

/// One NVRTC compilation (no cache).
std::shared_ptr<CompiledCudaImage> compileNow(const std::string& source, int arch, const std::string& what,
                                              const std::string& key) {
  const auto [arch_used, ptx] = target(arch);
  const std::vector<std::string> options = nvrtcOptions(arch);
  std::vector<const char*> opts;
  for (const std::string& o : options) opts.push_back(o.c_str());
  const std::string target_name = (ptx ? "compute_" : "sm_") + std::to_string(arch_used);
  nvrtcProgram prog = nullptr;
  nvrtcResult r = nvrtcCreateProgram(&prog, source.c_str(), kProgramName, 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS) fail(what + ": nvrtcCreateProgram failed (" + nvrtcError(r) + ")");
  struct Destroy {
    nvrtcProgram* p;
    ~Destroy() { nvrtcDestroyProgram(p); }
  } destroy{&prog};
  r = nvrtcCompileProgram(prog, static_cast<int>(opts.size()), opts.data());
  std::string log;
  size_t log_size = 0;
  if (nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    log.resize(log_size);
    if (nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) log.clear();
    while (!log.empty() && log.back() == '\0') log.pop_back();
  }
  if (r != NVRTC_SUCCESS) {
    bump(&NvrtcCounters::failures);
    fail(compileError(what, target_name, r, log, source, key));
  }
  auto out = std::make_shared<CompiledCudaImage>();
  size_t size = 0;
  if (ptx) {
    r = nvrtcGetPTXSize(prog, &size);
    if (r == NVRTC_SUCCESS) {
      out->image.resize(size);
      r = nvrtcGetPTX(prog, out->image.data());
      while (!out->image.empty() && out->image.back() == '\0') out->image.pop_back();
    }
  } else {
    r = nvrtcGetCUBINSize(prog, &size);
    if (r == NVRTC_SUCCESS) {
      out->image.resize(size);
      r = nvrtcGetCUBIN(prog, out->image.data());
    }
  }
  if (r != NVRTC_SUCCESS || out->image.empty())
    fail(what + ": NVRTC compiled but gave no " + (ptx ? "PTX" : "CUBIN") + " (" + nvrtcError(r) + ")");
  out->arch = arch_used;
  out->ptx = ptx;
  out->key = key;
  out->log = log;
  bump(&NvrtcCounters::compiles);
  return out;
}

/// Whether a cache payload looks like the image it should be.
bool plausible(const std::string& image, bool ptx) {
  if (ptx) return !image.empty() && image.find('\0') == std::string::npos;
  return image.size() > 64 && image.compare(0, 4,
                                            "\x7f"
                                            "ELF") == 0;
}

}  // namespace

std::string nvrtcVersionString() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}

std::vector<int> nvrtcSupportedArchs() {
  int n = 0;
  if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) return {};
  std::vector<int> archs(static_cast<size_t>(n));
  if (nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS) return {};
  std::sort(archs.begin(), archs.end());
  return archs;
}

int currentDeviceArch() {
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice (the arch to compile generated kernels for)");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
  return prop.major * 10 + prop.minor;
}

std::vector<std::string> nvrtcOptions(int arch) {
  const auto [used, ptx] = target(arch);
  return {std::string("--gpu-architecture=") + (ptx ? "compute_" : "sm_") + std::to_string(used), "-std=c++17",
          "--fmad=false", "-default-device"};
}

std::string nvrtcCacheKey(const std::string& source, int arch) {
  std::string material = source;
  material += '\0';
  material += "sm_" + std::to_string(arch);
  material += '\0';
  material += "nvrtc " + nvrtcVersionString();
  for (const std::string& o : nvrtcOptions(arch)) {
    material += '\0';
    material += o;
  }
  return hex128(XXH3_128bits(material.data(), material.size()));
}

std::string nvrtcCachePath(const std::string& source, int arch) {
  const bool ptx = target(arch).second;
  return (fs::path(cacheDir()) / (nvrtcCacheKey(source, arch) + (ptx ? ".ptx" : ".cubin"))).string();
}

Result<std::shared_ptr<const CompiledCudaImage>> compileCudaSource(const std::string& source, int arch,
                                                                   const std::string& what) {
  return catchErrors([&]() -> std::shared_ptr<const CompiledCudaImage> {
    const std::string key = nvrtcCacheKey(source, arch);
    State& s = state();
    {
      std::lock_guard<std::mutex> lock(s.mu);
      auto it = s.images.find(key);
      if (it != s.images.end()) {
        ++s.counters.memory_hits;
        return it->second;
      }
    }
    const bool ptx = target(arch).second;
    const std::string path = nvrtcCachePath(source, arch);
    std::shared_ptr<CompiledCudaImage> img;
    std::error_code ec;
    if (fs::exists(path, ec)) {
      auto bytes = readFile(path);
      Result<std::string> payload = bytes ? decodeCacheEntry(*bytes) : Result<std::string>(bytes.error());
      if (payload && plausible(*payload, ptx)) {
        img = std::make_shared<CompiledCudaImage>();
        img->image = std::move(*payload);
        img->arch = ptx ? target(arch).first : arch;
        img->ptx = ptx;
        img->from_disk = true;
        img->key = key;
        bump(&NvrtcCounters::disk_hits);
      } else {
        bump(&NvrtcCounters::disk_rejected);
        fs::remove(path, ec);  // corrupt or truncated: rebuilt below
      }
    }
    if (!img) {
      img = compileNow(source, arch, what, key);
      fs::create_directories(fs::path(path).parent_path(), ec);
      if (!ec && writeFileAtomic(path, encodeCacheEntry(img->image)).ok()) bump(&NvrtcCounters::disk_writes);
    }
    std::lock_guard<std::mutex> lock(s.mu);
    auto [it, inserted] = s.images.emplace(key, img);
    return it->second;
  });
}

NvrtcCounters nvrtcCounters() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.counters;
}

void clearNvrtcMemoryCache() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.images.clear();
}

Result<std::shared_ptr<const LoadedCudaModule>> loadCudaSource(const std::string& source,
                                                               const std::vector<std::string>& kernel_names,
                                                               const std::string& what) {
  return catchErrors([&]() -> std::shared_ptr<const LoadedCudaModule> {
    const int arch = currentDeviceArch();
    std::string mkey = nvrtcCacheKey(source, arch);
    for (const std::string& k : kernel_names) mkey += "/" + k;
    State& s = state();
    {
      std::lock_guard<std::mutex> lock(s.mu);
      auto it = s.modules.find(mkey);
      if (it != s.modules.end()) return it->second;
    }
    auto img = compileCudaSource(source, arch, what);
    if (!img) fail(img.error().message);
    auto m = std::make_shared<LoadedCudaModule>();
    m->arch = (*img)->arch;
    const std::string where = what + ": loading the generated " + ((*img)->ptx ? "PTX" : "CUBIN");
    check(cudaLibraryLoadData(&m->library, (*img)->image.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0),
          where.c_str());
    bump(&NvrtcCounters::loads);
    for (const std::string& k : kernel_names) {
      cudaKernel_t kernel = nullptr;
      const cudaError_t e = cudaLibraryGetKernel(&kernel, m->library, k.c_str());
      if (e != cudaSuccess) {
        cudaGetLastError();
        cudaLibraryUnload(m->library);
        fail(what + ": kernel " + k + " not found in the generated module (" + cudaMessage(e) + ")");
      }
      m->kernels.push_back(kernel);
    }
    std::lock_guard<std::mutex> lock(s.mu);
    auto [it, inserted] = s.modules.emplace(mkey, m);
    if (!inserted) cudaLibraryUnload(m->library);  // another thread loaded it first
    return it->second;
  });
}

}  // namespace kiln::cuda
