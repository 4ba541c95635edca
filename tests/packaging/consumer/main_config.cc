#include <bulwark/circuit_breaker.h>
#include <bulwark/config/config.h>
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
  // A service's named policies, one of them overridden from the environment.
  const bulwark::config::Policies policies = bulwark::config::parse(
      "[breaker.reviews]\nkind = \"count\"\nfailure_rate = 0.3\n[timeout]\nreviews = \"800ms\"\n",
      "inline", {{"BULWARK__BREAKER__REVIEWS__HALF_OPEN__PROBES", "4"}});
  bulwark::CountWindowBreaker reviews(
      policies.breakers.at("reviews").as<bulwark::CountWindowConfig>());
  ok = ok && reviews.config().half_open.probes == 4 && reviews.config().name == "reviews";
  std::printf("config: %s\n", ok ? "ok" : "failed");
  return ok ? 0 : 1;
}
