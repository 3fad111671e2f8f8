#include "report/svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace cputrain::report {
namespace {

const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                          "#9467bd", "#8c564b", "#e377c2", "#17becf"};
constexpr double kLeft = 78, kRight = 24, kTop = 44, kBottom = 58;

std::string Color(const std::string& c, std::size_t i) {
  return c.empty() ? kPalette[i % (sizeof(kPalette) / sizeof(kPalette[0]))] : c;
}

// "Nice" tick step (1, 2 or 5 times a power of ten) for about `target` ticks over [lo, hi].
double NiceStep(double lo, double hi, int target) {
  const double raw = (hi - lo) / std::max(target, 1);
  if (raw <= 0 || !std::isfinite(raw)) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

struct Scale {
  double lo = 0, hi = 1, a = 0, b = 1;  // pixel = a + (v' - lo) / (hi - lo) * (b - a)
  bool log = false;
  bool pow2 = false;  // log ticks at powers of two (byte sizes)
  double Map(double v) const {
    const double t = log ? std::log10(v) : v;
    return a + (t - lo) / (hi - lo) * (b - a);
  }
  std::vector<double> Ticks() const {
    std::vector<double> out;
    if (log && pow2) {
      // lo, hi are log10 values; ticks at 2^k, every `step`-th power so that at most ~10 show.
      const double l2 = std::log10(2.0);
      const int k0 = static_cast<int>(std::ceil(lo / l2 - 1e-9)),
                k1 = static_cast<int>(std::floor(hi / l2 + 1e-9));
      const int step = std::max(1, (k1 - k0 + 9) / 10);
      for (int k = k0; k <= k1; k += step) out.push_back(std::pow(2.0, k));
      return out;
    }
    if (log) {
      for (double e = std::ceil(lo - 1e-9); e <= hi + 1e-9; e += 1)
        out.push_back(std::pow(10.0, e));
      if (out.size() < 3) {  // short range: add 2x and 5x
        std::vector<double> more;
        for (double e = std::floor(lo); e <= hi; e += 1) {
          for (double m : {1.0, 2.0, 5.0}) {
            const double v = m * std::pow(10.0, e);
            if (std::log10(v) >= lo - 1e-9 && std::log10(v) <= hi + 1e-9) more.push_back(v);
          }
        }
        out = more;
      }
      return out;
    }
    const double step = NiceStep(lo, hi, 6);
    for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) {
      out.push_back(std::fabs(v) < step * 1e-9 ? 0 : v);
    }
    return out;
  }
};

Scale MakeScale(const Axis& axis, double dmin, double dmax, double a, double b) {
  Scale s;
  s.log = axis.log;
  s.pow2 = axis.log && axis.format == "bytes";
  s.a = a;
  s.b = b;
  if (!std::isfinite(dmin) || !std::isfinite(dmax)) dmin = 0, dmax = 1;
  double lo = axis.min.value_or(dmin), hi = axis.max.value_or(dmax);
  if (s.log) {
    lo = std::log10(std::max(lo, 1e-300));
    hi = std::log10(std::max(hi, 1e-300));
    if (!axis.min) lo = std::floor(lo * 2) / 2;  // pad to half-decades
    if (!axis.max) hi = std::ceil(hi * 2) / 2;
  } else if (!axis.min || !axis.max) {
    const double step = NiceStep(lo, hi, 6);
    if (!axis.min) lo = std::floor(lo / step) * step;
    if (!axis.max) hi = std::ceil(hi / step) * step;
  }
  if (hi <= lo) hi = lo + 1;
  s.lo = lo;
  s.hi = hi;
  return s;
}

std::string Header(int w, int h, const std::string& title) {
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" "
      "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"13\">\n"
      "<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n",
      w, h);
  if (!title.empty()) {
    s += fmt::format(
        "<text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"16\" "
        "font-weight=\"bold\">{}</text>\n",
        w / 2, Escape(title));
  }
  return s;
}

void Legend(std::string& s, const std::vector<std::pair<std::string, std::string>>& items, double x,
            double y) {
  double yy = y;
  for (const auto& [name, color] : items) {
    s += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"14\" height=\"4\" fill=\"{}\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n",
        x, yy - 4, color, x + 20, yy + 1, Escape(name));
    yy += 18;
  }
}

}  // namespace

std::string Escape(const std::string& in) {
  std::string s;
  for (char c : in) {
    switch (c) {
      case '&':
        s += "&amp;";
        break;
      case '<':
        s += "&lt;";
        break;
      case '>':
        s += "&gt;";
        break;
      case '"':
        s += "&quot;";
        break;
      default:
        s += c;
    }
  }
  return s;
}

std::string FormatTick(double v, const std::string& format) {
  if (format == "bytes") {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (v >= 1024 && u < 4) v /= 1024, ++u;
    return fmt::format("{:g} {}", v, units[u]);
  }
  const double a = std::fabs(v);
  if (a >= 1e6) return fmt::format("{:g}M", v / 1e6);
  if (a >= 1e4) return fmt::format("{:g}k", v / 1e3);
  return fmt::format("{:g}", v);
}

std::string RenderLineChart(const LineChart& c) {
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin, ymin = xmin, ymax = -xmin;
  for (const Series& s : c.series) {
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      xmin = std::min(xmin, s.x[i]), xmax = std::max(xmax, s.x[i]);
      ymin = std::min(ymin, s.y[i]), ymax = std::max(ymax, s.y[i]);
    }
  }
  const double pw = c.width - kLeft - kRight, ph = c.height - kTop - kBottom;
  const Scale xs = MakeScale(c.x, xmin, xmax, kLeft, kLeft + pw);
  const Scale ys = MakeScale(c.y, ymin, ymax, kTop + ph, kTop);
  std::string s = Header(c.width, c.height, c.title);
  // grid and ticks
  for (double t : xs.Ticks()) {
    const double px = xs.Map(t);
    s += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#e4e4e4\"/>"
        "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
        px, kTop, kTop + ph, kTop + ph + 18, Escape(FormatTick(t, c.x.format)));
  }
  for (double t : ys.Ticks()) {
    const double py = ys.Map(t);
    s += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#e4e4e4\"/>"
        "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        kLeft, py, kLeft + pw, kLeft - 6, py + 4, Escape(FormatTick(t, c.y.format)));
  }
  s += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n", kLeft,
      kTop, pw, ph);
  s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
                   kLeft + pw / 2, c.height - 14.0, Escape(c.x.label));
  s += fmt::format(
      "<text transform=\"translate(18,{:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
      kTop + ph / 2, Escape(c.y.label));
  // data, clipped to the plot area
  s += fmt::format(
      "<clipPath id=\"plot\"><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/></clipPath>\n",
      kLeft, kTop, pw, ph);
  std::vector<std::pair<std::string, std::string>> legend;
  for (std::size_t k = 0; k < c.series.size(); ++k) {
    const Series& se = c.series[k];
    const std::string col = Color(se.color, k);
    std::string pts;
    for (std::size_t i = 0; i < se.x.size() && i < se.y.size(); ++i) {
      if (!std::isfinite(se.x[i]) || !std::isfinite(se.y[i])) continue;
      if ((c.x.log && se.x[i] <= 0) || (c.y.log && se.y[i] <= 0)) continue;
      pts += fmt::format("{:.1f},{:.1f} ", xs.Map(se.x[i]), ys.Map(se.y[i]));
    }
    if (se.line) {
      s += fmt::format(
          "<polyline clip-path=\"url(#plot)\" fill=\"none\" stroke=\"{}\" "
          "stroke-width=\"{}\" stroke-opacity=\"{}\" points=\"{}\"/>\n",
          col, se.width, se.opacity, pts);
    }
    if (se.markers) {
      for (std::size_t i = 0; i < se.x.size() && i < se.y.size(); ++i) {
        if (!std::isfinite(se.y[i])) continue;
        s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.2\" fill=\"{}\"/>\n",
                         xs.Map(se.x[i]), ys.Map(se.y[i]), col);
      }
    }
    if (!se.name.empty()) legend.push_back({se.name, col});
  }
  Legend(s, legend, c.legend_left ? kLeft + 12 : kLeft + pw - 190, kTop + 18);
  s += "</svg>\n";
  return s;
}

namespace {

double BarValue(const BarChart::BarSeries& se, std::size_t i) {
  return i < se.values.size() && std::isfinite(se.values[i]) ? se.values[i] : 0;
}

// Where a bar chart's parts go: the plot area and the category slots.
struct BarGeometry {
  double pw, ph, slot;
  bool slant;  // category labels slanted (they do not fit their slot)
  Scale ys;
};

// The bars of category i (side by side, or stacked) and its label.
void DrawCategory(std::string& s, const BarChart& c, const BarGeometry& g, std::size_t i) {
  const std::size_t per = c.stacked ? 1 : std::max<std::size_t>(c.series.size(), 1);
  const double bw = g.slot * 0.8 / per;
  double base = 0;
  for (std::size_t k = 0; k < c.series.size(); ++k) {
    const double v = BarValue(c.series[k], i);
    const double x = kLeft + g.slot * i + g.slot * 0.1 + (c.stacked ? 0 : bw * k);
    const double y0 = g.ys.Map(base + v);
    const double y1 = g.ys.Map(base);
    if (v > 0) {
      s += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\">"
          "<title>{}: {:.4g}</title></rect>\n",
          x, y0, bw, std::max(0.0, y1 - y0), Color(c.series[k].color, k), Escape(c.series[k].name),
          v);
    }
    if (!c.stacked && c.value_labels && v > 0) {
      s += fmt::format(
          "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" "
          "font-size=\"{}\">{:.3g}</text>\n",
          x + bw / 2, y0 - 3, bw < 22 ? 9 : 11, v);
    }
    if (c.stacked) base += v;
  }
  const double cx = kLeft + g.slot * (i + 0.5), cy = kTop + g.ph + 16;
  if (g.slant) {
    s += fmt::format(
        "<text x=\"{0:.1f}\" y=\"{1:.1f}\" text-anchor=\"end\" font-size=\"11\" "
        "transform=\"rotate(-35 {0:.1f} {1:.1f})\">{2}</text>\n",
        cx, cy, Escape(c.categories[i]));
  } else {
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", cx,
                     cy + 2, Escape(c.categories[i]));
  }
}

// The dashed reference lines, each added to the legend.
void DrawRefLines(std::string& s, const BarChart& c, const BarGeometry& g,
                  std::vector<std::pair<std::string, std::string>>* legend) {
  for (const auto& r : c.ref_lines) {
    if (!std::isfinite(r.value)) continue;
    const std::string col = r.color.empty() ? "#444444" : r.color;
    const double py = g.ys.Map(r.value);
    s += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"{3}\" "
        "stroke-width=\"1.5\" stroke-dasharray=\"6,4\"/>"
        "<text x=\"{2:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\" font-size=\"11\" "
        "fill=\"{3}\">{5}</text>\n",
        kLeft, py, kLeft + g.pw - 4, col, py - 4,
        Escape(fmt::format("{} {:.4g}", r.name, r.value)));
    legend->push_back({r.name + " (dashed)", col});
  }
}

}  // namespace

std::string RenderBarChart(const BarChart& c) {
  // Category labels: horizontal when they fit their slot, else slanted (which needs more room
  // below the plot).
  const std::size_t ncat = std::max<std::size_t>(c.categories.size(), 1);
  const double pw = c.width - kLeft - kRight;
  const double slot = pw / ncat;
  std::size_t longest = 0;
  for (const std::string& cat : c.categories) longest = std::max(longest, cat.size());
  const bool slant = static_cast<double>(longest) * 7.0 > slot;
  const double label_room = slant ? std::min(160.0, 6.0 * static_cast<double>(longest)) : 20.0;
  const std::size_t legend_rows = c.series.size() + c.ref_lines.size();
  const double legend_room = 18.0 * static_cast<double>((legend_rows + 2) / 3);
  const int height =
      static_cast<int>(std::max<double>(c.height, kTop + 220 + label_room + legend_room + 30));
  const double ph = height - kTop - label_room - legend_room - 30;
  double ymax = 0;
  for (std::size_t i = 0; i < c.categories.size(); ++i) {
    double stack = 0;
    for (const auto& se : c.series) {
      stack += BarValue(se, i);
      ymax = std::max(ymax, c.stacked ? stack : BarValue(se, i));
    }
  }
  for (const auto& r : c.ref_lines) {
    if (std::isfinite(r.value)) ymax = std::max(ymax, r.value);
  }
  Axis ya;
  ya.min = 0;
  const BarGeometry g{pw, ph, slot, slant,
                      MakeScale(ya, 0, ymax > 0 ? ymax * 1.05 : 1, kTop + ph, kTop)};
  std::string s = Header(c.width, height, c.title);
  for (double t : g.ys.Ticks()) {
    const double py = g.ys.Map(t);
    s += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#e4e4e4\"/>"
        "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        kLeft, py, kLeft + pw, kLeft - 6, py + 4, Escape(FormatTick(t, "")));
  }
  s += fmt::format(
      "<text transform=\"translate(18,{:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
      kTop + ph / 2, Escape(c.y_label));
  for (std::size_t i = 0; i < c.categories.size(); ++i) DrawCategory(s, c, g, i);
  std::vector<std::pair<std::string, std::string>> legend;
  for (std::size_t k = 0; k < c.series.size(); ++k)
    legend.push_back({c.series[k].name, Color(c.series[k].color, k)});
  DrawRefLines(s, c, g, &legend);
  s += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n", kLeft,
      kTop, pw, ph);
  // Legend in up to three columns below the labels.
  const double ly = kTop + ph + label_room + 24;
  for (std::size_t k = 0; k < legend.size(); ++k) {
    Legend(s, {legend[k]}, kLeft + 10 + (pw / 3) * static_cast<double>(k % 3),
           ly + 18.0 * static_cast<double>(k / 3));
  }
  s += "</svg>\n";
  return s;
}

std::string RenderHeatmap(const Heatmap& c) {
  const double left = 110, top = 70;
  const std::size_t rows = c.values.size(), cols = rows ? c.values[0].size() : 0;
  const int w = static_cast<int>(left + c.cell * cols + 30),
            h = static_cast<int>(top + c.cell * rows + 50);
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& r : c.values)
    for (double v : r)
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  std::string s = Header(w, h, c.title);
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < cols; ++j) {
      const double v = c.values[i][j];
      const double t = hi > lo ? (v - lo) / (hi - lo) : 1.0;
      // white (low) to dark blue (high)
      const int r = static_cast<int>(235 - 200 * t), g = static_cast<int>(242 - 150 * t),
                b = static_cast<int>(250 - 70 * t);
      const double x = left + c.cell * j, y = top + c.cell * i;
      s += fmt::format(
          "<rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"{}\" height=\"{}\" fill=\"rgb({},{},{})\" "
          "stroke=\"white\"/>"
          "<text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"middle\" fill=\"{}\">{:.3g}</text>\n",
          x, y, c.cell, c.cell, r, g, b, x + c.cell / 2.0, y + c.cell / 2.0 + 4,
          t > 0.6 ? "white" : "black", v);
    }
    s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"end\">{}</text>\n", left - 8,
                     top + c.cell * (i + 0.5) + 4,
                     Escape(i < c.row_labels.size() ? c.row_labels[i] : ""));
  }
  for (std::size_t j = 0; j < cols; ++j) {
    s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"middle\">{}</text>\n",
                     left + c.cell * (j + 0.5), top - 8,
                     Escape(j < c.col_labels.size() ? c.col_labels[j] : ""));
  }
  s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"middle\">{}</text>\n",
                   left + c.cell * cols / 2.0, top - 28.0, Escape(c.col_axis));
  s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"middle\">{} ({})</text>\n",
                   left + c.cell * cols / 2.0, top + c.cell * rows + 30.0, Escape(c.row_axis),
                   Escape(c.value_label));
  s += "</svg>\n";
  return s;
}

}  // namespace cputrain::report
