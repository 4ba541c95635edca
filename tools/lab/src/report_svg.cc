#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "bulwark/lab/duration.h"
#include "bulwark/lab/input_error.h"
#include "bulwark/lab/report.h"
#include "xml_text.h"

namespace bulwark::lab {
namespace {

constexpr double kWidth = 1100;
constexpr double kLeft = 70;
constexpr double kRight = 24;
constexpr double kPlotWidth = kWidth - kLeft - kRight;
constexpr double kBand = 14;
constexpr double kLinesHeight = 150;
constexpr double kBarsHeight = 110;
constexpr double kGap = 26;
constexpr double kTop = 84;

const char* const kFull = "#4caf50";
const char* const kDegraded = "#f0b400";
const char* const kFailed = "#8e24aa";
const char* const kLost = "#37474f";
const char* const kBusy = "#1e63c4";
const char* const kInFlight = "#ff7f0e";

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  std::string s = buf;
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  return s;
}

// A round number >= v.
double nice_ceiling(double v) {
  if (v <= 1) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0}) {
    if (m * p >= v) return m * p;
  }
  return 10 * p;
}

// Tick spacing giving about 10 ticks over `total`.
Nanos tick_spacing(Nanos total) {
  using std::chrono::seconds;
  const Nanos choices[] = {
      seconds(1),        seconds(2),         seconds(5),        seconds(10),   seconds(15),
      seconds(30),       seconds(60),        seconds(120),      seconds(300),  seconds(600),
      seconds(900),      seconds(1800),      seconds(3600),     seconds(7200), seconds(3 * 3600),
      seconds(6 * 3600), seconds(12 * 3600), seconds(24 * 3600)};
  for (Nanos c : choices) {
    if (total / c <= 12) return c;
  }
  return seconds(24 * 3600) * (total / seconds(24 * 3600 * 12) + 1);
}

std::string state_color(State s) {
  switch (s) {
    case State::closed:
      return "#a5d6a7";
    case State::open:
    case State::forced_open:
      return "#e53935";
    case State::half_open:
      return "#ffb300";
    case State::disabled:
    case State::metrics_only:
      return "#b0bec5";
  }
  return "#b0bec5";
}

class Svg {
 public:
  Svg(const SimulationResult& r) : r_(r) {
    const double seconds = std::chrono::duration<double>(r.scenario.duration).count();
    x_scale_ = kPlotWidth / std::max(seconds, 1e-9);
    step_width_ = std::chrono::duration<double>(r.timeline_step).count() * x_scale_;
    double level = r.scenario.caller.workers;
    double pages = 1;
    for (const auto& c : r.configurations) {
      level = std::max<double>(level, c.peak_busy);
      level = std::max<double>(level, c.peak_in_flight);
      for (const auto& s : c.timeline) {
        pages =
            std::max<double>(pages, static_cast<double>(s.full + s.degraded + s.failed + s.lost));
      }
    }
    level_max_ = nice_ceiling(level * 1.05);
    pages_max_ = nice_ceiling(pages * 1.05);
  }

  std::string render() {
    const double panel = 22 + kBand + 8 + kLinesHeight + kGap + kBarsHeight + 34;
    const double height = kTop + panel * static_cast<double>(r_.configurations.size()) + 10;
    out_ << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(kWidth) << "\" height=\""
         << num(height) << "\" viewBox=\"0 0 " << num(kWidth) << " " << num(height)
         << "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n";
    out_ << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    const std::string title = r_.scenario.name.empty() ? "bulwark simulate" : r_.scenario.name;
    text(kLeft, 22, detail::xml_text(title), "font-size=\"16\" font-weight=\"bold\"");
    legend(42);
    double y = kTop;
    for (const auto& c : r_.configurations) {
      panel_for(c, y);
      y += panel;
    }
    out_ << "</svg>\n";
    return out_.str();
  }

 private:
  double x(Nanos t) const { return kLeft + std::chrono::duration<double>(t).count() * x_scale_; }

  void text(double tx, double ty, const std::string& s, const std::string& attrs = "") {
    out_ << "<text x=\"" << num(tx) << "\" y=\"" << num(ty) << "\" " << attrs << ">" << s
         << "</text>\n";
  }
  void rect(double rx, double ry, double w, double h, const std::string& fill,
            const std::string& attrs = "") {
    out_ << "<rect x=\"" << num(rx) << "\" y=\"" << num(ry) << "\" width=\""
         << num(std::max(w, 0.0)) << "\" height=\"" << num(std::max(h, 0.0)) << "\" fill=\"" << fill
         << "\" " << attrs << "/>\n";
  }
  void line(double x1, double y1, double x2, double y2, const std::string& attrs) {
    out_ << "<line x1=\"" << num(x1) << "\" y1=\"" << num(y1) << "\" x2=\"" << num(x2) << "\" y2=\""
         << num(y2) << "\" " << attrs << "/>\n";
  }

  void legend(double y) {
    double lx = kLeft;
    auto item = [&](const char* color, const std::string& label, bool is_line) {
      if (lx + 30 + 6.5 * static_cast<double>(label.size()) > kWidth - kRight) {
        lx = kLeft;  // next row
        y += 17;
      }
      if (is_line) {
        line(lx, y - 4, lx + 18, y - 4, std::string("stroke=\"") + color + "\" stroke-width=\"2\"");
      } else {
        rect(lx, y - 10, 12, 12, color);
      }
      text(lx + (is_line ? 22 : 16), y, detail::xml_text(label));
      lx += 30 + 6.5 * static_cast<double>(label.size());
    };
    item(kBusy, "caller workers busy", true);
    item(kInFlight, "calls in flight to " + r_.scenario.dependency.name, true);
    item(state_color(State::closed).c_str(), "breaker closed", false);
    item(state_color(State::open).c_str(), "open", false);
    item(state_color(State::half_open).c_str(), "half-open", false);
    item("#fdecea", r_.scenario.dependency.name + " degraded", false);
    lx = kWidth;  // pages on their own row
    item(kFull, "pages served fully", false);
    item(kDegraded, "served degraded (fallback)", false);
    item(kFailed, "failed", false);
    item(kLost, "requests lost (no free worker)", false);
  }

  void degraded_shade(double top, double h) {
    const auto from = r_.scenario.degraded_from();
    if (!from) return;
    rect(x(*from), top, x(r_.scenario.degraded_until()) - x(*from), h, "#fdecea");
  }

  void time_axis(double y) {
    line(kLeft, y, kLeft + kPlotWidth, y, "stroke=\"#555\"");
    const Nanos spacing = tick_spacing(r_.scenario.duration);
    for (Nanos t = Nanos::zero(); t <= r_.scenario.duration; t += spacing) {
      line(x(t), y, x(t), y + 4, "stroke=\"#555\"");
      text(x(t), y + 16, format_clock(t), "text-anchor=\"middle\" fill=\"#333\"");
    }
  }

  void value_axis(double top, double h, double max, const std::string& label) {
    line(kLeft, top, kLeft, top + h, "stroke=\"#555\"");
    for (double f : {0.0, 0.5, 1.0}) {
      const double ty = top + h - f * h;
      line(kLeft - 4, ty, kLeft, ty, "stroke=\"#555\"");
      if (f > 0) line(kLeft, ty, kLeft + kPlotWidth, ty, "stroke=\"#eee\"");
      text(kLeft - 7, ty + 4, group_thousands(static_cast<std::uint64_t>(f * max)),
           "text-anchor=\"end\" fill=\"#333\"");
    }
    text(14, top + h / 2, detail::xml_text(label),
         "text-anchor=\"middle\" fill=\"#333\" transform=\"rotate(-90 14 " + num(top + h / 2) +
             ")\"");
  }

  void state_band(const ConfigurationResult& c, double y) {
    if (!c.has_breaker) {
      rect(kLeft, y, kPlotWidth, kBand, "#eceff1");
      text(kLeft + 6, y + 11, "no breaker", "fill=\"#555\" font-size=\"10\"");
      return;
    }
    State state = State::closed;
    Nanos since = Nanos::zero();
    auto span = [&](Nanos until) {
      rect(x(since), y, x(until) - x(since), kBand, state_color(state));
    };
    for (const BreakerTransition& t : c.transitions) {
      span(t.at);
      state = t.to;
      since = t.at;
    }
    span(r_.scenario.duration);
    text(kLeft - 7, y + 11, "breaker", "text-anchor=\"end\" fill=\"#333\" font-size=\"10\"");
  }

  void levels(const ConfigurationResult& c, double top) {
    degraded_shade(top, kLinesHeight);
    if (const auto from = r_.scenario.degraded_from()) {
      text(x(*from) + 5, top + 13, detail::xml_text(r_.scenario.dependency.name + " degraded"),
           "fill=\"#c62828\" font-size=\"10\"");
    }
    value_axis(top, kLinesHeight, level_max_, "busy / in flight");
    const double capacity_y =
        top + kLinesHeight -
        static_cast<double>(r_.scenario.caller.workers) / level_max_ * kLinesHeight;
    line(kLeft, capacity_y, kLeft + kPlotWidth, capacity_y,
         "stroke=\"#888\" stroke-dasharray=\"5,4\"");
    text(kLeft + kPlotWidth - 4, capacity_y - 4,
         "caller capacity: " + group_thousands(r_.scenario.caller.workers) + " workers",
         "text-anchor=\"end\" fill=\"#666\" font-size=\"10\"");
    auto polyline = [&](auto value, const char* color, double width) {
      out_ << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"" << num(width)
           << "\" stroke-linejoin=\"round\" points=\"";
      step_edge(c, [&](const TimelineStep& s) {
        return top + kLinesHeight - static_cast<double>(value(s)) / level_max_ * kLinesHeight;
      });
      out_ << "\"/>\n";
    };
    // Busy >= in flight: the wider line underneath stays visible where they meet.
    polyline([](const TimelineStep& s) { return s.peak_busy; }, kBusy, 3.0);
    polyline([](const TimelineStep& s) { return s.peak_in_flight; }, kInFlight, 1.5);
  }

  void pages(const ConfigurationResult& c, double top) {
    degraded_shade(top, kBarsHeight);
    value_axis(top, kBarsHeight, pages_max_, "pages / step");
    // Stacked: full, degraded, failed, lost from the bottom up. Each layer is drawn as
    // the area under its cumulative top, largest first, so each polygon needs one edge.
    using Value = std::uint64_t (*)(const TimelineStep&);
    const Value layers[] = {
        [](const TimelineStep& s) { return s.full; },
        [](const TimelineStep& s) { return s.full + s.degraded; },
        [](const TimelineStep& s) { return s.full + s.degraded + s.failed; },
        [](const TimelineStep& s) { return s.full + s.degraded + s.failed + s.lost; },
    };
    const char* const colors[] = {kFull, kDegraded, kFailed, kLost};
    const double base = top + kBarsHeight;
    for (int k = 3; k >= 0; --k) {
      // A layer that adds nothing to the one below it is not drawn.
      bool adds = false;
      for (const TimelineStep& s : c.timeline) {
        adds = adds || layers[k](s) != (k == 0 ? 0 : layers[k - 1](s));
      }
      if (!adds) continue;
      out_ << "<polygon fill=\"" << colors[k] << "\" stroke=\"none\" points=\"" << num(kLeft) << ","
           << num(base) << " ";
      step_edge(c, [&](const TimelineStep& s) {
        return base - static_cast<double>(layers[k](s)) / pages_max_ * kBarsHeight;
      });
      out_ << num(x(c.timeline.back().start) + step_width_) << "," << num(base) << "\"/>\n";
    }
  }

  // The points of a step function over the timeline, left to right, with a point only
  // where the value changes (long flat stretches cost nothing).
  template <class Y>
  void step_edge(const ConfigurationResult& c, Y y) {
    double last = 0;
    for (std::size_t i = 0; i < c.timeline.size(); ++i) {
      const TimelineStep& s = c.timeline[i];
      const double py = y(s);
      if (i == 0 || py != last) {
        if (i > 0) out_ << num(x(s.start)) << "," << num(last) << " ";
        out_ << num(x(s.start)) << "," << num(py) << " ";
        last = py;
      }
    }
    if (!c.timeline.empty()) {
      out_ << num(x(c.timeline.back().start) + step_width_) << "," << num(last) << " ";
    }
  }

  void panel_for(const ConfigurationResult& c, double y) {
    std::string headline = c.name + ": lost " + group_thousands(c.lost) + ", degraded " +
                           group_thousands(c.served_degraded) + ", failed " +
                           group_thousands(c.failed) + ", peak in flight " +
                           group_thousands(c.peak_in_flight);
    if (c.time_to_open)
      headline += ", breaker open " + format_readable(*c.time_to_open) + " after the degradation";
    text(kLeft, y + 14, detail::xml_text(headline), "font-size=\"13\" font-weight=\"bold\"");
    const double band_y = y + 22;
    state_band(c, band_y);
    const double lines_top = band_y + kBand + 8;
    levels(c, lines_top);
    const double bars_top = lines_top + kLinesHeight + kGap;
    pages(c, bars_top);
    time_axis(bars_top + kBarsHeight);
  }

  const SimulationResult& r_;
  std::ostringstream out_;
  double x_scale_ = 1;
  double step_width_ = 1;
  double level_max_ = 1;
  double pages_max_ = 1;
};

}  // namespace

std::string to_svg(const SimulationResult& result) { return Svg(result).render(); }

}  // namespace bulwark::lab
