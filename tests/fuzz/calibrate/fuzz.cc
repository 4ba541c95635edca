// `bulwark calibrate`: a CSV trace (the input's first byte picks the false-open budget
// and whether the check runs). Bad input must be a clear InputError; a good trace gives,
// per key, either a proposal whose breaker file loads back through the lab's loader, or
// — for a trace that is not normal traffic (fewer than 100 successes, as many failures
// as successes, no time span) — a reason and nothing else; and reports (text, JSON,
// SVG) that hold no raw control byte.

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "bulwark/lab/calibrate.h"
#include "bulwark/lab/config.h"
#include "bulwark/lab/input_error.h"
#include "fuzz_support.h"
#include "lab_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace bulwark;
  if (size == 0) return 0;
  lab::CalibrateOptions options;
  constexpr double kBudgets[] = {1, 0.01, 100, 1e6};
  options.false_opens_per_day = kBudgets[data[0] & 3];
  options.check = (data[0] & 4) == 0;
  const std::string_view csv(reinterpret_cast<const char*>(data) + 1, size - 1);
  // Keys become breaker names in the proposal's TOML, which calibrate loads back.
  if (fuzz::toml_reaches_known_ub(csv)) return 0;
  lab::Calibration c;
  try {
    c = lab::calibrate_text(csv, options, "fuzz.csv");
  } catch (const lab::InputError& e) {
    fuzz::check_error(e);
    return 0;
  }
  fuzz::check(!c.keys.empty(), "a calibration has a key");
  for (const lab::KeyCalibration& k : c.keys) {
    const std::uint64_t successes = k.calls - k.ignored - k.failures;
    const bool normal = successes >= 100 && k.failures < successes && k.last_t > k.first_t;
    fuzz::check(normal == k.not_normal.empty(), "not normal traffic exactly as defined");
    if (!normal) {
      fuzz::check(k.breaker.empty() && k.call.empty() && k.timeout == 0 && k.bulkhead == 0 &&
                      k.checks.empty(),
                  "nothing proposed for traffic that is not normal");
      // A table header starts a line; the key itself (in a comment) may hold "[breaker]".
      fuzz::check(k.breaker_toml.rfind("[breaker]", 0) != 0 &&
                      k.breaker_toml.find("\n[breaker]") == std::string::npos,
                  "no breaker table for traffic that is not normal");
      continue;
    }
    try {
      const lab::BreakerSpec spec = lab::parse_breaker(k.breaker_toml, "proposal.toml");
      const bool has_rule = std::visit(
          [](const auto& b) {
            if constexpr (requires { b.failure_rate; })
              return b.consecutive_failures > 0 || b.failure_rate || b.slow_call_rate;
            else
              return b.consecutive_failures > 0;
          },
          spec.config);
      fuzz::check(has_rule, "the proposal has a trip rule");
    } catch (const lab::InputError&) {
      fuzz::check(false, "the proposal loads");
    }
    fuzz::check(k.bulkhead >= 1 && k.timeout > 0, "a bulkhead and a timeout");
    fuzz::check(k.checks.size() == (options.check ? 3u : 0u), "three checks when asked");
  }
  const std::string text = lab::to_text(c);
  fuzz::check(!fuzz::has_control_bytes(text), "the text report is escaped");
  const std::string json = lab::to_json(c);
  fuzz::check(!json.empty() && json.front() == '{', "the JSON is an object");
  const std::string svg = lab::to_svg(c);
  fuzz::check(!fuzz::has_control_bytes(svg), "the SVG is escaped");
  return 0;
}
