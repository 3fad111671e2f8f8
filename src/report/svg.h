// report/: SVG charts with no dependency (a browser shows them; so does the README on a forge).
// Used by `cputrain-numa plot` (loss curves) and `cputrain-numa report` (benchmark charts).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace cputrain::report {

struct Series {
  std::string name;
  std::vector<double> x, y;
  std::string color;     // CSS color; "" = from the palette
  bool line = true;      // connect the points
  bool markers = false;  // draw a dot at each point
  double width = 1.8;    // line width
  double opacity = 1.0;
};

struct Axis {
  std::string label;
  bool log = false;                // log10 scale (values must be > 0)
  std::optional<double> min, max;  // default: from the data, padded to nice ticks
  // How tick values print: "" = plain numbers, "bytes" = 4 KiB / 16 MiB (a log axis in bytes
  // gets its ticks at powers of two).
  std::string format;
};

struct LineChart {
  std::string title;
  Axis x, y;
  std::vector<Series> series;
  int width = 820, height = 460;
  bool legend_left = false;  // legend in the top-left corner (default: top-right)
};

std::string RenderLineChart(const LineChart& chart);

// Grouped vertical bars: one group per category, one bar per series in the group.
struct BarChart {
  std::string title;
  std::vector<std::string> categories;
  struct BarSeries {
    std::string name;
    std::vector<double> values;  // one per category
    std::string color;
  };
  std::vector<BarSeries> series;
  std::string y_label;
  bool stacked = false;  // stack the series in one bar per category
  // Horizontal reference lines across the plot (e.g. a measured peak), dashed, labelled.
  struct RefLine {
    std::string name;
    double value = 0;
    std::string color;  // "" = dark grey
  };
  std::vector<RefLine> ref_lines;
  bool value_labels = true;       // write each bar's value above it (grouped bars only)
  int width = 820, height = 460;  // category labels are slanted when they would not fit
};

std::string RenderBarChart(const BarChart& chart);

// A matrix of values as colored cells with the value written in each.
struct Heatmap {
  std::string title;
  std::vector<std::string> row_labels, col_labels;
  std::vector<std::vector<double>> values;  // [row][col]
  std::string value_label;                  // e.g. "GB/s"
  std::string row_axis, col_axis;
  int cell = 70;
};

std::string RenderHeatmap(const Heatmap& chart);

// "1.5k", "0.003", "12" : short tick labels.
std::string FormatTick(double v, const std::string& format);
// Escapes &, <, > and quotes for SVG text.
std::string Escape(const std::string& s);

}  // namespace cputrain::report
