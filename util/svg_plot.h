// The one plotting helper behind every chart hilnas writes (Pareto fronts,
// the latency model's cross-validation scatter, search-efficiency curves):
// a framed plot area with a linear or log axis each way, ticks, axis
// labels and a title, and marks placed in data coordinates. Text is
// XML-escaped, so names from configs cannot break the document.
#ifndef HILNAS_UTIL_SVG_PLOT_H_
#define HILNAS_UTIL_SVG_PLOT_H_

#include <string>
#include <utility>
#include <vector>

namespace hilnas {

struct PlotAxis {
  PlotAxis() = default;
  PlotAxis(std::string label, double min, double max, bool log = false)
      : label(std::move(label)), min(min), max(max), log(log) {}

  std::string label;
  double min = 0, max = 1;  // data range shown (log: both > 0)
  bool log = false;         // ticks at 1, 2, 5 x 10^k
  int linear_ticks = 5;     // intervals between linear ticks
  int tick_decimals = -1;   // fixed decimals of tick labels; -1: shortest (%g)
};

struct PlotStyle {
  std::string fill = "#1f77b4";
  std::string stroke = "none";
  double radius = 3;
  double opacity = 1;
  double stroke_width = 1;
  std::string dash;  // SVG stroke-dasharray, empty: solid
};

// A filled dot of `radius` pixels.
PlotStyle Dot(const std::string& fill, double radius, double opacity = 1);
// A line of `width` pixels, dashed when `dash` (stroke-dasharray) is set.
PlotStyle Stroke(const std::string& colour, double width = 1, const std::string& dash = "");

class SvgPlot {
 public:
  // A `width` x `height` pixel chart; margins leave room for ticks and labels.
  SvgPlot(double width, double height, std::string title, PlotAxis x, PlotAxis y,
          std::string subtitle = "");

  // Data -> pixel coordinates (log axes take log10).
  double X(double v) const;
  double Y(double v) const;

  // Marks in data coordinates. `tooltip` becomes the mark's <title>.
  void Point(double x, double y, const PlotStyle& style, const std::string& tooltip = "");
  void Segment(double x1, double y1, double x2, double y2, const PlotStyle& style);
  // Straight segments through `points`, or a staircase (horizontal, then
  // vertical) when `steps`, as a Pareto front is drawn.
  void Curve(const std::vector<std::pair<double, double>>& points, const PlotStyle& style,
             bool steps = false);
  // Text at a data point, shifted by (dx, dy) pixels; `vertical` reads upwards.
  void Label(double x, double y, const std::string& text, const std::string& colour, double dx = 0,
             double dy = 0, bool vertical = false);
  // The next legend entry: a dot (or a line when `line`) and its text, in
  // the given corner ("upper right", "lower left", ...).
  void Legend(const std::string& text, const PlotStyle& style, bool line = false,
              const std::string& corner = "lower left");

  // The whole document.
  std::string Render() const;

 private:
  double width_, height_;
  std::string title_, subtitle_;
  PlotAxis x_, y_;
  double left_ = 70, right_ = 30, top_ = 50, bottom_ = 60;
  std::string marks_;
  std::string legend_;
  int legend_entries_ = 0;
};

// `text` with &, <, >, ' and " escaped for XML.
std::string XmlEscape(const std::string& text);

}  // namespace hilnas

#endif  // HILNAS_UTIL_SVG_PLOT_H_
