// The fleet's summaries and reports (fleet.h): built with or without bulwark::redis.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "bulwark/lab/duration.h"
#include "bulwark/lab/fleet.h"
#include "bulwark/lab/input_error.h"
#include "bulwark/lab/report.h"
#include "fleet_summary.h"
#include "xml_text.h"

namespace bulwark::lab {

namespace detail {

FleetRun summarize_fleet_run(std::string name, const std::vector<ConfigurationResult>& instances) {
  FleetRun run;
  run.name = std::move(name);
  run.instances = static_cast<std::uint32_t>(instances.size());
  ConfigurationResult& t = run.total;
  t.name = run.name;
  for (const ConfigurationResult& c : instances) {
    t.requests += c.requests;
    t.lost += c.lost;
    t.served_full += c.served_full;
    t.served_degraded += c.served_degraded;
    t.failed += c.failed;
    t.calls += c.calls;
    t.calls_while_degraded += c.calls_while_degraded;
    t.retries += c.retries;
    t.opens += c.opens;
    t.has_breaker = t.has_breaker || c.has_breaker;
    for (std::size_t i = 0; i < t.reasons.size(); ++i) t.reasons[i] += c.reasons[i];
    run.time_to_open.push_back(c.time_to_open);
  }
  std::vector<Nanos> opened;
  for (const auto& o : run.time_to_open) {
    if (o) opened.push_back(*o);
  }
  std::sort(opened.begin(), opened.end());
  run.never_opened = static_cast<std::uint32_t>(run.instances - opened.size());
  if (!opened.empty()) run.first_open = opened.front();
  if (run.never_opened == 0 && !opened.empty()) run.last_open = opened.back();
  // Never opening counts as later than any opening.
  if (const std::size_t mid = (run.instances - 1) / 2; run.instances > 0 && mid < opened.size()) {
    run.median_open = opened[mid];
  }
  return run;
}

FleetGoals fleet_goals(const FleetConfigurationResult& r, const FleetSpec& spec) {
  FleetGoals g;
  const auto shared = static_cast<double>(r.shared.total.calls_while_degraded);
  const auto isolated = static_cast<double>(r.isolated.total.calls_while_degraded);
  const auto single = static_cast<double>(r.single.total.calls_while_degraded);
  constexpr double inf = std::numeric_limits<double>::infinity();
  g.isolated_over_shared = shared > 0 ? isolated / shared : (isolated > 0 ? inf : 1);
  g.shared_over_single = single > 0 ? shared / single : (shared > 0 ? inf : 1);
  g.fewer_than_isolated = g.isolated_over_shared >= 5;
  g.near_single = g.shared_over_single <= 1.5;
  g.open_spread_limit = spec.sync_interval + spec.store_latency;
  if (r.shared.first_open && r.shared.last_open) {
    g.open_spread = *r.shared.last_open - *r.shared.first_open;
    g.open_together = *g.open_spread <= g.open_spread_limit;
  }
  return g;
}

}  // namespace detail

namespace {

std::string pad_left(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}
std::string pad_right(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}
std::string maybe(const std::optional<Nanos>& d) { return d ? format_readable(*d) : "never"; }
std::string fixed(double v, int digits) {
  if (!std::isfinite(v)) return "inf";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}
std::string yes_no(bool met) { return met ? "met" : "NOT met"; }

// Writes `head` and `rows` as columns, each `indent` deep: the first left-aligned, the
// others right-aligned, every column as wide as its widest cell.
void write_columns(std::ostream& out, std::string_view indent, const std::vector<std::string>& head,
                   const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width(head.size());
  for (std::size_t i = 0; i < head.size(); ++i) {
    width[i] = head[i].size();
    for (const auto& row : rows) width[i] = std::max(width[i], row[i].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    out << indent << pad_right(cells[0], width[0]);
    for (std::size_t i = 1; i < cells.size(); ++i) out << "  " << pad_left(cells[i], width[i]);
    out << "\n";
  };
  line(head);
  for (const auto& row : rows) line(row);
}

// The shared run's store, per node, and its failover: only for a sharded store or a
// failover (a scenario without them prints what it always did).
void write_nodes(std::ostream& out, const FleetRun& r, const Scenario& s) {
  const FleetSpec& f = *s.fleet;
  if (f.nodes == 1 && f.groups == 1 && !r.failover) return;
  out << "  shared store, per node (each exchange asks every group; the key is in one):\n";
  const std::vector<std::string> head = {"node",       "groups",  "round trip", "exchanges/s",
                                         "scripts/s",  "reads/s", "Redis CPU",  "ops/s",
                                         "unanswered", "ops lost"};
  std::vector<std::vector<std::string>> rows;
  for (const FleetNodeLoad& n : r.nodes) {
    rows.push_back(
        {std::to_string(n.node) + (n.holds_key ? " (key)" : ""), std::to_string(n.groups),
         format_readable(n.latency), fixed(n.exchanges_per_second, 0),
         fixed(n.scripts_per_second, 0), fixed(n.reads_per_second, 0), fixed(n.cpu, 2) + " cores",
         fixed(n.ops_per_second, 1), group_thousands(n.unanswered), group_thousands(n.lost_ops)});
  }
  write_columns(out, "    ", head, rows);
  out << "    (a group's call: the script when it has ops, news, a new incarnation or connection, "
         "or its heartbeat due, else the cheap read; Redis CPU: "
      << fixed(std::chrono::duration<double, std::milli>(kScriptCost).count(), 2)
      << " ms a script + " << fixed(std::chrono::duration<double, std::milli>(kReadCost).count(), 2)
      << " ms a sync with reads, measured (docs/performance.md), per-key work left out)\n";
  if (!r.failover || !f.failover) return;
  const FleetFailoverOutcome& o = *r.failover;
  const auto open = [](bool b) { return b ? "open" : "not open"; };
  out << "  failover of node " << f.failover->node
      << (o.key_on_node ? " (holding the key)" : " (not holding the key)") << ": "
      << group_thousands(o.unanswered) << " calls unanswered, " << group_thousands(o.lost_ops)
      << " ops lost and sent again; the key " << open(o.key_open_at_failure) << " when it failed, "
      << open(o.key_open_at_takeover) << " at the takeover";
  if (o.key_open_at_failure && !o.key_open_at_takeover) {
    out << ", "
        << (o.key_reopened_after
                ? "open again " + format_readable(*o.key_reopened_after) + " after it"
                : std::string("never open again"));
  }
  out << "; instances not closed: " << group_thousands(o.not_closed_at_failure)
      << " at the failure, " << group_thousands(o.not_closed_at_takeover) << " at the takeover, "
      << group_thousands(o.not_closed_settled) << " a sync interval later\n";
}

}  // namespace

void write_fleet_text(std::ostream& out, const FleetSimulationResult& result) {
  const Scenario& s = result.scenario;
  const FleetSpec& f = *s.fleet;
  out << "bulwark simulate: " << printable(s.name) << "  [" << printable(s.source) << "]\n";
  if (!s.description.empty()) out << "  " << printable(s.description) << "\n";
  out << "  " << format_duration(s.duration) << " of " << to_string(s.arrivals.process)
      << " arrivals at " << fixed(s.arrivals.rate, 0) << "/s in all (seed " << s.seed << "), over "
      << group_thousands(f.instances) << " instances at " << fixed(s.arrivals.rate / f.instances, 2)
      << "/s each\n";
  out << "  store: sync every " << format_duration(f.sync_interval) << " (phases spread)"
      << (f.sync_on_open ? " and at once on a local opening" : "") << ", round trip "
      << format_duration(f.store_latency) << ", quorum " << f.quorum << ", lease "
      << (f.lease_duration > Nanos::zero() ? format_duration(f.lease_duration)
                                           : std::string("derived per key"))
      << (f.fleet_window ? ", fleet windows (rate rules on every instance's counts)" : "");
  if (f.nodes > 1 || f.groups > 1) {
    out << ", " << f.groups << " groups on " << f.nodes << (f.nodes == 1 ? " node" : " nodes");
  }
  if (!f.outages.empty()) {
    out << ", down";
    for (std::size_t i = 0; i < f.outages.size(); ++i) {
      out << (i ? "," : "") << " " << format_clock(f.outages[i].start) << "-"
          << format_clock(f.outages[i].end);
    }
  }
  out << "\n";
  if (f.failover) {
    out << "  failover: node " << f.failover->node << " answers nothing from "
        << format_clock(f.failover->at) << " for " << format_duration(f.failover->down)
        << ", then its replica takes over "
        << (f.failover->replica_kept ? "with its data" : "empty (its groups' data lost)") << "\n";
  }
  if (const auto from = s.degraded_from()) {
    out << "  " << printable(s.dependency.name) << " degraded from " << format_clock(*from)
        << " to " << format_clock(s.degraded_until()) << "\n";
  }
  for (const FleetConfigurationResult& c : result.configurations) {
    out << "\nConfiguration " << printable(c.configuration)
        << " (per instance: its breaker, bulkhead and workers)\n";
    const std::vector<std::string> head = {
        "run",  "instances",      "calls while degraded", "open: first", "median",
        "last", "pages degraded", "store exchanges/s",    "store ops/s"};
    std::vector<std::vector<std::string>> rows;
    for (const FleetRun* r : {&c.single, &c.isolated, &c.shared}) {
      const bool shared = r == &c.shared;
      std::string last = maybe(r->last_open);
      if (!r->last_open && r->never_opened < r->instances) {
        last = "never (" + group_thousands(r->never_opened) + ")";
      }
      rows.push_back({r->name, group_thousands(r->instances),
                      group_thousands(r->total.calls_while_degraded), maybe(r->first_open),
                      maybe(r->median_open), last, group_thousands(r->total.served_degraded),
                      shared ? fixed(r->store_exchanges_per_second, 0) : "-",
                      shared ? fixed(r->store_ops_per_second, 1) : "-"});
    }
    write_columns(out, "  ", head, rows);
    write_nodes(out, c.shared, result.scenario);
    if (c.shared.sync_errors > 0) {
      out << "  shared: " << group_thousands(c.shared.sync_errors) << " of "
          << group_thousands(c.shared.store_exchanges)
          << " exchanges failed (the store was down); the instances carried on alone\n";
    }
    const FleetGoals& g = c.goals;
    out << "  goal: sharing sends at least 5x fewer calls while degraded than isolated: "
        << fixed(g.isolated_over_shared, 2) << "x, " << yes_no(g.fewer_than_isolated) << "\n";
    out << "  goal: at most 1.5x the single instance's: " << fixed(g.shared_over_single, 2) << "x, "
        << yes_no(g.near_single) << "\n";
    out << "  goal: the whole fleet open within one sync interval (+ round trip, "
        << format_readable(g.open_spread_limit) << ") of the first: "
        << (g.open_spread ? format_readable(*g.open_spread)
                          : std::string("not every instance opened"))
        << ", " << yes_no(g.open_together) << "\n";
  }
}

namespace {

using Json = nlohmann::ordered_json;

Json ms(const std::optional<Nanos>& d) {
  if (!d) return nullptr;
  return std::chrono::duration<double, std::milli>(*d).count();
}
Json ratio(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

// sharded: the scenario has nodes, groups or a failover (else the output is as it was).
Json run_json(const FleetRun& r, bool sharded) {
  Json j;
  j["name"] = r.name;
  j["instances"] = r.instances;
  j["requests"] = r.total.requests;
  j["lost"] = r.total.lost;
  j["served_full"] = r.total.served_full;
  j["served_degraded"] = r.total.served_degraded;
  j["failed"] = r.total.failed;
  j["calls"] = r.total.calls;
  j["calls_while_degraded"] = r.total.calls_while_degraded;
  j["opens"] = r.total.opens;
  j["time_to_open_first_ms"] = ms(r.first_open);
  j["time_to_open_median_ms"] = ms(r.median_open);
  j["time_to_open_last_ms"] = ms(r.last_open);
  j["never_opened"] = r.never_opened;
  Json each = Json::array();
  for (const auto& t : r.time_to_open) each.push_back(ms(t));
  j["time_to_open_ms"] = each;
  j["store_exchanges"] = r.store_exchanges;
  j["store_ops"] = r.store_ops;
  j["sync_errors"] = r.sync_errors;
  j["store_exchanges_per_second"] = r.store_exchanges_per_second;
  j["store_ops_per_second"] = r.store_ops_per_second;
  if (sharded && !r.nodes.empty()) {
    Json nodes = Json::array();
    for (const FleetNodeLoad& n : r.nodes) {
      nodes.push_back({{"node", n.node},
                       {"groups", n.groups},
                       {"latency_ms", ms(n.latency)},
                       {"holds_key", n.holds_key},
                       {"exchanges", n.exchanges},
                       {"calls", n.calls},
                       {"scripts", n.scripts},
                       {"reads", n.reads},
                       {"read_exchanges", n.read_exchanges},
                       {"ops", n.ops},
                       {"unanswered", n.unanswered},
                       {"lost_ops", n.lost_ops},
                       {"exchanges_per_second", n.exchanges_per_second},
                       {"calls_per_second", n.calls_per_second},
                       {"scripts_per_second", n.scripts_per_second},
                       {"reads_per_second", n.reads_per_second},
                       {"redis_cpu_cores", n.cpu},
                       {"ops_per_second", n.ops_per_second}});
    }
    j["nodes"] = nodes;
  }
  if (r.failover) {
    const FleetFailoverOutcome& o = *r.failover;
    j["failover"] = {{"key_on_node", o.key_on_node},
                     {"key_open_at_failure", o.key_open_at_failure},
                     {"key_open_at_takeover", o.key_open_at_takeover},
                     {"key_open_settled", o.key_open_settled},
                     {"key_reopened_after_ms", ms(o.key_reopened_after)},
                     {"not_closed_at_failure", o.not_closed_at_failure},
                     {"not_closed_at_takeover", o.not_closed_at_takeover},
                     {"not_closed_settled", o.not_closed_settled},
                     {"unanswered", o.unanswered},
                     {"lost_ops", o.lost_ops}};
  }
  return j;
}

}  // namespace

std::string fleet_to_json(const FleetSimulationResult& result) {
  const Scenario& s = result.scenario;
  const FleetSpec& f = *s.fleet;
  Json j;
  j["scenario"] = {{"name", printable(s.name)},
                   {"source", printable(s.source)},
                   {"duration_ms", ms(s.duration)},
                   {"seed", s.seed},
                   {"rate", s.arrivals.rate}};
  Json outages = Json::array();
  for (const StoreOutage& o : f.outages) {
    outages.push_back({{"start_ms", ms(o.start)}, {"end_ms", ms(o.end)}});
  }
  j["fleet"] = {{"instances", f.instances},
                {"sync_interval_ms", ms(f.sync_interval)},
                {"store_latency_ms", ms(f.store_latency)},
                {"quorum", f.quorum},
                {"quorum_window_ms", ms(f.quorum_window)},
                {"lease_duration_ms", ms(f.lease_duration)},
                {"sync_on_open", f.sync_on_open},
                {"fleet_window", f.fleet_window},
                {"outages", outages}};
  if (f.nodes > 1 || f.groups > 1 || f.failover) {
    Json latencies = Json::array();
    for (const Nanos l : f.node_latency) latencies.push_back(ms(l));
    j["fleet"]["nodes"] = f.nodes;
    j["fleet"]["groups"] = f.groups;
    j["fleet"]["node_latency_ms"] = latencies;
    if (f.failover) {
      j["fleet"]["failover"] = {{"node", f.failover->node},
                                {"at_ms", ms(f.failover->at)},
                                {"down_ms", ms(f.failover->down)},
                                {"replica", f.failover->replica_kept ? "kept" : "lost"}};
    }
  }
  Json configs = Json::array();
  for (const FleetConfigurationResult& c : result.configurations) {
    Json cj;
    cj["configuration"] = printable(c.configuration);
    const bool sharded = f.nodes > 1 || f.groups > 1 || f.failover;
    cj["runs"] = Json::array(
        {run_json(c.single, sharded), run_json(c.isolated, sharded), run_json(c.shared, sharded)});
    cj["goals"] = {{"isolated_over_shared", ratio(c.goals.isolated_over_shared)},
                   {"shared_over_single", ratio(c.goals.shared_over_single)},
                   {"open_spread_ms", ms(c.goals.open_spread)},
                   {"open_spread_limit_ms", ms(c.goals.open_spread_limit)},
                   {"fewer_than_isolated", c.goals.fewer_than_isolated},
                   {"near_single", c.goals.near_single},
                   {"open_together", c.goals.open_together}};
    configs.push_back(cj);
  }
  j["configurations"] = configs;
  return j.dump(2) + "\n";
}

std::string fleet_to_svg(const FleetSimulationResult& result) {
  // Per configuration, one panel: left, each run's times to open as the share of its
  // instances open by then (a cumulative curve); right, its calls while degraded.
  constexpr double kWidth = 900, kPanel = 260, kTop = 50;
  constexpr double kCurveX = 70, kCurveW = 480, kBarsX = 640, kBarsW = 220, kPlotH = 180;
  const char* colors[] = {"#4c72b0", "#c44e52", "#55a868"};
  const double height = kTop + kPanel * static_cast<double>(result.configurations.size()) + 10;
  std::ostringstream o;
  auto num = [](double v) { return fixed(v, 1); };
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(kWidth) << "\" height=\""
    << num(height) << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"20\" y=\"24\" font-size=\"15\">"
    << detail::xml_text(result.scenario.name + " (" +
                        std::to_string(result.scenario.fleet->instances) +
                        " instances): single, isolated and shared")
    << "</text>\n";
  double y0 = kTop;
  for (const FleetConfigurationResult& c : result.configurations) {
    const FleetRun* runs[] = {&c.single, &c.isolated, &c.shared};
    Nanos longest = std::chrono::seconds(1);
    std::uint64_t most = 1;
    for (const FleetRun* r : runs) {
      for (const auto& t : r->time_to_open) {
        if (t) longest = std::max(longest, *t);
      }
      most = std::max(most, r->total.calls_while_degraded);
    }
    const double span = std::chrono::duration<double>(longest).count() * 1.1;
    const double top = y0 + 30, bottom = top + kPlotH;
    o << "<text x=\"20\" y=\"" << num(y0 + 14) << "\">configuration "
      << detail::xml_text(c.configuration) << ": share of instances open, by time since the "
      << "degradation (s)</text>\n";
    o << "<line x1=\"" << num(kCurveX) << "\" y1=\"" << num(bottom) << "\" x2=\""
      << num(kCurveX + kCurveW) << "\" y2=\"" << num(bottom) << "\" stroke=\"#888\"/>\n";
    o << "<line x1=\"" << num(kCurveX) << "\" y1=\"" << num(top) << "\" x2=\"" << num(kCurveX)
      << "\" y2=\"" << num(bottom) << "\" stroke=\"#888\"/>\n";
    for (int k = 0; k <= 4; ++k) {
      const double x = kCurveX + kCurveW * k / 4.0;
      o << "<text x=\"" << num(x) << "\" y=\"" << num(bottom + 14) << "\" text-anchor=\"middle\">"
        << fixed(span * k / 4.0, 1) << "</text>\n";
    }
    o << "<text x=\"" << num(kCurveX - 6) << "\" y=\"" << num(top + 4)
      << "\" text-anchor=\"end\">100%</text>\n";
    o << "<text x=\"" << num(kCurveX - 6) << "\" y=\"" << num(bottom)
      << "\" text-anchor=\"end\">0%</text>\n";
    for (int ri = 0; ri < 3; ++ri) {
      const FleetRun& r = *runs[ri];
      std::vector<double> times;
      for (const auto& t : r.time_to_open) {
        if (t) times.push_back(std::chrono::duration<double>(*t).count());
      }
      std::sort(times.begin(), times.end());
      std::ostringstream points;
      points << num(kCurveX) << "," << num(bottom);
      const double n = std::max<double>(1, r.instances);
      for (std::size_t i = 0; i < times.size(); ++i) {
        const double x = kCurveX + kCurveW * times[i] / span;
        points << " " << num(x) << "," << num(bottom - kPlotH * static_cast<double>(i) / n);
        points << " " << num(x) << "," << num(bottom - kPlotH * static_cast<double>(i + 1) / n);
      }
      points << " " << num(kCurveX + kCurveW) << ","
             << num(bottom - kPlotH * static_cast<double>(times.size()) / n);
      o << "<polyline fill=\"none\" stroke=\"" << colors[ri] << "\" stroke-width=\"2\" points=\""
        << points.str() << "\"/>\n";
      o << "<text x=\"" << num(kCurveX + kCurveW - 120) << "\" y=\"" << num(bottom - 40 + 14 * ri)
        << "\" fill=\"" << colors[ri] << "\">" << detail::xml_text(r.name) << "</text>\n";
      // Calls while degraded.
      const double bw = kBarsW / 3 - 12;
      const double h =
          kPlotH * static_cast<double>(r.total.calls_while_degraded) / static_cast<double>(most);
      const double x = kBarsX + ri * (kBarsW / 3);
      o << "<rect x=\"" << num(x) << "\" y=\"" << num(bottom - h) << "\" width=\"" << num(bw)
        << "\" height=\"" << num(h) << "\" fill=\"" << colors[ri] << "\"/>\n";
      o << "<text x=\"" << num(x + bw / 2) << "\" y=\"" << num(bottom - h - 4)
        << "\" text-anchor=\"middle\">" << group_thousands(r.total.calls_while_degraded)
        << "</text>\n";
      o << "<text x=\"" << num(x + bw / 2) << "\" y=\"" << num(bottom + 14)
        << "\" text-anchor=\"middle\">" << detail::xml_text(r.name) << "</text>\n";
    }
    o << "<text x=\"" << num(kBarsX) << "\" y=\"" << num(y0 + 14)
      << "\">calls while degraded</text>\n";
    y0 += kPanel;
  }
  o << "</svg>\n";
  return o.str();
}

Scenario builtin_fleet_scenario() {
  return parse_scenario(builtin_fleet_scenario_toml(), "built-in fleet");
}

}  // namespace bulwark::lab
