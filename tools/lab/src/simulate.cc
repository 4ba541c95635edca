#include "bulwark/lab/simulate.h"

#include <string>

#include "breakers.h"
#include "bulwark/lab/duration.h"
#include "bulwark/lab/input_error.h"
#include "simulation.h"

namespace bulwark::lab {

ConfigurationResult simulate_configuration(const Scenario& scenario,
                                           const ResilienceConfig& configuration,
                                           const SimulateOptions& options) {
  if (options.timeline_step <= Nanos::zero()) {
    throw InputError({}, "timeline_step", "must be positive");
  }
  if (scenario.duration / options.timeline_step > 1'000'000) {
    throw InputError({}, "timeline_step",
                     "makes more than 1000000 steps of " + format_duration(options.timeline_step) +
                         " in " + format_duration(scenario.duration));
  }
  if (scenario.dependency.phases.empty()) {
    throw InputError({scenario.source}, "dependency.phases", "needs at least one phase");
  }
  // The work per request is bounded by its attempts (each a few events); a scenario
  // read from a file has been held to this already, one built in code is here.
  if (configuration.retry && configuration.retry->config.max_attempts > kMaxAttempts) {
    throw InputError({scenario.source}, "config." + configuration.name + ".retry.max_attempts",
                     "must be at most " + std::to_string(kMaxAttempts) + " (got " +
                         std::to_string(configuration.retry->config.max_attempts) + ")");
  }
  try {
    if (!configuration.breaker) {
      return detail::Simulation<detail::NoBreaker>(scenario, configuration, options).run();
    }
    return with_breaker_type(configuration.breaker->window(), [&](auto type) {
      using B = typename decltype(type)::type;
      return detail::Simulation<B>(scenario, configuration, options).run();
    });
  } catch (const InvalidConfig& e) {
    // A configuration built in code rather than read from a file: still name the field.
    throw InputError({scenario.source}, "config." + configuration.name + "." + e.error().field,
                     e.error().message);
  }
}

SimulationResult simulate(const Scenario& scenario, const SimulateOptions& options) {
  SimulationResult result;
  result.scenario = scenario;
  result.timeline_step = options.timeline_step;
  for (const ResilienceConfig& c : scenario.configurations) {
    result.configurations.push_back(simulate_configuration(scenario, c, options));
  }
  return result;
}

}  // namespace bulwark::lab
