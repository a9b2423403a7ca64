#include "gui/export_view.h"

#include <QGraphicsView>
#include <QImage>
#include <QPainter>
#include <QSaveFile>
#include <QSvgGenerator>

namespace kiln::studio {
namespace {

/// The scene of a graph view, rendered whole (not just the visible part).
bool renderScene(QGraphicsView& gv, QPaintDevice& device, QRectF target) {
  QGraphicsScene* scene = gv.scene();
  if (!scene) return false;
  QPainter p(&device);
  p.setRenderHint(QPainter::Antialiasing);
  p.fillRect(target, Qt::white);
  scene->render(&p, target, scene->itemsBoundingRect().adjusted(-10, -10, 10, 10));
  return true;
}

}  // namespace

bool exportView(View& view, const QString& path, QString* error) {
  QWidget* w = view.renderTarget();
  auto* gv = qobject_cast<QGraphicsView*>(w);
  const bool svg = path.endsWith(".svg", Qt::CaseInsensitive);
  if (!svg && !path.endsWith(".png", Qt::CaseInsensitive)) {
    if (error) *error = path + ": choose a .png or .svg file name";
    return false;
  }
  QSize size = w->size();
  if (gv && gv->scene() && !gv->scene()->items().isEmpty()) {
    const QSizeF s = gv->scene()->itemsBoundingRect().size();
    // A raster large enough for the labels, capped so memory stays sane.
    const double k = std::min(1.0, 8000.0 / std::max(s.width(), s.height()));
    size = QSize(std::max(200, int(s.width() * k) + 20), std::max(200, int(s.height() * k) + 20));
  }
  if (svg) {
    // Written beside the target and renamed, so a failure leaves nothing half-written.
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly)) {
      if (error) *error = path + ": " + file.errorString();
      return false;
    }
    QSvgGenerator gen;
    gen.setOutputDevice(&file);
    gen.setSize(size);
    gen.setViewBox(QRect(QPoint(0, 0), size));
    gen.setTitle("kiln-studio " + view.name() + " view");
    if (gv)
      renderScene(*gv, gen, QRectF(QPointF(0, 0), size));
    else {
      QPainter p(&gen);
      w->render(&p);
    }
    if (!file.commit()) {
      if (error) *error = path + ": " + file.errorString();
      return false;
    }
    return true;
  }
  QImage image(size, QImage::Format_ARGB32);
  image.fill(Qt::white);
  if (gv)
    renderScene(*gv, image, QRectF(QPointF(0, 0), size));
  else
    w->render(&image);
  QSaveFile file(path);
  if (!file.open(QIODevice::WriteOnly) || !image.save(&file, "PNG") || !file.commit()) {
    if (error) *error = path + ": cannot write the PNG (" + file.errorString() + ")";
    return false;
  }
  return true;
}

}  // namespace kiln::studio
