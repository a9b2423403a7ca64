#include "driver/roofline.h"

#include <algorithm>

namespace kiln::driver {

double computeRoof(const ReportMachine& m, const std::string& dtype) {
  if ((dtype == "bf16" || dtype == "f16") && m.bf16_gemm_flops) return *m.bf16_gemm_flops;
  return m.fp32_gemm_flops;
}

std::vector<RooflinePoint> rooflinePoints(const Report& report) {
  std::vector<RooflinePoint> out;
  for (size_t i = 0; i < report.kernels.size(); ++i) {
    const ReportKernel& k = report.kernels[i];
    if (!k.measured_ms || *k.measured_ms <= 0 || k.bytes <= 0) continue;
    RooflinePoint p;
    p.kernel = i;
    p.ms = *k.measured_ms;
    const double seconds = p.ms / 1000.0;
    p.intensity = k.flops / k.bytes;
    p.flops_per_s = k.flops / seconds;
    p.bytes_per_s = k.bytes / seconds;
    if (report.machine && report.machine->bandwidth_bytes > 0) {
      const ReportMachine& m = *report.machine;
      if (k.flops > 0) {
        const double compute = computeRoof(m, k.dtype), memory = m.bandwidth_bytes * p.intensity;
        p.compute_bound = compute <= memory;
        p.roof = std::min(compute, memory);
        p.efficiency = p.flops_per_s / p.roof;
      } else {
        p.roof = m.bandwidth_bytes;
        p.efficiency = p.bytes_per_s / p.roof;
      }
      // Above the roof (a cost model that over-counts, caches beating the
      // streaming bandwidth) loses nothing.
      p.lost_ms = p.ms * std::max(0.0, 1.0 - p.efficiency);
    }
    out.push_back(p);
  }
  return out;
}

}  // namespace kiln::driver
