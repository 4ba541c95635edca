// `bulwark replay --config`: a breaker file as the CLI reads it, then a short trace
// through the breakers it describes. Bad input must be an InputError (anything else
// that escapes, a crash, a hang or a sanitizer report is a finding) and a clear one; a
// file that loads must pass the library's own validation and replay.

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "bulwark/lab/config.h"
#include "bulwark/lab/input_error.h"
#include "bulwark/lab/replay.h"
#include "lab_checks.h"

namespace {

// Two keys, failures and slow calls, enough to open and probe most breakers.
const std::string kTrace = [] {
  std::string t = "t_ms,key,duration_ms,outcome\n";
  for (int i = 0; i < 60; ++i) {
    t += std::to_string(i * 50) + (i % 3 ? ",a," : ",b,") + std::to_string(i % 7 == 0 ? 900 : 20) +
         (i % 4 == 0 || (i > 20 && i < 40) ? ",failure\n"
          : i % 11 == 0                    ? ",ignored\n"
                                           : ",success\n");
  }
  return t;
}();

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace bulwark;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (fuzz::toml_reaches_known_ub(text)) return 0;
  lab::BreakerSpec spec;
  std::vector<lab::InputError> warnings;
  try {
    spec = lab::parse_breaker(text, "fuzz.toml", &warnings);
    // A deprecated key is a warning as well formed as an error, and not printed.
    for (const lab::InputError& w : warnings) fuzz::check_error(w);
  } catch (const lab::InputError& e) {
    fuzz::check_error(e);
    return 0;
  }
  const bool valid = std::visit(
      [](const auto& c) {
        if constexpr (std::is_same_v<std::decay_t<decltype(c)>, TimeWindowConfig>) {
          return validate(c, lab::kTimeWindowCapacity).has_value();
        } else {
          return validate(c).has_value();
        }
      },
      spec.config);
  fuzz::check(valid, "a breaker file that loads passes the library's validation");
  const std::string out = lab::replay_text(spec, kTrace, "fuzz.csv", {.decisions = true});
  fuzz::check(out.size() > 2 && out.back() == '\n', "a replay writes its summary lines");
  return 0;
}
