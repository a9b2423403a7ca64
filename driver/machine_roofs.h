// What this machine can do, for the roofline (kiln bench --machine): the
// rate of Kiln's own f32 matmul kernel, and of its bf16 one where the CPU
// has bf16 instructions, on n x n x n products, and the memory bandwidth
// of a large elementwise add (bytes read plus written per second), each
// the best of several runs of the node alone (the executor's per-node
// timing). The numbers are kept per CPU model and thread count in
// machine.json in the compile cache's directory, where kiln train --report
// finds them and copies them into the report's `machine`.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "driver/report_types.h"

namespace kiln::driver {

/// The CPU's model name (/proc/cpuinfo), "unknown CPU" where it has none.
std::string cpuModelName();

/// Measure with `threads` threads (0: all cores), GEMMs of n = gemm_n;
/// `progress` hears each measurement's name as it starts.
Result<ReportMachine> measureMachine(int threads, int64_t gemm_n,
                                     const std::function<void(const std::string&)>& progress = {});

/// `cache_dir`/machine.json (the default cache directory's when empty).
std::string machineFile(const std::string& cache_dir);
/// Keep `m` in `path` (replacing the entry of the same CPU and threads);
/// written atomically. A file that is not such a list is an error.
Status saveMachine(const std::string& path, const ReportMachine& m);
/// The entry of this CPU with `threads` threads, if `path` holds one; an
/// unreadable or malformed file is an error naming it.
/// `other_threads` (optional) hears the thread counts this CPU was measured with.
Result<std::optional<ReportMachine>> loadMachine(const std::string& path, int64_t threads,
                                                 std::vector<int64_t>* other_threads = nullptr);

/// Copy this machine's roofs for the report's thread count into a CPU
/// report (kiln train --report), when kiln bench --machine measured them;
/// a broken machine file leaves the report without and says so on stderr.
void addMachine(Report& report, const std::string& cache_dir);

}  // namespace kiln::driver
