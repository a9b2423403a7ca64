// Rendering a view to a file: PNG (a raster of the widget; a graph view's
// whole scene at a size that keeps its labels readable) or SVG (vector,
// through QSvgGenerator, so large graphs stay sharp).
#pragma once

#include <QString>

#include "gui/views/view.h"

namespace kiln::studio {

/// Write `view` to `path`; the format comes from the extension (.png, .svg).
bool exportView(View& view, const QString& path, QString* error);

/// Write `table` to `path` as CSV (RFC 4180): the column titles, then the
/// rows in the order shown. A number shown with a unit ("41.2 us") is
/// written as its full-precision value in the column's unit, named in the
/// title ("time (ms)"). Written atomically.
bool exportTableCsv(const QTableWidget& table, const QString& path, QString* error);

}  // namespace kiln::studio
