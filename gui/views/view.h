// The interface every kiln-studio view implements: show a document, and
// render itself for export (PNG, SVG) and --screenshot.
#pragma once

#include <QString>
#include <QWidget>
#include <memory>

#include "gui/studio_document.h"

namespace kiln::studio {

class View : public QWidget {
 public:
  using QWidget::QWidget;
  /// "graph", "passes", "memory", "kernels", "comm".
  virtual QString name() const = 0;
  /// Show `doc` (nullptr: nothing).
  virtual void setDocument(std::shared_ptr<const StudioDocument> doc) = 0;
  /// The widget export and screenshots render (the whole content where it
  /// scrolls, e.g. a graph scene); by default the view itself.
  virtual QWidget* renderTarget() { return this; }
};

}  // namespace kiln::studio
