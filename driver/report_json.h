// The report's JSON form (docs/report-schema.md): written and read by one
// field list per report type, so the writer and every reader agree on
// every key by construction.
#pragma once

#include <nlohmann/json.hpp>

#include "core/result.h"
#include "driver/report_types.h"

namespace kiln::driver {

/// The report as JSON, keys in the documented order.
nlohmann::ordered_json toJson(const Report& report);
/// The `memory` object alone (`kiln memory --json`).
nlohmann::ordered_json toJson(const ReportMemory& memory);

/// A machine's roofs (kiln bench --machine's machine.json entries) and back;
/// errors name the key.
nlohmann::ordered_json toJson(const ReportMachine& machine);
Result<ReportMachine> machineFromJson(const nlohmann::json& json);

/// Read a report. Errors name the key and the version: "not a kiln report
/// (...)", "report version 2: this Kiln reads version 1", "report version
/// 1: memory.peak_bytes: missing", "...: passes[2].millis: expected a
/// number, got a string". Keys no field names are ignored (adding a key is
/// not a version change); keys added after version 1 was first written
/// read as their defaults when absent.
Result<Report> reportFromJson(const nlohmann::json& json);
/// Read the report file at `path`; errors start with the path.
Result<Report> readReport(const std::string& path);

/// A counter kept as a double (FLOP, a pass's statistics) as JSON: an
/// integer when whole.
nlohmann::ordered_json countJson(double v);

}  // namespace kiln::driver
