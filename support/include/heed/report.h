// heed/report.h — what training programs show: a progress line, a JSON-lines metrics log
// and SVG pictures (loss curves, attention heatmaps, histograms), with no dependencies.
//
// Invariants: on a terminal the progress line redraws in place (carriage return); when the
// output is not a terminal, plain lines are printed every `plain_every` steps. SVG files
// and logs are written atomically enough for tools to read at any time (whole-file writes
// for SVG, one flushed line per record for the log).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace heed::report {

struct ProgressState {
  int64_t step = 0, total = 0;
  double loss = 0.0, lr = 0.0, grad_norm = 0.0;
  double tokens_per_second = 0.0;
  std::string extra;  // e.g. "val 1.92"
};

class Progress {
 public:
  // plain_every: the step interval for plain (non-terminal) output.
  explicit Progress(int64_t plain_every = 50, std::FILE* out = stdout);
  void update(const ProgressState& state);
  // Ends a redrawn line before other output.
  void finish_line();
  bool is_terminal() const { return terminal_; }

 private:
  std::FILE* out_;
  bool terminal_;
  int64_t plain_every_;
  double start_seconds_;
  bool line_open_ = false;
};

// Appends one JSON object per line to a file (created or truncated on open).
class MetricsLog {
 public:
  MetricsLog() = default;
  explicit MetricsLog(const std::string& path, bool append = false);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  bool is_open() const { return file_ != nullptr; }
  void write(const nlohmann::json& record);

 private:
  std::FILE* file_ = nullptr;
};

namespace svg {

struct Series {
  Series() = default;
  Series(std::string name_, std::vector<double> x_, std::vector<double> y_, std::vector<double> band_lo_ = {},
         std::vector<double> band_hi_ = {})
      : name(std::move(name_)),
        x(std::move(x_)),
        y(std::move(y_)),
        band_lo(std::move(band_lo_)),
        band_hi(std::move(band_hi_)) {}
  std::string name;
  std::vector<double> x, y;
  // Optional shaded band around the line (e.g. the spread over seeds): empty, or one lower and
  // one upper value per x.
  std::vector<double> band_lo, band_hi;
};

// Axis ticks a reader can take in at a glance: positions at multiples of 1, 2 or 5 x 10^k
// inside [lo, hi] (about `target` of them), labelled with as few digits as the step needs and
// k / M for thousands and millions ("1.2k", "250", "0.05"); on a log axis, the powers of ten
// in range when there are at least two ("0.01", "1", "100", "10k").
struct AxisTicks {
  std::vector<double> at;  // positions (log10 of the value on a log axis)
  std::vector<std::string> labels;
};
AxisTicks axis_ticks(double lo, double hi, int target = 5);
AxisTicks log_axis_ticks(double log10_lo, double log10_hi, int target = 5);
// One value with 3 significant digits and the same k / M suffixes ("1.22k", "0.0123").
std::string format_value(double v);

// A line chart of one or more series (non-finite points are skipped), each with its band shaded
// in the line's colour where it has one.
void line_chart(const std::string& path, const std::string& title, const std::vector<Series>& series,
                const std::string& x_label, const std::string& y_label, bool log_y = false);

// A heatmap of values (rows x cols, row-major) in [0, max], with labels along the axes.
void heatmap(const std::string& path, const std::string& title, const std::vector<double>& values, int64_t rows,
             int64_t cols, const std::vector<std::string>& row_labels, const std::vector<std::string>& col_labels);

// A grid of heatmaps (e.g. one per attention head), each with its own title.
struct Panel {
  std::string title;
  std::vector<double> values;
  int64_t rows = 0, cols = 0;
};
void heatmap_grid(const std::string& path, const std::string& title, const std::vector<Panel>& panels,
                  const std::vector<std::string>& row_labels, const std::vector<std::string>& col_labels,
                  int columns = 4);

// A bar histogram with bin edges (edges.size() == counts.size() + 1).
void histogram(const std::string& path, const std::string& title, const std::vector<double>& edges,
               const std::vector<double>& counts, const std::string& x_label, bool log_y = false);

std::string escape(const std::string& text);

}  // namespace svg
}  // namespace heed::report
