#include <nlohmann/json.hpp>
#include <string>

#include "bulwark/lab/report.h"

namespace bulwark::lab {
namespace {

using Json = nlohmann::ordered_json;

// Milliseconds, as an integer when whole (most are) and a fraction otherwise.
Json ms(Nanos d) {
  if (d.count() % 1'000'000 == 0) return d.count() / 1'000'000;
  return static_cast<double>(d.count()) / 1e6;
}
Json ms(const std::optional<Nanos>& d) { return d ? ms(*d) : Json(nullptr); }

Json state_json(const std::optional<State>& s) {
  return s ? Json(std::string(to_string(*s))) : Json(nullptr);
}

Json scenario_json(const Scenario& s) {
  Json phases = Json::array();
  for (const Phase& p : s.dependency.phases) {
    phases.push_back({{"name", p.name},
                      {"start_ms", ms(p.start)},
                      {"latency", describe(p.latency)},
                      {"error_rate", p.error_rate},
                      {"degraded", p.degraded}});
    if (p.workers) phases.back()["workers"] = *p.workers;
    if (p.arrival_rate) phases.back()["arrival_rate"] = *p.arrival_rate;
  }
  Json dependency = {{"name", s.dependency.name}, {"phases", phases}};
  if (s.dependency.server) {
    dependency["server"] = {{"workers", s.dependency.server->workers},
                            {"queue", s.dependency.server->queue},
                            {"service_time", describe(s.dependency.server->service_time)}};
  }
  return {{"name", s.name},
          {"description", s.description},
          {"source", s.source},
          {"duration_ms", ms(s.duration)},
          {"seed", s.seed},
          {"arrivals",
           {{"process", std::string(to_string(s.arrivals.process))}, {"rate", s.arrivals.rate}}},
          {"caller", {{"workers", s.caller.workers}, {"work_ms", ms(s.caller.work)}}},
          {"dependency", dependency},
          {"degraded_from_ms", ms(s.degraded_from())},
          {"degraded_until_ms", s.degraded_from() ? ms(s.degraded_until()) : Json(nullptr)}};
}

Json configuration_json(const ConfigurationResult& c, std::uint32_t workers, bool server) {
  Json reasons = Json::object();
  for (int k = 0; k < kReasonCount; ++k) {
    reasons[std::string(to_string(static_cast<Reason>(k)))] =
        c.reasons[static_cast<std::size_t>(k)];
  }
  Json summary = {{"requests", c.requests},
                  {"lost", c.lost},
                  {"served_full", c.served_full},
                  {"served_degraded", c.served_degraded},
                  {"failed", c.failed},
                  {"peak_in_flight", c.peak_in_flight},
                  {"peak_workers_busy", c.peak_busy},
                  {"workers", workers},
                  {"calls", c.calls},
                  {"calls_while_degraded", c.calls_while_degraded},
                  {"retries", c.retries},
                  {"p50_ms", ms(c.p50)},
                  {"p99_ms", ms(c.p99)},
                  {"max_ms", ms(c.max)},
                  {"has_breaker", c.has_breaker},
                  {"time_to_open_ms", ms(c.time_to_open)},
                  {"opens", c.opens},
                  {"longest_open_ms", ms(c.longest_open)},
                  {"alert_when_open_for_ms", ms(c.alert_when_open_for)},
                  {"alert_at_ms", ms(c.alert_at)},
                  {"reasons", reasons}};
  if (c.limit_lowest) {
    summary["limit_settled"] = c.limit_settled ? Json(*c.limit_settled) : Json(nullptr);
    summary["limit_lowest"] = *c.limit_lowest;
  }
  if (server) {
    summary["refused"] = c.refused;
    summary["shed"] = c.shed;
    summary["wasted"] = c.wasted;
    summary["peak_queued"] = c.peak_queued;
    summary["success_p99_ms"] = ms(c.success_p99);
    summary["recovered_after_ms"] = ms(c.recovered_after);
    summary["goal_met"] = c.goal_met ? Json(*c.goal_met) : Json(nullptr);
  }
  Json transitions = Json::array();
  for (const BreakerTransition& t : c.transitions) {
    transitions.push_back({{"t_ms", ms(t.at)},
                           {"from", std::string(to_string(t.from))},
                           {"to", std::string(to_string(t.to))},
                           {"reason", std::string(to_string(t.reason))}});
  }
  Json timeline = Json::array();
  for (const TimelineStep& s : c.timeline) {
    timeline.push_back({{"t_ms", ms(s.start)},
                        {"arrivals", s.arrivals},
                        {"lost", s.lost},
                        {"full", s.full},
                        {"degraded", s.degraded},
                        {"failed", s.failed},
                        {"calls", s.calls},
                        {"peak_in_flight", s.peak_in_flight},
                        {"peak_busy", s.peak_busy},
                        {"state", state_json(s.state)}});
    if (s.limit) timeline.back()["limit"] = *s.limit;
  }
  return {
      {"name", c.name}, {"summary", summary}, {"transitions", transitions}, {"timeline", timeline}};
}

}  // namespace

std::string to_json(const SimulationResult& result) {
  Json configs = Json::array();
  for (const ConfigurationResult& c : result.configurations) {
    configs.push_back(configuration_json(c, result.scenario.caller.workers,
                                         result.scenario.dependency.server.has_value()));
  }
  const Json doc = {{"scenario", scenario_json(result.scenario)},
                    {"timeline_step_ms", ms(result.timeline_step)},
                    {"configurations", configs}};
  // Names come from the user's files: replace invalid UTF-8 rather than throw.
  return doc.dump(1, ' ', false, nlohmann::detail::error_handler_t::replace) + "\n";
}

}  // namespace bulwark::lab
