// CUDA, cuBLAS, cuBLASLt and cuDNN status codes as KilnExceptions whose
// one-line message names the call, the error and the node being enqueued.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "core/ir.h"
#include "core/result.h"

namespace kiln::cuda {

/// "cudaErrorInvalidValue: invalid argument".
std::string cudaMessage(cudaError_t e);

/// Throws `<node>: <what> failed (<error>)` unless `e` is cudaSuccess.
/// `node` may be nullptr (executor set-up).
void check(cudaError_t e, const char* what, const Node* node = nullptr);
/// After a kernel launch: a bad configuration shows up in cudaGetLastError
/// (which does not synchronize).
void checkLaunch(const char* kernel, const Node* node);
/// cuBLAS / cuBLASLt status (cublasStatus_t as int, so this header needs no
/// cuBLAS include).
void checkCublas(int status, const char* what, const Node* node);
/// cuDNN status (cudnnStatus_t as int).
void checkCudnn(int status, const char* what, const Node* node);

/// The message for an allocation that did not fit: how much was asked for,
/// what the device has free and in total.
std::string outOfMemoryMessage(size_t asked, const std::string& what);

}  // namespace kiln::cuda
