// CUDA C++ source for fused_elementwise and fused_reduction nodes
// (passes/fuse.cpp, core/ops/fused.cpp), compiled at plan-binding time with
// NVRTC (nvrtc_compiler.h) by the kernels of kernels_fused.cpp.
//
// One translation unit per node shape class, with no #include (NVRTC has no
// include path here): device_math.cuh's text, embedded at build time, which
// holds the math of every op the fuse pass can put in a body (fusibleOps(),
// every unary_backward fn) and is what the one-op kernels run too (the CPU's
// functors, unary_ops.h, cpu_math.h, kernels_elementwise_grad.cpp, bit for
// bit except where CUDA's libm differs from glibc's); then the body as one
// statement per body node in the compute type C (f64 when the body holds
// f64 values, else f32; bf16 values, amp's activations and their casts,
// are computed in float and rounded to bf16 where the one-op kernel would
// store them, as the CPU's fused kernel does), bool intermediates held as
// 0/1 in C as the CPU holds them; then the kernels, which are
// `extern "C" __global__`:
//
//   kiln_fused_elementwise: a grid-stride loop over the flat output index;
//     each operand read in place, as a splat, or through its broadcast run
//     (element (i / inner) % period), bool operands as 0/1; every body
//     output stored (bool ones as one byte 0/1). Each index reads all its
//     operand elements before it stores, so output 0 may alias an in-place
//     operand (writes_over_input).
//   kiln_fused_reduce (+ kiln_fused_finalize when the plan splits):
//     fused_reduction. Output 0 is the sum or mean of body output 0 over
//     `dims`; the other body outputs are stored at the loop indices as the
//     reduction visits them (each exactly once). The reduction follows the
//     one-op CUDA sum's plan (kernels_reduction.cu makePlan), ported here:
//     the dims merge into alternating kept / reduced runs;
//       - row mode (innermost run reduced): W threads (W a power of two,
//         W = 256 for long rows) per (output, split) each accumulate the
//         elements t = tx, tx + W, ... of their chunk in order, then combine
//         by a shuffle tree (and, for W > 32, the warps' partials in warp
//         order by thread 0);
//       - column mode (innermost run kept): a (W, H) block whose x threads
//         take adjacent outputs and whose y threads take rows r = ty,
//         ty + H, ... of the chunk, combined by a shared-memory halving
//         tree over y;
//       - splits (few outputs, long reductions): one partial per
//         (output, split) in the workspace, combined by a second kernel,
//         one warp per output: lane k adds splits k, k + 32, ... in order,
//         then a shuffle tree.
//     Accumulation in C (fp32 for f32, fp64 for f64), never atomics: the
//     order depends only on the shape, so results are deterministic, and
//     fed the same values the sum has the one-op CUDA sum's bits; against
//     the CPU (which sums in double, reduce_loops.h) f32 sums differ by
//     rounding. mean divides the sum by the element count in C, as the
//     one-op CUDA mean does.
//
// Index arithmetic is 32-bit unsigned when every index fits in
// [0, 2^31 - 1] and 64-bit otherwise (FusedLayout::wide_index, chosen from
// the node's shapes, which the source then specializes on).
//
// Kernel parameters: one struct `Params` passed by value, made only of
// 8-byte fields in the order packFusedParams() writes them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/reduce_plan.h"
#include "core/ir.h"

namespace kiln::cuda {

/// How a body reads one operand (backend/cpu/kernels_fused.cpp's Operand).
struct OperandKind {
  enum class Access {
    InPlace,    ///< the loop shape: element i
    Splat,      ///< one element: element 0
    Broadcast,  ///< a run of dims (broadcastRunInner): element (i / inner) % period
  };
  Access access = Access::InPlace;
  DType dtype = DType::F32;  ///< storage dtype: f32, f64, bf16 or bool (read as 0/1 in the compute type)
  int64_t inner = 1;         ///< Broadcast: the run's inner extent (a kernel argument, not in the source)
  int64_t period = 1;        ///< Broadcast: the operand's element count (a kernel argument)
};

/// The one-op CUDA reduction plan (reduce_plan.h), which the generated
/// fused reduction follows.
using FusedReducePlan = Plan;

/// Everything the source and the launches of one fused node depend on,
/// derived from the node alone (its body text fixes every shape).
struct FusedLayout {
  bool reduction = false;
  DType compute = DType::F32;         ///< the body's compute type: f32 (also for bf16 values) or f64
  Shape loop;                         ///< the loop shape (body output 0's)
  int64_t numel = 0;                  ///< elements of the loop
  std::vector<OperandKind> operands;  ///< one per node input
  std::vector<DType> outputs;         ///< the body's output dtypes (f32, f64, bf16 or bool)
  bool wide_index = false;            ///< 64-bit index arithmetic
  bool mean = false;                  ///< reduction: mean, else sum
  FusedReducePlan plan;               ///< reduction only
};

/// Analyzes a fused_elementwise or fused_reduction node; throws
/// KilnException naming the node when the CUDA codegen cannot run it (an
/// op or fn it does not implement, an operand dtype other than f32, f64,
/// bf16 or bool, a bf16 reduction, too many operands for one kernel
/// parameter block).
FusedLayout analyzeFused(const Node& n);

/// How a fused node's operands are read: what analyzeFused() computes.
std::vector<OperandKind> fusedOperandKinds(const Node& n, const Shape& loop);

/// The compute dtype of a fused node, as the CPU kernel picks it: f64 when
/// an operand or a body output is f64, else f32 (bf16 values compute in
/// float).
DType fusedComputeType(const Node& n);

/// Whether the codegen implements body node `b` (an op of fusibleOps(),
/// unary_backward with a known fn, or a scalar `full`).
bool fusedCodegenSupports(const Node& b);

/// The translation unit for `n` laid out as `layout` (analyzeFused(n), whose
/// wide_index a caller may force on to test the 64-bit form).
std::string fusedKernelSource(const Node& n, const FusedLayout& layout);

/// Convenience: analyzes `n`, replaces the compute type and the operand
/// kinds with the given ones, and generates.
std::string fusedKernelSource(const Node& n, DType compute, const std::vector<OperandKind>& operands);

/// Kernel names of the source, in launch order: {"kiln_fused_elementwise"},
/// or {"kiln_fused_reduce", "kiln_fused_finalize"} (the second launched
/// only when plan.splits > 1).
std::vector<std::string> fusedKernelNames(const FusedLayout& layout);

/// The `Params` block of the kernels as 8-byte words: operand pointers,
/// output pointers (for a reduction, output 0 is the reduced tensor), the
/// loop size, each broadcast operand's inner and period, and for a
/// reduction the plan and the partials buffer (`partial`, workspace).
std::vector<uint64_t> packFusedParams(const FusedLayout& layout, std::span<const void* const> inputs,
                                      std::span<void* const> outputs, void* partial);

/// Bytes of workspace the reduction's partial accumulators need (0 without splits).
size_t fusedWorkspaceBytes(const FusedLayout& layout);

/// The most 8-byte words the parameter block may hold (4 KiB, the classic
/// kernel parameter limit).
constexpr size_t kMaxFusedParamWords = 512;

}  // namespace kiln::cuda
