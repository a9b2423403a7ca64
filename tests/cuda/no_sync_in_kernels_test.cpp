// A training step on the GPU makes no host synchronization and no
// allocation (backend/cuda/cuda_sync.h). Two checks:
//  - in the source (runs everywhere, GPU or not): no file of backend/cuda
//    but cuda_sync.cpp calls a synchronizing or allocating CUDA API
//    directly, so every such call goes through the counted wrappers;
//  - on a GPU (cuda_executor_test.cpp): the wrappers' count does not move
//    while steps run, and the step is captured into a CUDA graph under
//    cudaStreamCaptureModeGlobal, which fails on any synchronizing call.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

namespace {

TEST(CudaNoSync, OnlyCudaSyncCallsSynchronizingApis) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(KILN_SOURCE_DIR) / "backend" / "cuda";
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  // cudaMemcpy( and cudaMemset( without Async, allocation, explicit waits.
  const std::regex forbidden(
      R"(\b(cudaMalloc|cudaMallocHost|cudaMallocManaged|cudaFree|cudaFreeHost|cudaMemcpy|cudaMemset|cudaMemcpy2D|)"
      R"(cudaDeviceSynchronize|cudaStreamSynchronize|cudaEventSynchronize|cudaMemcpyToSymbol|cudaMemcpyFromSymbol)\s*\()");
  const std::set<std::string> allowed = {
      "cuda_sync.cpp",   // the counted wrappers themselves
      "cuda_device.cu",  // the device probe's smoke test (not a step)
  };
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const std::string ext = e.path().extension().string();
    if (ext != ".cu" && ext != ".cpp" && ext != ".cuh" && ext != ".h") continue;
    ++files;
    if (allowed.count(name)) continue;
    std::ifstream in(e.path());
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
      const std::string code = line.substr(0, line.find("//"));  // comments may name them
      EXPECT_FALSE(std::regex_search(code, forbidden))
          << name << ":" << number << " calls a synchronizing CUDA API directly (use cuda_sync.h): " << line;
    }
  }
  EXPECT_GT(files, 5) << "found too few backend/cuda sources in " << dir;
}

}  // namespace
