// Multi-tensor optimizer updates on the GPU (kernels_optim.cu): the entry
// point the CUDA executor uses to fuse a run of adam_update (or sgd_update)
// nodes with identical attributes into as few launches as possible, as
// PyTorch's multi_tensor_apply does.
//
// How it launches: every parameter is cut into chunks of kMultiTensorChunk
// elements, one thread block per chunk. A launch's table of tensors (their
// parameter, gradient, state and output pointers and sizes) and of blocks
// (which tensor, which chunk) travels as the kernel's argument struct, under
// 4000 bytes (the classic 4 KB kernel-parameter limit): no host-to-device
// copy, no allocation, nothing pageable, so the launches capture into a CUDA
// graph like any other. When the tensors do not fit one table the work is
// split into several launches, in order:
//  - at most kMultiTensorBlocks chunks per launch (a tensor larger than that
//    continues in the next launch);
//  - at most kAdamTensorsPerLaunch (adam_update) or kSgdTensorsPerLaunch
//    (sgd_update) tensors per launch;
//  - one launch group per distinct (lr, step, grad_scale) triple of device
//    pointers and dtypes, and per parameter dtype (f32, f64): nodes that
//    read different scalar tensors never share a launch.
// Parameters must be f32 or f64 (as the CPU kernels); the scalars may be any
// floating dtype and are read on the device, never on the host.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_kernel.h"

namespace kiln::cuda {

/// Elements of one tensor that one thread block updates.
inline constexpr int64_t kMultiTensorChunk = 65536;
/// Chunks (thread blocks) per launch.
inline constexpr int kMultiTensorBlocks = 320;
/// Tensors per launch: adam_update reads/writes 7 pointers per parameter
/// (p, g, m, v, p', m', v'), sgd_update 5 (p, g, buf, p', buf').
inline constexpr int kAdamTensorsPerLaunch = 32;
inline constexpr int kSgdTensorsPerLaunch = 40;
/// global_norm's inputs per launch (one pointer each).
inline constexpr int kNormTensorsPerLaunch = 96;

/// Whether `a` and `b` may share one enqueueMultiTensor call: both
/// adam_update or both sgd_update, with the same attributes.
bool multiTensorCompatible(const Node& a, const Node& b);

/// Enqueue the updates of all `nodes` (adam_update or sgd_update, pairwise
/// multiTensorCompatible) on ctx.stream. inputs[i] / outputs[i] are node i's
/// device tensors, as a CudaKernelFn gets them; outputs may alias their
/// inputs (updates_in_place). Throws KilnException for nodes that cannot be
/// fused or parameters that are not f32/f64.
void enqueueMultiTensor(const std::vector<const Node*>& nodes, const std::vector<std::vector<DeviceTensor>>& inputs,
                        const std::vector<std::vector<DeviceTensor>>& outputs, CudaContext& ctx);

}  // namespace kiln::cuda
