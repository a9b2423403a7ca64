// The roofline of a measured report: each kernel at (arithmetic intensity
// = flops / bytes moved, achieved FLOP/s), under the machine's roofs
// (report.machine, kiln bench --machine): the compute roof of the
// precision it computes in (the bf16 GEMM rate for bf16 and f16 kernels
// where measured, else the f32 one) and the memory roof (bandwidth x
// intensity). A kernel that does no arithmetic (a copy, a transpose) has
// only the memory roof: its efficiency is its bandwidth over the
// machine's. What a kernel loses is the time it would save at its roof:
// time x (1 - efficiency); the table of kiln-studio's roofline view sorts
// by it. Qt-free, so tests and tools read the same numbers.
#pragma once

#include <cstddef>
#include <vector>

#include "driver/report_types.h"

namespace kiln::driver {

struct RooflinePoint {
  size_t kernel = 0;       ///< index into report.kernels
  double ms = 0;           ///< measured time per step
  double intensity = 0;    ///< FLOP per byte (0: no arithmetic)
  double flops_per_s = 0;  ///< achieved
  double bytes_per_s = 0;  ///< achieved
  /// The roof at its intensity: FLOP/s (B/s for a kernel without
  /// arithmetic); 0 without machine roofs.
  double roof = 0;
  bool compute_bound = false;  ///< the compute roof is the lower one at its intensity
  double efficiency = 0;       ///< achieved / roof (0 without roofs)
  double lost_ms = 0;          ///< ms * (1 - efficiency), 0 without roofs
};

/// Every kernel with a measured time and a known cost, in kernel order.
std::vector<RooflinePoint> rooflinePoints(const Report& report);

/// The compute roof for a kernel computing in `dtype` (FLOP/s; 0 without roofs).
double computeRoof(const ReportMachine& m, const std::string& dtype);

}  // namespace kiln::driver
