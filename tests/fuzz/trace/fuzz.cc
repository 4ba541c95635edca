// `bulwark replay`: a CSV trace through one of three breakers (the input's first byte
// picks it: consecutive failures, a count window, a time window with in-flight slow
// calls and fraction-mode probes). Bad input must be a clear InputError and leave no
// output; a good trace gives JSON Lines, one object per line.

#include <cstdint>
#include <string>
#include <string_view>

#include "bulwark/lab/config.h"
#include "bulwark/lab/input_error.h"
#include "bulwark/lab/replay.h"
#include "lab_checks.h"

namespace {

bulwark::lab::BreakerSpec spec_for(unsigned char pick) {
  using namespace std::chrono_literals;
  switch (pick % 3) {
    case 0:
      return bulwark::BreakerConfig{.consecutive_failures = 3, .open_duration = 50ms};
    case 1:
      return bulwark::CountWindowConfig{.window = {.size = 10},
                                        .minimum_calls = 4,
                                        .failure_rate = 0.5,
                                        .slow_call_rate = 0.5,
                                        .slow_call_duration = 100ms,
                                        .open_duration = 50ms,
                                        .half_open = {.probes = 2, .max_in_flight = 2}};
    default:
      return bulwark::TimeWindowConfig{.window = {.length = 1s},
                                       .minimum_calls = 3,
                                       .failure_rate = 0.3,
                                       .slow_call_rate = 0.3,
                                       .slow_call_duration = 100ms,
                                       .count_in_flight_slow_calls = true,
                                       .open_duration = 50ms,
                                       .open_growth = {.multiplier = 2, .max = 1s},
                                       .half_open = {.probes = 2, .fraction = 0.5}};
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace bulwark;
  if (size == 0) return 0;
  const lab::BreakerSpec spec = spec_for(data[0]);
  const std::string_view csv(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string out;
  try {
    out = lab::replay_text(spec, csv, "fuzz.csv", {.decisions = (data[0] & 4) != 0});
  } catch (const lab::InputError& e) {
    fuzz::check_error(e);
    return 0;
  }
  fuzz::check(out.empty() || out.back() == '\n', "output is whole lines");
  for (std::size_t at = 0; at < out.size(); at = out.find('\n', at) + 1) {
    fuzz::check(out.compare(at, 2, "{\"") == 0, "every line is a JSON object");
  }
  fuzz::check(!fuzz::has_control_bytes(out), "keys are escaped in the JSON");
  return 0;
}
