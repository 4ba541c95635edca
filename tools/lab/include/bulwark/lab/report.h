// bulwark/lab/report.h — a simulation's results for people and for programs.
//
//   auto result = bulwark::lab::simulate(bulwark::lab::builtin_scenario());
//   bulwark::lab::write_text(std::cout, result);        // timeline, then the summary
//   std::ofstream("incident.json") << bulwark::lab::to_json(result);
//   std::ofstream("incident.svg") << bulwark::lab::to_svg(result);
//
// The text puts the configurations side by side: a per-step timeline first, then the
// summary (last, so it is what a terminal shows). The JSON holds the same numbers with
// durations in milliseconds (docs/lab.md lists every field). The SVG draws, per
// configuration and on shared scales, calls in flight and workers busy, the breaker's
// state, and pages served / degraded / failed / lost per step.
// Each costs time and memory linear in the timeline's length.

#ifndef BULWARK_LAB_REPORT_H_
#define BULWARK_LAB_REPORT_H_

#include <ostream>
#include <string>

#include "bulwark/lab/simulate.h"

namespace bulwark::lab {

struct TextOptions {
  bool timeline = true;  // false: the scenario and the summary only
};

void write_text(std::ostream& out, const SimulationResult& result, const TextOptions& options = {});
std::string to_json(const SimulationResult& result);
std::string to_svg(const SimulationResult& result);

// Helpers the reports share (and the CLI uses for its own messages).
std::string group_thousands(std::uint64_t n);  // 1234567 -> "1,234,567"
std::string format_clock(Nanos t);             // 75 s -> "1:15", 3725 s -> "1:02:05"
// A duration as the summary shows it, rounded: "810ms", "6.04s", "14.1s", "6min 9s".
std::string format_readable(Nanos d);

}  // namespace bulwark::lab

#endif  // BULWARK_LAB_REPORT_H_
