#include <bulwark/circuit_breaker.h>
#include <bulwark/lab/config.h>
#include <bulwark/lab/input_error.h>

#include <cstdio>
#include <fstream>
#include <string>

// What docs/lab.md calls "enforce it": load the breaker file the lab checked.
int main(int, char** argv) {
  const std::string path = std::string(argv[0]) + ".breaker.toml";
  std::ofstream(path) << "[breaker]\nname = \"reviews\"\nkind = \"time\"\n"
                         "failure_rate = 0.30\nminimum_calls = 20\nwindow.length = \"10s\"\n";
  const bulwark::lab::BreakerSpec spec = bulwark::lab::load_breaker_file(path);
  bool ok = spec.window() == bulwark::WindowKind::time && spec.name() == "reviews" &&
            spec.as<bulwark::TimeWindowConfig>().failure_rate == 0.30;
  bulwark::TimeWindowBreaker breaker(spec.as<bulwark::TimeWindowConfig>());
  ok = ok && breaker.state() == bulwark::State::closed;
  try {
    bulwark::lab::parse_breaker("[breaker]\nfailure_rat = 0.3\n", "inline");
    ok = false;
  } catch (const bulwark::lab::InputError&) {
    // a misspelt key is refused, naming it
  }
  std::printf("config: %s\n", ok ? "ok" : "failed");
  return ok ? 0 : 1;
}
