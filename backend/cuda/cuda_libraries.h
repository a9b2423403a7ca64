// The library handles one CUDA executor owns: cuBLAS, cuBLASLt and cuDNN,
// created once on the executor's device and bound to its compute stream by
// the kernels that use them (cublasSetStream / cudnnSetStream per call is
// cheap and keeps the kernels stream-agnostic).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>

namespace kiln::cuda {

struct Libraries {
  cublasHandle_t blas = nullptr;
  cublasLtHandle_t lt = nullptr;
  cudnnHandle_t dnn = nullptr;

  /// Creates the handles; throws KilnException naming the library that failed.
  Libraries();
  ~Libraries();
  Libraries(const Libraries&) = delete;
  Libraries& operator=(const Libraries&) = delete;
};

}  // namespace kiln::cuda
