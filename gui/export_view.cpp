#include "gui/export_view.h"

#include <QGraphicsView>
#include <QImage>
#include <QPainter>
#include <QSaveFile>
#include <QRegularExpression>
#include <QSvgGenerator>

#include "gui/views/table_view.h"

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

namespace {

QString csvField(const QString& v) {
  if (!v.contains(QRegularExpression("[\",\r\n]"))) return v;
  QString q = v;
  q.replace("\"", "\"\"");
  return "\"" + q + "\"";
}

}  // namespace

bool exportTableCsv(const QTableWidget& table, const QString& path, QString* error) {
  // A column's unit: that of its NumberItems (every number of a column has one).
  std::vector<QString> units(size_t(table.columnCount()));
  for (int c = 0; c < table.columnCount(); ++c)
    for (int r = 0; r < table.rowCount() && units[size_t(c)].isEmpty(); ++r)
      if (const QTableWidgetItem* item = table.item(r, c))
        units[size_t(c)] = item->data(NumberItem::kUnitRole).toString();
  QString out;
  for (int c = 0; c < table.columnCount(); ++c) {
    const QTableWidgetItem* h = table.horizontalHeaderItem(c);
    QString title = h ? h->text() : QString::number(c);
    if (!units[size_t(c)].isEmpty()) title += " (" + units[size_t(c)] + ")";
    out += (c ? "," : "") + csvField(title);
  }
  out += "\r\n";
  for (int r = 0; r < table.rowCount(); ++r) {
    for (int c = 0; c < table.columnCount(); ++c) {
      const QTableWidgetItem* item = table.item(r, c);
      QString v;
      if (item) {
        const QVariant number = item->data(Qt::UserRole);
        const bool has_unit = !item->data(NumberItem::kUnitRole).toString().isEmpty();
        v = has_unit && number.isValid() ? QString::number(number.toDouble(), 'g', 12) : item->text();
      }
      out += (c ? "," : "") + csvField(v);
    }
    out += "\r\n";
  }
  QSaveFile file(path);
  if (!file.open(QIODevice::WriteOnly) || file.write(out.toUtf8()) < 0 || !file.commit()) {
    if (error) *error = path + ": cannot write the CSV (" + file.errorString() + ")";
    return false;
  }
  return true;
}

}  // namespace kiln::studio
