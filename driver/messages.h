// How every front end reports: one line "kiln: error: ..." per failure,
// a rank's prefix on its errors, and human-readable counts.
#pragma once

#include <ostream>
#include <string>

#include "core/result.h"

namespace kiln::driver {

/// Print "kiln: error: MESSAGE" (first line only for multi-line messages,
/// unless verbose) and return the exit code 1.
int reportError(const Error& e, bool verbose = false);
/// Put `prefix` before every error reportError prints from now on (a rank
/// of a data-parallel run: "rank 2: ").
void setErrorPrefix(std::string prefix);
/// A stream that drops what is written to it (the quiet ranks of a run).
std::ostream& nullStream();
/// "12.3 MFLOP", "1.2 GB".
std::string humanCount(double v, const char* unit);
/// Three significant digits with a unit: "ms" as "41.2 us", "12.3 ms" or
/// "1.05 s"; any other unit with an SI prefix ("1.10 GB", "523 MFLOP"); ""
/// a count ("42", "1.23 M"). Negative values keep their sign.
std::string formatQuantity(double v, const std::string& unit);

}  // namespace kiln::driver
