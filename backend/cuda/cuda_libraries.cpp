#include "backend/cuda/cuda_libraries.h"

#include "backend/cuda/cuda_check.h"

namespace kiln::cuda {

Libraries::Libraries() {
  checkCublas(cublasCreate(&blas), "cublasCreate", nullptr);
  checkCublas(cublasLtCreate(&lt), "cublasLtCreate", nullptr);
  checkCudnn(cudnnCreate(&dnn), "cudnnCreate", nullptr);
}

Libraries::~Libraries() {
  if (dnn) cudnnDestroy(dnn);
  if (lt) cublasLtDestroy(lt);
  if (blas) cublasDestroy(blas);
}

}  // namespace kiln::cuda
