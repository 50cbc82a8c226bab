// tests/test_report.cpp — the SVG charts' axis ticks (heed/report.h): readable positions
// (multiples of 1, 2 or 5 x 10^k), as few digits as the step needs, k / M suffixes, powers of
// ten on log axes, and a chart file whose labels contain no exponent notation.
#include <doctest/doctest.h>
#include <heed/report.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using heed::report::svg::axis_ticks;
using heed::report::svg::AxisTicks;
using heed::report::svg::format_value;
using heed::report::svg::log_axis_ticks;

TEST_CASE("axis_ticks: nice steps, k and M suffixes, decimals only where the step needs them") {
  // Iterations 0..3000: steps of 500, labelled in thousands with one decimal.
  AxisTicks t = axis_ticks(0, 3000);
  CHECK(t.at == std::vector<double>{0, 500, 1000, 1500, 2000, 2500, 3000});
  CHECK(t.labels == std::vector<std::string>{"0", "0.5k", "1.0k", "1.5k", "2.0k", "2.5k", "3.0k"});
  // 1223..1250 (the case of the issue: "1.22e+03" before).
  t = axis_ticks(1223.4, 1250.0);
  CHECK(t.at.front() >= 1223.4);
  CHECK(t.at.back() <= 1250.0);
  for (const std::string& label : t.labels) {
    CAPTURE(label);
    CHECK(label.find('e') == std::string::npos);
    CHECK(label.back() == 'k');
  }
  CHECK(t.labels.front() == "1.225k");
  // Losses 1.83..2.41: steps of 0.1.
  t = axis_ticks(1.83, 2.41);
  CHECK(t.labels == std::vector<std::string>{"1.9", "2.0", "2.1", "2.2", "2.3", "2.4"});
  // Millions, negatives, a single value.
  CHECK(axis_ticks(0, 4e6).labels == std::vector<std::string>{"0", "1M", "2M", "3M", "4M"});
  CHECK(axis_ticks(-1, 1).labels == std::vector<std::string>{"-1.0", "-0.5", "0", "0.5", "1.0"});
  CHECK(axis_ticks(7, 7).labels == std::vector<std::string>{"7"});
  // Tiny values keep two digits in scientific notation.
  CHECK(axis_ticks(0, 4e-5).labels.back() == "4.0e-05");
}

TEST_CASE("log_axis_ticks: powers of ten, or readable values in a narrow range") {
  AxisTicks t = log_axis_ticks(-2.3, 2.1);
  CHECK(t.at == std::vector<double>{-2, -1, 0, 1, 2});
  CHECK(t.labels == std::vector<std::string>{"0.01", "0.1", "1", "10", "100"});
  t = log_axis_ticks(std::log10(1.5), std::log10(4.5));  // no power of ten inside
  CHECK(t.labels == std::vector<std::string>{"1.5", "2.0", "2.5", "3.0", "3.5", "4.0", "4.5"});
  CHECK(t.at[1] == doctest::Approx(std::log10(2.0)));
  CHECK(format_value(1223.4) == "1.22k");
  CHECK(format_value(0.0123) == "0.0123");
  CHECK(format_value(2.5e6) == "2.5M");
}

TEST_CASE("line_chart: the axis labels of a written chart are readable") {
  const std::string path = (std::filesystem::temp_directory_path() / "heed_test_report_chart.svg").string();
  heed::report::svg::Series s{"loss", {}, {}};
  for (int i = 0; i <= 100; ++i) {
    s.x.push_back(1200 + 3.1 * i);
    s.y.push_back(2.5 - 0.006 * i);
  }
  heed::report::svg::line_chart(path, "loss", {s}, "iteration", "loss");
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string svg = text.str();
  std::filesystem::remove(path);
  // Every <text ...>BODY</text> (std::regex is avoided: GCC 12 warns inside it under the asan build).
  int labels = 0;
  for (size_t at = svg.find("<text "); at != std::string::npos; at = svg.find("<text ", at + 1)) {
    const size_t open_end = svg.find('>', at), close = svg.find("</text>", at);
    REQUIRE(open_end != std::string::npos);
    REQUIRE(close != std::string::npos);
    const std::string body = svg.substr(open_end + 1, close - open_end - 1);
    if (body == "loss" || body == "iteration") continue;  // title, axis names, legend
    CAPTURE(body);
    CHECK(body.find("e+") == std::string::npos);
    CHECK(body.find("e-") == std::string::npos);
    ++labels;
  }
  CHECK(labels >= 8);                               // both axes labelled
  CHECK(svg.find(">1.20k<") != std::string::npos);  // x: 1200 .. 1510 in steps of 50
  CHECK(svg.find(">1.25k<") != std::string::npos);
  CHECK(svg.find(">2.0<") != std::string::npos);  // y: 1.9 .. 2.5 in steps of 0.1
}

TEST_CASE("line_chart: a series' band is shaded and widens the y axis") {
  const std::string path = (std::filesystem::temp_directory_path() / "heed_test_report_band.svg").string();
  heed::report::svg::Series s{"val loss", {}, {}};
  for (int i = 0; i < 10; ++i) {
    s.x.push_back(100.0 * i);
    s.y.push_back(2.0 + 0.1 * i);  // the line spans 2.0 .. 2.9
    s.band_lo.push_back(1.0);      // the band spans 1 .. 5
    s.band_hi.push_back(i == 4 ? 5.0 : 3.0);
  }
  heed::report::svg::Series plain{"no band", {0, 900}, {2.5, 2.5}};
  heed::report::svg::line_chart(path, "bands", {s, plain}, "step", "loss");
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string svg = text.str();
  std::filesystem::remove(path);
  // One polygon (only the first series has a band) with 2 x 10 points.
  const size_t polygon = svg.find("<polygon ");
  REQUIRE(polygon != std::string::npos);
  CHECK(svg.find("<polygon ", polygon + 1) == std::string::npos);
  const size_t points = svg.find("points=\"", polygon) + 8;
  const std::string outline = svg.substr(points, svg.find('"', points) - points);
  CHECK(std::count(outline.begin(), outline.end(), ',') == 20);
  // The y axis reaches the band's extremes, not only the line's.
  CHECK(svg.find(">1<") != std::string::npos);
  CHECK(svg.find(">5<") != std::string::npos);
  // A band of the wrong length is ignored, not drawn out of bounds.
  s.band_hi.pop_back();
  heed::report::svg::line_chart(path, "bands", {s}, "step", "loss");
  std::ifstream again(path);
  std::stringstream text2;
  text2 << again.rdbuf();
  CHECK(text2.str().find("<polygon ") == std::string::npos);
  std::filesystem::remove(path);
}
