// `bulwark demo`: the hotel-reviews incident, live on loopback at reduced scale.
//
// An in-process upstream (cpp-httplib on 127.0.0.1) answers in 12 ms, then degrades to
// 1.4 s without a single error. A page-rendering caller with a fixed pool of workers
// asks it for reviews at a steady rate through bulwark::http::Client, twice: "before"
// (a long timeout, nothing else) and "after" (a short timeout, a slow-call breaker, a
// bulkhead and a fallback that renders the page without reviews). Prints a live
// progress line when stderr is a terminal, then a before/after table beside the
// prediction of `bulwark simulate` for the same scenario (demo_scenario()), and whether
// each compared figure is within the demo's tolerance (kDemoTolerance).

#ifndef BULWARK_TOOLS_DEMO_H_
#define BULWARK_TOOLS_DEMO_H_

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "bulwark/lab/config.h"
#include "bulwark/lab/simulate.h"

namespace bulwark::cli {

struct DemoOptions {
  double rate = 40.0;                         // page requests per second
  std::chrono::milliseconds healthy{3000};    // before the upstream degrades
  std::chrono::milliseconds degraded{10000};  // how long it stays slow
  std::chrono::milliseconds fast_latency{12};
  std::chrono::milliseconds slow_latency{1400};
  int workers = 32;                               // the caller's page workers
  std::chrono::milliseconds page_patience{2000};  // a page not started by then is lost
};

// Runs both phases and writes the table to `out`. Returns 0, or 1 if the upstream could
// not be started. Throws std::runtime_error (with the reason) if `out` cannot be
// written: checked after the header, before the 30-second run, and after the table.
int run_demo(const DemoOptions& options, std::ostream& out);

// The demo as a lab scenario: the same constant arrival rate, workers, phases (fast
// for `healthy`, then slow and marked degraded for `degraded`) and both configurations
// ("before", "after"). The lab loses a page that finds every worker busy at once where
// the demo lets it wait up to page_patience, so only what does not depend on that is
// compared (compare_with_prediction).
lab::Scenario demo_scenario(const DemoOptions& options);

// What one configuration's run measured, in the terms the lab predicts.
struct DemoMeasurement {
  std::uint64_t calls_while_degraded = 0;  // requests the upstream got while slow
  std::uint64_t served_degraded = 0;       // pages the fallback answered
  std::optional<double> time_to_open_ms;   // from the slowdown; none: never opened
};

// How far a measured figure may be from the prediction: a count within `relative`
// of the prediction or within `absolute` of it, whichever is wider; a time to open
// within `open_ms` (and open in both or in neither).
struct DemoTolerance {
  double relative = 0;
  double absolute = 0;
  double open_ms = 0;
};
// Chosen from repeated runs on loopback; docs/http.md ("bulwark demo") says why.
inline constexpr DemoTolerance kDemoTolerance{.relative = 0.10, .absolute = 3, .open_ms = 100};

struct DemoComparison {
  std::string configuration;
  std::string figure;  // "calls while degraded", "pages degraded", "time to open"
  std::optional<double> measured, predicted;  // none: a time to open that never came
  bool within = false;
};

// Measured against predicted: for every configuration, the calls while degraded; for
// one with a fallback, the pages degraded; for one with a breaker, the time to open.
std::vector<DemoComparison> compare_with_prediction(const std::string& configuration,
                                                    const DemoMeasurement& measured,
                                                    const lab::ConfigurationResult& predicted,
                                                    const DemoTolerance& tolerance);

}  // namespace bulwark::cli

#endif  // BULWARK_TOOLS_DEMO_H_
