// Measuring a model in kiln-studio: the views that need a step to have run
// (kernel times, communication) are filled by training the model a few
// steps on a few ranks with the kiln executable (`kiln train --nproc R
// --steps S --report R.json --report-pass-ir` and the model's compile
// options; data parallelism needs processes of their own), with a progress
// dialog whose Cancel stops it.
#pragma once

#include <QString>
#include <QWidget>
#include <memory>

#include "core/result.h"
#include "driver/compile_options.h"
#include "gui/studio_document.h"

namespace kiln::studio {

struct TrainingRun {
  int ranks = 2;
  int steps = 5;
};

/// The kiln executable: beside kiln-studio, one directory up (the build
/// tree), or on PATH; empty when none.
QString kilnExecutable();

/// Train `model` as `run` says, with `options` (the rest of kiln train's
/// options), and open the report it writes. One rank trains in this
/// process (driver::runTraining on a worker thread); more start `kiln
/// train --nproc`, since data-parallel ranks are processes. Errors are
/// kiln's one line, or "... was cancelled".
Result<std::shared_ptr<StudioDocument>> measureTraining(QWidget* parent, const QString& model, TrainingRun run,
                                                        driver::CompileOptions options);

}  // namespace kiln::studio
