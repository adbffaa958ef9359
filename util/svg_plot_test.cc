#include "util/svg_plot.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hilnas {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(SvgPlotTest, MapsDataToThePlotAreaOnLinearAndLogAxes) {
  SvgPlot p(600, 400, "t", {"x", 1, 100, /*log=*/true}, {"y", 0, 10});
  EXPECT_DOUBLE_EQ(p.X(1), 70);          // left margin
  EXPECT_DOUBLE_EQ(p.X(100), 600 - 30);  // right margin
  EXPECT_DOUBLE_EQ(p.X(10), (70 + 570) / 2.0);
  EXPECT_DOUBLE_EQ(p.Y(0), 400 - 60);
  EXPECT_DOUBLE_EQ(p.Y(10), 50);
}

TEST(SvgPlotTest, DrawsTicksLabelsMarksAndLegend) {
  PlotAxis loss{"loss", 2, 3};
  loss.linear_ticks = 4;
  loss.tick_decimals = 3;
  SvgPlot p(600, 400, "front", {"TTFT ms", 1, 100, true}, loss);
  p.Point(10, 2.5, Dot("#ff7f0e", 5), "trial 1");
  p.Curve({{1, 3}, {10, 2.5}}, Stroke("#ff7f0e", 2), /*steps=*/true);
  p.Legend("Pareto front", Dot("#ff7f0e", 5));
  const std::string svg = p.Render();
  EXPECT_THAT(svg, HasSubstr("<svg"));
  EXPECT_THAT(svg, HasSubstr(">50</text>"));     // a 5 x 10^1 log tick
  EXPECT_THAT(svg, HasSubstr(">2.750</text>"));  // a linear tick, 3 decimals
  EXPECT_THAT(svg, HasSubstr("<title>trial 1</title>"));
  EXPECT_THAT(svg, HasSubstr(" H"));  // the staircase
  EXPECT_THAT(svg, HasSubstr("Pareto front"));
  EXPECT_THAT(svg, HasSubstr("</svg>\n"));
}

TEST(SvgPlotTest, EscapesTextFromConfigs) {
  SvgPlot p(300, 300, "<script>alert(1)</script>", {"a&b", 0, 1}, {"y", 0, 1});
  p.Label(0.5, 0.5, "it's \"x\"", "red");
  const std::string svg = p.Render();
  EXPECT_THAT(svg, Not(HasSubstr("<script>")));
  EXPECT_THAT(svg, HasSubstr("&lt;script&gt;"));
  EXPECT_THAT(svg, HasSubstr("a&amp;b"));
  EXPECT_THAT(svg, HasSubstr("it&apos;s &quot;x&quot;"));
}

}  // namespace
}  // namespace hilnas
