// `bulwark simulate SCENARIO.toml`: a scenario as the CLI reads it and, when it is small
// enough to run in a few milliseconds, the simulation and its three reports. Bad input
// must be a clear InputError; a scenario that loads must respect every bound the lab
// promises (they keep a run finite, and the estimated run under a minute); a run
// accounts for every request, and its text
// and SVG hold no control byte whatever the names hold. A [fleet] table must respect
// its bounds too; without bulwark::redis (the fuzz build) its run is the clear "no
// fleet support" error, and with it a small fleet runs and accounts for every request.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "bulwark/lab/config.h"
#include "bulwark/lab/fleet.h"
#include "bulwark/lab/input_error.h"
#include "bulwark/lab/report.h"
#include "bulwark/lab/simulate.h"
#include "lab_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace bulwark;
  using fuzz::check;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (fuzz::toml_reaches_known_ub(text)) return 0;
  lab::Scenario s;
  std::vector<lab::InputError> warnings;
  try {
    s = lab::parse_scenario(text, "fuzz.toml", &warnings);
    // A deprecated key is a warning as well formed as an error, and not printed.
    for (const lab::InputError& w : warnings) fuzz::check_error(w);
  } catch (const lab::InputError& e) {
    fuzz::check_error(e);
    return 0;
  }
  check(s.duration > Nanos::zero() && s.duration <= lab::kMaxScenarioDuration, "duration bound");
  check(s.caller.workers >= 1 && s.caller.workers <= lab::kMaxWorkers, "workers bound");
  check(!s.configurations.empty() && s.configurations.size() <= lab::kMaxConfigurations,
        "configurations bound");
  check(!s.dependency.phases.empty() && s.dependency.phases.size() <= lab::kMaxPhases,
        "phases bound");
  const double requests = s.arrivals.rate * std::chrono::duration<double>(s.duration).count();
  double attempts = 0;
  for (const auto& c : s.configurations) {
    check(!c.retry || c.retry->config.max_attempts <= lab::kMaxAttempts, "attempts bound");
    attempts += requests * (c.retry ? c.retry->config.max_attempts : 1);
  }
  check(lab::estimate_work(s, s.fleet.has_value()).seconds <= lab::kMaxRunSeconds, "work bound");
  if (s.fleet) {
    const lab::FleetSpec& f = *s.fleet;
    check(f.instances >= 1 && f.instances <= lab::kMaxInstances, "fleet.instances bound");
    check(f.quorum >= 1 && f.quorum <= f.instances, "fleet.quorum bound");
    check(f.sync_interval >= std::chrono::milliseconds(1) && f.store_latency >= Nanos::zero() &&
              f.store_latency < f.sync_interval,
          "fleet sync bounds");
    check(!f.configurations.empty() && f.outages.size() <= lab::kMaxOutages, "fleet lists");
    for (const auto& o : f.outages) {
      check(o.start < o.end && o.start < s.duration, "fleet outage bounds");
    }
    const double syncs =
        static_cast<double>(f.instances) *
        (static_cast<double>(s.duration.count()) / static_cast<double>(f.sync_interval.count()));
    if (!lab::fleet_supported()) {
      try {
        (void)lab::simulate_fleet(s);
        check(false, "a build without fleet support refuses a fleet");
      } catch (const lab::InputError& e) {
        fuzz::check_error(e);
        check(e.message().find("-DBULWARK_REDIS=ON") != std::string::npos,
              "the refusal says how to get fleet support");
      }
    } else if (attempts * 4 <= 20'000 && syncs <= 20'000) {
      lab::FleetSimulationResult fr;
      try {
        fr = lab::simulate_fleet(s);
      } catch (const lab::InputError& e) {
        fuzz::check_error(e);
        check(false, "a fleet that loads simulates");
      }
      for (const auto& c : fr.configurations) {
        for (const lab::FleetRun* run : {&c.single, &c.isolated, &c.shared}) {
          const auto& t = run->total;
          check(t.lost + t.served_full + t.served_degraded + t.failed == t.requests,
                "every fleet request ends exactly once");
        }
      }
      std::ostringstream out;
      lab::write_fleet_text(out, fr);
      check(!fuzz::has_control_bytes(out.str()), "the fleet text holds no control byte");
      check(!fuzz::has_control_bytes(lab::fleet_to_svg(fr)), "the fleet SVG holds no control byte");
      check(!fuzz::has_control_bytes(lab::fleet_to_json(fr)),
            "the fleet JSON holds no control byte");
    }
  }
  if (attempts > 20'000) return 0;  // valid, but too long a run for a fuzzer's input

  // At most 1000 timeline rows.
  const Nanos step = std::max<Nanos>(std::chrono::seconds(1), s.duration / 1000 + Nanos(1));
  lab::SimulationResult r;
  try {
    r = lab::simulate(s, {.timeline_step = step});
  } catch (const lab::InputError& e) {
    fuzz::check_error(e);
    check(false, "a scenario that loads simulates");
  }
  for (const auto& c : r.configurations) {
    check(c.lost + c.served_full + c.served_degraded + c.failed == c.requests,
          "every request ends exactly once");
    check(c.peak_busy <= s.caller.workers, "never more workers busy than there are");
  }
  std::ostringstream out;
  lab::write_text(out, r);
  check(!fuzz::has_control_bytes(out.str()), "the text report holds no control byte");
  check(!fuzz::has_control_bytes(lab::to_svg(r)), "the SVG holds no control byte");
  check(!fuzz::has_control_bytes(lab::to_json(r)), "the JSON holds no control byte");
  return 0;
}
