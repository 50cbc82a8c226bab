// support/src/report.cpp — progress line, metrics log, SVG pictures (see heed/report.h).
#include "heed/report.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>

#include "heed/error.h"

namespace heed::report {

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02d}m", s / 3600, (s / 60) % 60);
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}
}  // namespace

Progress::Progress(int64_t plain_every, std::FILE* out)
    : out_(out),
      terminal_(isatty(fileno(out)) != 0),
      plain_every_(std::max<int64_t>(plain_every, 1)),
      start_seconds_(now_seconds()) {}

void Progress::update(const ProgressState& s) {
  const double elapsed = now_seconds() - start_seconds_;
  const double eta = s.step > 0 ? elapsed / static_cast<double>(s.step) * static_cast<double>(s.total - s.step) : NAN;
  const std::string line =
      fmt::format("step {}/{}  loss {:.4f}  {:.0f} tok/s  lr {:.2e}  |g| {:.3f}  ETA {}{}{}", s.step, s.total, s.loss,
                  s.tokens_per_second, s.lr, s.grad_norm, format_duration(eta), s.extra.empty() ? "" : "  ", s.extra);
  if (terminal_) {
    std::fprintf(out_, "\r\033[K%s", line.c_str());
    line_open_ = true;
    if (s.step == s.total) finish_line();
  } else if (s.step % plain_every_ == 0 || s.step == s.total || s.step == 1) {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void Progress::finish_line() {
  if (line_open_) {
    std::fprintf(out_, "\n");
    line_open_ = false;
  }
}

MetricsLog::MetricsLog(const std::string& path, bool append) {
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  HEED_CHECK(file_ != nullptr, "MetricsLog", "cannot open '{}' for writing", path);
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const nlohmann::json& record) {
  if (!file_) return;
  const std::string line = record.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

namespace svg {

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
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

namespace {

void write_file(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    HEED_CHECK(out.good(), "svg", "cannot write '{}'", path);
    out << content;
    HEED_CHECK(out.good(), "svg", "writing '{}' failed", path);
  }
  HEED_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "svg", "cannot move '{}' into place", path);
}

const char* const kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string tick(double v) { return format_value(v); }

// "1.2k" for 1200 with unit 1000 and 1 decimal; trailing zeros are kept so labels line up;
// zero is "0".
std::string with_unit(double v, double unit, const char* suffix, int decimals) {
  if (std::fabs(v) < 1e-9 * unit) return "0";
  return fmt::format("{:.{}f}{}", v / unit, decimals, suffix);
}

// Colour of a value t in [0, 1] (white -> dark blue).
std::string shade(double t) {
  t = std::clamp(std::isfinite(t) ? t : 0.0, 0.0, 1.0);
  const int r = static_cast<int>(255 - t * (255 - 8)), g = static_cast<int>(255 - t * (255 - 48)),
            b = static_cast<int>(255 - t * (255 - 107));
  return fmt::format("rgb({},{},{})", r, g, b);
}

}  // namespace

std::string format_value(double v) {
  if (v == 0 || !std::isfinite(v)) return fmt::format("{}", v);
  const double a = std::fabs(v);
  if (a >= 1e6) return fmt::format("{:.3g}M", v / 1e6);
  if (a >= 1e3) return fmt::format("{:.3g}k", v / 1e3);
  if (a < 1e-3) return fmt::format("{:.2e}", v);
  return fmt::format("{:.3g}", v);
}

AxisTicks axis_ticks(double lo, double hi, int target) {
  AxisTicks t;
  if (!std::isfinite(lo) || !std::isfinite(hi)) return t;
  if (hi < lo) std::swap(lo, hi);
  if (hi == lo) {
    t.at.push_back(lo);
    t.labels.push_back(format_value(lo));
    return t;
  }
  const double raw = (hi - lo) / std::max(1, target), magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / magnitude;
  const double step = (norm < 1.5 ? 1.0 : norm < 3.0 ? 2.0 : norm < 7.0 ? 5.0 : 10.0) * magnitude;
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; k += 1.0) t.at.push_back(k * step);
  const double largest = std::max(std::fabs(lo), std::fabs(hi));
  const double unit = largest >= 1e6 ? 1e6 : largest >= 1e3 ? 1e3 : 1.0;
  const char* suffix = unit == 1e6 ? "M" : unit == 1e3 ? "k" : "";
  if (unit == 1.0 && largest < 1e-3) {  // tiny values: scientific notation, 2 digits
    for (double v : t.at) t.labels.push_back(v == 0 ? "0" : fmt::format("{:.1e}", v));
    return t;
  }
  // As many decimals as the step needs in the chosen unit (step 200 in thousands: 1).
  const int decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(step / unit) - 1e-9)), 0, 6);
  for (double v : t.at) t.labels.push_back(with_unit(v, unit, suffix, decimals));
  return t;
}

AxisTicks log_axis_ticks(double log10_lo, double log10_hi, int target) {
  AxisTicks t;
  if (!std::isfinite(log10_lo) || !std::isfinite(log10_hi)) return t;
  if (log10_hi < log10_lo) std::swap(log10_lo, log10_hi);
  const double first = std::ceil(log10_lo - 1e-9), last = std::floor(log10_hi + 1e-9);
  if (last - first >= 1.0) {  // at least two powers of ten: label those (every n-th if many)
    const double every = std::max(1.0, std::ceil((last - first + 1) / (target + 1)));
    for (double e = first; e <= last; e += every) {
      t.at.push_back(e);
      t.labels.push_back(format_value(std::pow(10.0, e)));
    }
    return t;
  }
  // A narrow range: ticks at readable values between, placed on the log axis.
  const AxisTicks linear = axis_ticks(std::pow(10.0, log10_lo), std::pow(10.0, log10_hi), target);
  for (size_t i = 0; i < linear.at.size(); ++i)
    if (linear.at[i] > 0) {
      t.at.push_back(std::log10(linear.at[i]));
      t.labels.push_back(linear.labels[i]);
    }
  return t;
}

void line_chart(const std::string& path, const std::string& title, const std::vector<Series>& series,
                const std::string& x_label, const std::string& y_label, bool log_y) {
  const double W = 720, H = 420, left = 70, right = 160, top = 40, bottom = 50;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  auto ty = [&](double y) { return log_y ? std::log10(y) : y; };
  auto drawable = [&](double x, double y) { return std::isfinite(x) && std::isfinite(y) && (!log_y || y > 0); };
  auto has_band = [](const Series& s) { return s.band_lo.size() == s.x.size() && s.band_hi.size() == s.x.size(); };
  auto widen = [&](double x, double y) {
    if (!drawable(x, y)) return;
    x0 = std::min(x0, x);
    x1 = std::max(x1, x);
    y0 = std::min(y0, ty(y));
    y1 = std::max(y1, ty(y));
  };
  for (const Series& s : series) {
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) widen(s.x[i], s.y[i]);
    if (has_band(s))
      for (size_t i = 0; i < s.x.size(); ++i) {
        widen(s.x[i], s.band_lo[i]);
        widen(s.x[i], s.band_hi[i]);
      }
  }
  if (!std::isfinite(x0)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + 1;
  const double pad = (y1 - y0) * 0.05;
  y0 -= pad;
  y1 += pad;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * (W - left - right); };
  auto py = [&](double y) { return top + (1 - (ty(y) - y0) / (y1 - y0)) * (H - top - bottom); };
  std::ostringstream o;
  o << fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      W, H);
  o << fmt::format("<text x=\"{}\" y=\"22\" font-size=\"15\" text-anchor=\"middle\">{}</text>\n", W / 2, escape(title));
  o << fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n", left, top,
                   W - left - right, H - top - bottom);
  const AxisTicks x_ticks = axis_ticks(x0, x1), y_ticks = log_y ? log_axis_ticks(y0, y1) : axis_ticks(y0, y1);
  for (size_t i = 0; i < x_ticks.at.size(); ++i)
    o << fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px(x_ticks.at[i]),
                     H - bottom + 16, x_ticks.labels[i]);
  for (size_t i = 0; i < y_ticks.at.size(); ++i) {
    const double ypix = top + (1 - (y_ticks.at[i] - y0) / (y1 - y0)) * (H - top - bottom);
    o << fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", left - 6, ypix + 4,
                     y_ticks.labels[i]);
    o << fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#eee\"/>\n", left, W - right, ypix,
                     ypix);
  }
  o << fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", (left + W - right) / 2, H - 12,
                   escape(x_label));
  o << fmt::format("<text x=\"16\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {})\">{}</text>\n",
                   (top + H - bottom) / 2, (top + H - bottom) / 2, escape(y_label + (log_y ? " (log)" : "")));
  for (size_t k = 0; k < series.size(); ++k) {
    const Series& s = series[k];
    const char* colour = kPalette[k % std::size(kPalette)];
    if (has_band(s)) {  // the upper edge left to right, then the lower edge back
      std::string outline;
      for (size_t i = 0; i < s.x.size(); ++i)
        if (drawable(s.x[i], s.band_hi[i])) outline += fmt::format("{:.1f},{:.1f} ", px(s.x[i]), py(s.band_hi[i]));
      for (size_t i = s.x.size(); i-- > 0;)
        if (drawable(s.x[i], s.band_lo[i])) outline += fmt::format("{:.1f},{:.1f} ", px(s.x[i]), py(s.band_lo[i]));
      o << fmt::format("<polygon fill=\"{}\" fill-opacity=\"0.18\" stroke=\"none\" points=\"{}\"/>\n", colour, outline);
    }
    std::string points;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!drawable(s.x[i], s.y[i])) continue;
      points += fmt::format("{:.1f},{:.1f} ", px(s.x[i]), py(s.y[i]));
    }
    o << fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\" points=\"{}\"/>\n", colour, points);
    const double ly = top + 14 + 18.0 * static_cast<double>(k);
    o << fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"3\"/>\n",
                     W - right + 10, W - right + 30, ly - 4, ly - 4, colour);
    o << fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", W - right + 36, ly, escape(s.name));
  }
  o << "</svg>\n";
  write_file(path, o.str());
}

namespace {
void heatmap_body(std::ostringstream& o, double ox, double oy, double cell, const std::string& title,
                  const std::vector<double>& values, int64_t rows, int64_t cols,
                  const std::vector<std::string>& row_labels, const std::vector<std::string>& col_labels,
                  double label_space) {
  double vmax = 0;
  for (double v : values)
    if (std::isfinite(v)) vmax = std::max(vmax, v);
  if (vmax <= 0) vmax = 1;
  o << fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"13\">{}</text>\n", ox + label_space,
                   oy - 6 - label_space, escape(title));
  for (int64_t c = 0; c < cols && c < static_cast<int64_t>(col_labels.size()); ++c) {
    const double x = ox + label_space + (static_cast<double>(c) + 0.5) * cell, y = oy - 4;
    o << fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" transform=\"rotate(-60 {:.1f} {:.1f})\">{}</text>\n", x, y, x,
        y, escape(col_labels[c]));
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (r < static_cast<int64_t>(row_labels.size()))
      o << fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" text-anchor=\"end\">{}</text>\n",
                       ox + label_space - 4, oy + (static_cast<double>(r) + 0.7) * cell, escape(row_labels[r]));
    for (int64_t c = 0; c < cols; ++c) {
      const double v = values[static_cast<size_t>(r * cols + c)];
      o << fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
          "fill=\"{}\"><title>{:.3f}</title></rect>\n",
          ox + label_space + static_cast<double>(c) * cell, oy + static_cast<double>(r) * cell, cell, cell,
          shade(v / vmax), v);
    }
  }
}
}  // namespace

void heatmap(const std::string& path, const std::string& title, const std::vector<double>& values, int64_t rows,
             int64_t cols, const std::vector<std::string>& row_labels, const std::vector<std::string>& col_labels) {
  heatmap_grid(path, title, {{"", values, rows, cols}}, row_labels, col_labels, 1);
}

void heatmap_grid(const std::string& path, const std::string& title, const std::vector<Panel>& panels,
                  const std::vector<std::string>& row_labels, const std::vector<std::string>& col_labels, int columns) {
  HEED_CHECK(!panels.empty(), "svg::heatmap", "nothing to draw");
  int64_t rows = 0, cols = 0;
  for (const Panel& p : panels) {
    HEED_CHECK(static_cast<int64_t>(p.values.size()) == p.rows * p.cols, "svg::heatmap",
               "panel '{}' has {} values for {}x{}", p.title, p.values.size(), p.rows, p.cols);
    rows = std::max(rows, p.rows);
    cols = std::max(cols, p.cols);
  }
  columns = std::max(1, std::min<int>(columns, static_cast<int>(panels.size())));
  const double cell = std::clamp(360.0 / static_cast<double>(std::max(rows, cols)), 6.0, 28.0);
  const double label_space = 80, panel_w = label_space + static_cast<double>(cols) * cell + 30,
               panel_h = label_space + static_cast<double>(rows) * cell + 30;
  const int grid_rows =
      static_cast<int>((panels.size() + static_cast<size_t>(columns) - 1) / static_cast<size_t>(columns));
  const double W = panel_w * columns + 20, H = panel_h * grid_rows + 50;
  std::ostringstream o;
  o << fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      W, H);
  o << fmt::format("<text x=\"10\" y=\"24\" font-size=\"15\">{}</text>\n", escape(title));
  for (size_t i = 0; i < panels.size(); ++i) {
    const double ox = 10 + panel_w * static_cast<double>(static_cast<int>(i) % columns);
    const double oy = 40 + label_space + panel_h * static_cast<double>(static_cast<int>(i) / columns);
    heatmap_body(o, ox, oy, cell, panels[i].title, panels[i].values, panels[i].rows, panels[i].cols, row_labels,
                 col_labels, label_space);
  }
  o << "</svg>\n";
  write_file(path, o.str());
}

void histogram(const std::string& path, const std::string& title, const std::vector<double>& edges,
               const std::vector<double>& counts, const std::string& x_label, bool log_y) {
  HEED_CHECK(edges.size() == counts.size() + 1 && !counts.empty(), "svg::histogram",
             "need edges.size() == counts.size() + 1, got {} and {}", edges.size(), counts.size());
  const double W = 640, H = 360, left = 60, right = 20, top = 40, bottom = 50;
  auto tv = [&](double c) { return log_y ? std::log10(1.0 + c) : c; };
  double cmax = 0;
  for (double c : counts) cmax = std::max(cmax, tv(c));
  if (cmax <= 0) cmax = 1;
  const double x0 = edges.front(), x1 = edges.back() > edges.front() ? edges.back() : edges.front() + 1;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * (W - left - right); };
  std::ostringstream o;
  o << fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      W, H);
  o << fmt::format("<text x=\"{}\" y=\"22\" font-size=\"15\" text-anchor=\"middle\">{}</text>\n", W / 2, escape(title));
  for (size_t i = 0; i < counts.size(); ++i) {
    const double h = tv(counts[i]) / cmax * (H - top - bottom);
    o << fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#1f77b4\"><title>[{}, {}): "
        "{}</title></rect>\n",
        px(edges[i]), H - bottom - h, std::max(0.5, px(edges[i + 1]) - px(edges[i]) - 0.5), h, tick(edges[i]),
        tick(edges[i + 1]), counts[i]);
  }
  const AxisTicks x_ticks = axis_ticks(x0, x1);
  for (size_t i = 0; i < x_ticks.at.size(); ++i)
    o << fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px(x_ticks.at[i]),
                     H - bottom + 16, x_ticks.labels[i]);
  o << fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", (left + W - right) / 2, H - 12,
                   escape(x_label + (log_y ? "   (bar height: log count)" : "")));
  o << "</svg>\n";
  write_file(path, o.str());
}

}  // namespace svg
}  // namespace heed::report
