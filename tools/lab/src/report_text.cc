#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "bulwark/lab/duration.h"
#include "bulwark/lab/input_error.h"
#include "bulwark/lab/report.h"

namespace bulwark::lab {

std::string group_thousands(std::uint64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string format_clock(Nanos t) {
  const auto total_ms = std::chrono::duration_cast<std::chrono::milliseconds>(t).count();
  const long long s = total_ms / 1000, ms = total_ms % 1000;
  char buf[48];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  }
  std::string out = buf;
  if (ms != 0) {
    std::snprintf(buf, sizeof buf, ".%03lld", ms);
    out += buf;
  }
  return out;
}

// Rounded to the precision shown, then the unit picked, so 999.6 ms is "1.00s", not
// "1000ms".
std::string format_readable(Nanos d) {
  const double s = std::chrono::duration<double>(d).count();
  char buf[48];
  if (const long long ms = std::llround(s * 1000); ms < 1000) {
    std::snprintf(buf, sizeof buf, "%lldms", ms);
  } else if (std::llround(s * 100) < 1000) {
    std::snprintf(buf, sizeof buf, "%.2fs", s);
  } else if (std::llround(s * 10) < 1200) {
    std::snprintf(buf, sizeof buf, "%.1fs", s);
  } else {
    const long long whole = std::llround(s);
    std::snprintf(buf, sizeof buf, "%lldmin %llds", whole / 60, whole % 60);
  }
  return buf;
}

namespace {

std::string pad_left(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}
std::string pad_right(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * fraction);
  return buf;
}

std::string state_name(const std::optional<State>& s) {
  if (!s) return "-";
  switch (*s) {
    case State::closed:
      return "closed";
    case State::open:
      return "OPEN";
    case State::half_open:
      return "half-open";
    case State::forced_open:
      return "FORCED";
    case State::disabled:
      return "disabled";
    case State::metrics_only:
      return "metrics";
  }
  return "?";
}

// Names and descriptions come from the user's files and reach a terminal: every one
// goes through printable(), so an ESC is shown as \x1b and never obeyed.
void write_scenario(std::ostream& out, const Scenario& s) {
  out << "bulwark simulate: " << (s.name.empty() ? "(unnamed scenario)" : printable(s.name))
      << "  [" << printable(s.source) << "]\n";
  if (!s.description.empty()) out << "  " << printable(s.description) << "\n";
  char rate[32];
  std::snprintf(rate, sizeof rate, "%g", s.arrivals.rate);
  out << "  " << format_duration(s.duration) << " of " << to_string(s.arrivals.process)
      << " arrivals at " << rate << "/s (seed " << s.seed
      << "); caller: " << group_thousands(s.caller.workers) << " workers";
  if (s.caller.work > Nanos::zero())
    out << ", " << format_duration(s.caller.work) << " of own work per page";
  out << "\n";
  std::string label = "  ";  // appended, not concatenated: GCC 12 misreads a + here
  label += printable(s.dependency.name);
  label += ": ";
  const std::optional<Server>& server = s.dependency.server;
  if (server) {
    out << label << "a server of " << group_thousands(server->workers) << " workers and a queue of "
        << group_thousands(server->queue) << " (beyond it, refused)\n";
  }
  for (std::size_t i = 0; i < s.dependency.phases.size(); ++i) {
    const Phase& p = s.dependency.phases[i];
    out << (i == 0 && !server ? label : std::string(label.size(), ' ')) << "from "
        << pad_right(format_clock(p.start), 6) << printable(p.name) << ": ";
    if (server) {
      out << group_thousands(p.workers.value_or(server->workers)) << " workers, service time ";
    }
    out << describe(p.latency) << ", " << percent(p.error_rate) << " errors";
    if (p.arrival_rate) {
      char phase_rate[32];
      std::snprintf(phase_rate, sizeof phase_rate, "%g", *p.arrival_rate);
      out << ", arrivals at " << phase_rate << "/s";
    }
    out << (p.degraded ? "  [degraded]" : "") << "\n";
  }
  out << "\n";
}

// The configurations' LoadGoals, one line each (full goodput: in every timeline step
// from then on, 95 % of the pages done were served fully).
void write_load_goals(std::ostream& out, const SimulationResult& r) {
  bool first = true;
  for (std::size_t i = 0; i < r.configurations.size(); ++i) {
    const ConfigurationResult& c = r.configurations[i];
    if (!c.goal_met) continue;
    const std::optional<LoadGoal>& goal = r.scenario.configurations[i].goal;
    if (!goal) continue;
    if (first) out << "\n";
    first = false;
    const bool met = goal->overloaded_to_end
                         ? !c.recovered_after
                         : c.recovered_after && *c.recovered_after <= *goal->recover_within;
    const std::string after =
        c.recovered_after ? "back after " + format_readable(*c.recovered_after) : "never back";
    if (goal->limit_settles_near) {
      const double target = *goal->limit_settles_near;
      const bool near = c.limit_settled && std::abs(*c.limit_settled - target) <= 0.3 * target;
      char buf[160];
      std::snprintf(buf, sizeof buf, "%.1f", c.limit_settled.value_or(0));
      if (first) out << "\n";
      first = false;
      out << "  goal: " << printable(c.name) << "'s adaptive limit settles within 30% of "
          << *goal->limit_settles_near << " before any trigger: "
          << (c.limit_settled ? std::string(buf) : std::string("no steps to tell")) << " -- "
          << (near ? "met" : "MISSED") << "\n";
      if (!goal->overloaded_to_end && !goal->recover_within) continue;
    }
    if (goal->overloaded_to_end) {
      out << "  goal: " << printable(c.name)
          << " stays overloaded to the end once the trigger is over (the metastable failure): "
          << after;
    } else {
      out << "  goal: " << printable(c.name) << " back to full goodput within "
          << format_readable(*goal->recover_within) << " of the trigger's end: " << after;
    }
    out << " -- " << (met ? "met" : "MISSED") << "\n";
  }
}

constexpr std::size_t kCol = 6;
constexpr std::size_t kStateCol = 10;

void write_timeline(std::ostream& out, const SimulationResult& r) {
  const auto& configs = r.configurations;
  if (configs.empty()) return;
  out << "Timeline, one row per " << format_duration(r.timeline_step)
      << " (in-flt: peak calls in flight to " << printable(r.scenario.dependency.name)
      << "; busy: peak caller workers busy;\n"
         "  full/degr/fail: pages done with the answer / by the fallback / with an error; "
         "lost: requests\n"
         "  that found no free worker; breaker: its state at the end of the row)\n\n";
  const std::size_t block = 6 * kCol + 1 + kStateCol + 2;
  std::string head1 = pad_left("", 8), head2 = pad_left("time", 8);
  for (const auto& c : configs) {
    std::string name = " ";
    name += printable(c.name);
    if (name.size() > block) {  // cut at a character boundary
      std::size_t cut = block;
      while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;
      name.resize(cut);
    }
    head1 += " |" + pad_right(name, block);
    head2 += " |" + pad_left("in-flt", kCol + 1) + pad_left("busy", kCol) + pad_left("full", kCol) +
             pad_left("degr", kCol) + pad_left("fail", kCol) + pad_left("lost", kCol) + "  " +
             pad_right("breaker", kStateCol);
  }
  for (std::string* h : {&head1, &head2}) {
    while (!h->empty() && h->back() == ' ') h->pop_back();
  }
  out << head1 << "\n" << head2 << "\n";
  const std::size_t rows = configs.front().timeline.size();
  for (std::size_t i = 0; i < rows; ++i) {
    std::string line = pad_left(format_clock(configs.front().timeline[i].start), 8);
    for (const auto& c : configs) {
      if (i >= c.timeline.size()) continue;
      const TimelineStep& t = c.timeline[i];
      line += " |" + pad_left(std::to_string(t.peak_in_flight), kCol + 1) +
              pad_left(std::to_string(t.peak_busy), kCol) + pad_left(std::to_string(t.full), kCol) +
              pad_left(std::to_string(t.degraded), kCol) +
              pad_left(std::to_string(t.failed), kCol) + pad_left(std::to_string(t.lost), kCol) +
              "  " + pad_right(c.has_breaker ? state_name(t.state) : "-", kStateCol);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
  out << "\n";
}

void write_summary(std::ostream& out, const SimulationResult& r) {
  const auto& configs = r.configurations;
  const std::string dep = printable(r.scenario.dependency.name);
  std::vector<std::pair<std::string, std::vector<std::string>>> rows;
  auto row = [&](std::string label, auto cell) {
    std::vector<std::string> cells;
    for (const auto& c : configs) cells.push_back(cell(c));
    rows.emplace_back(std::move(label), std::move(cells));
  };
  auto share = [](std::uint64_t n, std::uint64_t of) {
    if (n == 0 || of == 0) return group_thousands(n);
    return group_thousands(n) + " (" + percent(static_cast<double>(n) / static_cast<double>(of)) +
           ")";
  };
  const bool any_breaker =
      std::any_of(configs.begin(), configs.end(), [](const auto& c) { return c.has_breaker; });

  row("requests", [](const auto& c) { return group_thousands(c.requests); });
  row("lost to caller saturation", [&](const auto& c) { return share(c.lost, c.requests); });
  row("pages served fully", [&](const auto& c) { return share(c.served_full, c.requests); });
  row("pages served degraded (fallback)",
      [&](const auto& c) { return share(c.served_degraded, c.requests); });
  row("pages failed", [&](const auto& c) { return share(c.failed, c.requests); });
  row("peak calls in flight to " + dep,
      [](const auto& c) { return group_thousands(c.peak_in_flight); });
  row("peak caller workers busy", [&](const auto& c) {
    return group_thousands(c.peak_busy) + " / " + group_thousands(r.scenario.caller.workers);
  });
  row("calls to " + dep, [](const auto& c) { return group_thousands(c.calls); });
  if (r.scenario.degraded_from()) {
    row("calls to " + dep + " while degraded",
        [](const auto& c) { return group_thousands(c.calls_while_degraded); });
  }
  if (std::any_of(configs.begin(), configs.end(), [](const auto& c) { return c.retries > 0; })) {
    row("retries", [](const auto& c) { return group_thousands(c.retries); });
  }
  if (any_breaker) {
    if (r.scenario.degraded_from()) {
      row("time from degradation to breaker open", [](const auto& c) -> std::string {
        if (!c.has_breaker) return "-";
        return c.time_to_open ? format_readable(*c.time_to_open) : "never";
      });
    }
    row("breaker openings", [](const auto& c) -> std::string {
      return c.has_breaker ? group_thousands(c.opens) : "-";
    });
    row("longest time away from closed", [](const auto& c) -> std::string {
      return c.has_breaker ? format_readable(c.longest_open) : "-";
    });
    if (std::any_of(configs.begin(), configs.end(),
                    [](const auto& c) { return c.alert_when_open_for.has_value(); })) {
      row("open-too-long alert", [&](const auto& c) -> std::string {
        if (!c.alert_when_open_for) return "-";
        return c.alert_at ? "fired at " + format_clock(*c.alert_at) : "not fired";
      });
    }
  }
  row("page latency p50", [](const auto& c) { return format_readable(c.p50); });
  row("page latency p99", [](const auto& c) { return format_readable(c.p99); });
  if (std::any_of(configs.begin(), configs.end(),
                  [](const auto& c) { return c.limit_lowest.has_value(); })) {
    row("adaptive limit, settled before any trigger", [](const auto& c) -> std::string {
      if (!c.limit_settled) return "-";
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.1f", *c.limit_settled);
      return buf;
    });
    row("adaptive limit, lowest", [](const auto& c) -> std::string {
      return c.limit_lowest ? group_thousands(*c.limit_lowest) : "-";
    });
  }
  if (r.scenario.dependency.server) {
    const double seconds = std::chrono::duration<double>(r.scenario.duration).count();
    row("goodput (pages served fully per s)", [&](const auto& c) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(c.served_full) / seconds);
      return std::string(buf);
    });
    row("p99 latency of pages served fully",
        [](const auto& c) { return format_readable(c.success_p99); });
    row("calls refused by " + dep + " (queue full)",
        [](const auto& c) { return group_thousands(c.refused); });
    if (std::any_of(configs.begin(), configs.end(), [](const auto& c) { return c.shed > 0; })) {
      row("calls refused by its load shedder (503)",
          [](const auto& c) { return group_thousands(c.shed); });
    }
    row("calls " + dep + " served after the caller gave up",
        [](const auto& c) { return group_thousands(c.wasted); });
    row("peak calls queued at " + dep,
        [](const auto& c) { return group_thousands(c.peak_queued); });
    if (r.scenario.degraded_from()) {
      row("back to full goodput after the trigger", [](const auto& c) -> std::string {
        return c.recovered_after ? "after " + format_readable(*c.recovered_after) : "never";
      });
    }
  }
  for (int k = 0; k < kReasonCount; ++k) {
    const auto reason = static_cast<Reason>(k);
    if (std::none_of(configs.begin(), configs.end(),
                     [&](const auto& c) { return c.reasons[static_cast<std::size_t>(k)] > 0; })) {
      continue;
    }
    row("  pages without the answer: " + std::string(to_string(reason)),
        [&](const auto& c) { return group_thousands(c.reasons[static_cast<std::size_t>(k)]); });
  }

  std::size_t label_width = 0;
  for (const auto& [label, cells] : rows) label_width = std::max(label_width, label.size());
  std::vector<std::string> names;
  for (const auto& c : configs) names.push_back(printable(c.name));
  std::vector<std::size_t> widths;
  for (std::size_t j = 0; j < configs.size(); ++j) {
    std::size_t w = names[j].size();
    for (const auto& [label, cells] : rows) w = std::max(w, cells[j].size());
    widths.push_back(w + 3);
  }
  std::string head = pad_right("Summary", label_width + 2);
  for (std::size_t j = 0; j < configs.size(); ++j) head += pad_left(names[j], widths[j]);
  out << head << "\n";
  for (const auto& [label, cells] : rows) {
    std::string line = pad_right("  " + label, label_width + 2);
    for (std::size_t j = 0; j < cells.size(); ++j) line += pad_left(cells[j], widths[j]);
    out << line << "\n";
  }
  write_load_goals(out, r);
}

}  // namespace

void write_text(std::ostream& out, const SimulationResult& result, const TextOptions& options) {
  write_scenario(out, result.scenario);
  if (options.timeline) write_timeline(out, result);
  write_summary(out, result);
}

}  // namespace bulwark::lab
