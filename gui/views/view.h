// The interface every kiln-studio view implements: show a document, and
// render itself for export (PNG, SVG) and --screenshot, and name its table
// for CSV export.
#pragma once

#include <QString>
#include <QTableWidget>
#include <QWidget>
#include <memory>

#include "gui/studio_document.h"

namespace kiln::studio {

/// A drawn chart's widget: white, hover tracked (tooltips), focus by click
/// or Tab (keyboard navigation).
inline void setUpChart(QWidget* chart) {
  chart->setMouseTracking(true);
  chart->setFocusPolicy(Qt::StrongFocus);
  chart->setAutoFillBackground(true);
  QPalette p = chart->palette();
  p.setColor(QPalette::Window, Qt::white);
  chart->setPalette(p);
}

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
  /// The table File > Export table as CSV writes (the one in sight where
  /// there are several); nullptr: the view has none.
  virtual QTableWidget* csvTable() { return nullptr; }
};

}  // namespace kiln::studio
