#include "util/svg_plot.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace hilnas {
namespace {

std::string StyleAttributes(const PlotStyle& s) {
  std::string a = absl::StrFormat("fill='%s' stroke='%s' stroke-width='%g'", XmlEscape(s.fill),
                                  XmlEscape(s.stroke), s.stroke_width);
  if (s.opacity < 1) absl::StrAppend(&a, absl::StrFormat(" fill-opacity='%g'", s.opacity));
  if (!s.dash.empty()) absl::StrAppend(&a, " stroke-dasharray='", XmlEscape(s.dash), "'");
  return a;
}

// Tick values of an axis.
std::vector<double> Ticks(const PlotAxis& a) {
  std::vector<double> out;
  if (a.log) {
    const double lo = std::log10(a.min), hi = std::log10(a.max);
    for (double d = std::pow(10, std::floor(lo)); d <= std::pow(10, hi); d *= 10) {
      for (double m : {1.0, 2.0, 5.0}) {
        const double t = d * m;
        if (std::log10(t) >= lo && std::log10(t) <= hi) out.push_back(t);
      }
    }
    return out;
  }
  const int n = std::max(1, a.linear_ticks);
  for (int i = 0; i <= n; ++i) out.push_back(a.min + (a.max - a.min) * i / n);
  return out;
}

double Fraction(const PlotAxis& a, double v) {
  if (a.log) return (std::log10(v) - std::log10(a.min)) / (std::log10(a.max) - std::log10(a.min));
  return (v - a.min) / (a.max - a.min);
}

}  // namespace

PlotStyle Dot(const std::string& fill, double radius, double opacity) {
  PlotStyle s;
  s.fill = fill;
  s.radius = radius;
  s.opacity = opacity;
  return s;
}

PlotStyle Stroke(const std::string& colour, double width, const std::string& dash) {
  PlotStyle s;
  s.fill = "none";
  s.stroke = colour;
  s.stroke_width = width;
  s.dash = dash;
  return s;
}

std::string XmlEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '\'':
        out += "&apos;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

SvgPlot::SvgPlot(double width, double height, std::string title, PlotAxis x, PlotAxis y,
                 std::string subtitle)
    : width_(width),
      height_(height),
      title_(std::move(title)),
      subtitle_(std::move(subtitle)),
      x_(std::move(x)),
      y_(std::move(y)) {}

double SvgPlot::X(double v) const { return left_ + Fraction(x_, v) * (width_ - left_ - right_); }

double SvgPlot::Y(double v) const {
  return height_ - bottom_ - Fraction(y_, v) * (height_ - top_ - bottom_);
}

void SvgPlot::Point(double x, double y, const PlotStyle& s, const std::string& tooltip) {
  absl::StrAppend(&marks_, absl::StrFormat("<circle cx='%.1f' cy='%.1f' r='%g' %s>", X(x), Y(y),
                                           s.radius, StyleAttributes(s)));
  if (!tooltip.empty()) absl::StrAppend(&marks_, "<title>", XmlEscape(tooltip), "</title>");
  absl::StrAppend(&marks_, "</circle>\n");
}

void SvgPlot::Segment(double x1, double y1, double x2, double y2, const PlotStyle& s) {
  absl::StrAppend(&marks_, absl::StrFormat("<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' %s/>\n",
                                           X(x1), Y(y1), X(x2), Y(y2), StyleAttributes(s)));
}

void SvgPlot::Curve(const std::vector<std::pair<double, double>>& points, const PlotStyle& s,
                    bool steps) {
  if (points.empty()) return;
  std::string d = absl::StrFormat("M%.1f,%.1f", X(points[0].first), Y(points[0].second));
  for (size_t i = 1; i < points.size(); ++i) {
    if (steps) {
      absl::StrAppend(&d, absl::StrFormat(" H%.1f V%.1f", X(points[i].first), Y(points[i].second)));
    } else {
      absl::StrAppend(&d, absl::StrFormat(" L%.1f,%.1f", X(points[i].first), Y(points[i].second)));
    }
  }
  PlotStyle line = s;
  line.fill = "none";
  absl::StrAppend(&marks_, "<path d='", d, "' ", StyleAttributes(line), "/>\n");
}

void SvgPlot::Label(double x, double y, const std::string& text, const std::string& colour,
                    double dx, double dy, bool vertical) {
  const double px = X(x) + dx, py = Y(y) + dy;
  absl::StrAppend(&marks_,
                  absl::StrFormat("<text x='%.1f' y='%.1f' fill='%s'", px, py, XmlEscape(colour)));
  if (vertical)
    absl::StrAppend(&marks_, absl::StrFormat(" transform='rotate(-90 %.1f %.1f)'", px, py));
  absl::StrAppend(&marks_, ">", XmlEscape(text), "</text>\n");
}

void SvgPlot::Legend(const std::string& text, const PlotStyle& s, bool line,
                     const std::string& corner) {
  const bool right = corner.find("right") != std::string::npos;
  const bool upper = corner.find("upper") != std::string::npos;
  const double x = right ? width_ - right_ - 130 : left_ + 14;
  const double y =
      upper ? top_ + 18 + 18.0 * legend_entries_ : height_ - bottom_ - 16 - 18.0 * legend_entries_;
  ++legend_entries_;
  if (line) {
    PlotStyle l = s;
    l.fill = "none";
    absl::StrAppend(&legend_, absl::StrFormat("<line x1='%.0f' y1='%.0f' x2='%.0f' y2='%.0f' %s/>",
                                              x - 8, y, x + 6, y, StyleAttributes(l)));
  } else {
    absl::StrAppend(&legend_, absl::StrFormat("<circle cx='%.0f' cy='%.0f' r='%g' %s/>", x, y,
                                              s.radius, StyleAttributes(s)));
  }
  absl::StrAppend(&legend_, absl::StrFormat("<text x='%.0f' y='%.0f'>%s</text>\n", x + 10, y + 4,
                                            XmlEscape(text)));
}

std::string SvgPlot::Render() const {
  const double plot_w = width_ - left_ - right_, plot_h = height_ - top_ - bottom_;
  std::string s = absl::StrFormat(
      "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' "
      "font-family='sans-serif' font-size='12'>\n<rect width='100%%' height='100%%' "
      "fill='white'/>\n<text x='%.0f' y='20' text-anchor='middle' font-size='15'>%s</text>\n",
      width_, height_, width_ / 2, XmlEscape(title_));
  if (!subtitle_.empty()) {
    absl::StrAppend(&s, absl::StrFormat("<text x='%.0f' y='38' text-anchor='middle' "
                                        "font-size='11'>%s</text>\n",
                                        width_ / 2, XmlEscape(subtitle_)));
  }
  absl::StrAppend(&s, absl::StrFormat("<rect x='%.0f' y='%.0f' width='%.0f' height='%.0f' "
                                      "fill='none' stroke='black'/>\n",
                                      left_, top_, plot_w, plot_h));
  for (double t : Ticks(x_)) {
    absl::StrAppend(&s,
                    absl::StrFormat("<text x='%.1f' y='%.0f' text-anchor='middle'>", X(t),
                                    height_ - bottom_ + 16),
                    absl::StrFormat("%g", t), "</text>\n");
  }
  for (double t : Ticks(y_)) {
    const std::string label = y_.tick_decimals < 0 ? absl::StrFormat("%g", t)
                                                   : absl::StrFormat("%.*f", y_.tick_decimals, t);
    absl::StrAppend(&s, absl::StrFormat("<text x='%.0f' y='%.1f' text-anchor='end'>%s</text>\n",
                                        left_ - 6, Y(t) + 4, label));
  }
  absl::StrAppend(&s, absl::StrFormat("<text x='%.0f' y='%.0f' text-anchor='middle'>%s</text>\n"
                                      "<text x='18' y='%.0f' transform='rotate(-90 18 %.0f)' "
                                      "text-anchor='middle'>%s</text>\n",
                                      left_ + plot_w / 2, height_ - 18, XmlEscape(x_.label),
                                      top_ + plot_h / 2, top_ + plot_h / 2, XmlEscape(y_.label)));
  return s + marks_ + legend_ + "</svg>\n";
}

}  // namespace hilnas
