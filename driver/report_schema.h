// What a report (docs/report-schema.md) must hold for its readers: every
// key kiln-studio reads, with its JSON type, required or optional, down
// into the entries of its arrays. The writer's reports are checked against
// it in the tests, and kiln-studio checks every report it opens, so a key
// renamed on one side is an error naming the key and the schema version
// instead of a view that silently shows 0.
#pragma once

#include <nlohmann/json.hpp>

#include "core/result.h"

namespace kiln::driver {

/// Check `report` against the schema of its version: an error
/// "report version V: KEY.PATH: missing" or "...: expected a number, got
/// a string". Keys the schema does not name are allowed (adding a key is
/// not a version change).
Status checkReport(const nlohmann::json& report);

}  // namespace kiln::driver
