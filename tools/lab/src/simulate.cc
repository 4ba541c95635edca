#include "bulwark/lab/simulate.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

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
  // The run must end while a person waits; a scenario read from a file was held to
  // this already (with every configuration), one built in code is here.
  {
    Scenario one = scenario;
    one.configurations = {configuration};
    one.fleet.reset();
    check_work(one, false);
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

namespace {

// Runs the configurations on `threads` threads (the caller's among them), each taking
// the next one not yet taken; results and errors land in the configurations' order.
std::vector<ConfigurationResult> simulate_side_by_side(const Scenario& scenario,
                                                       const SimulateOptions& options,
                                                       unsigned threads) {
  const std::size_t n = scenario.configurations.size();
  std::vector<std::optional<ConfigurationResult>> results(n);
  std::vector<std::exception_ptr> errors(n);
  std::mutex progress_mutex;
  struct Serialized {
    const SimulateOptions* options;
    std::mutex* mutex;
  } serialized{&options, &progress_mutex};
  SimulateOptions each = options;
  if (options.progress != nullptr) {
    each.progress = [](std::string_view configuration, Nanos at, Nanos duration, void* p) {
      const auto& s = *static_cast<const Serialized*>(p);
      const std::lock_guard<std::mutex> lock(*s.mutex);
      s.options->progress(configuration, at, duration, s.options->progress_context);
    };
    each.progress_context = &serialized;
  }
  std::atomic<std::size_t> next{0};
  const auto work = [&] {
    for (std::size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
      try {
        results[i].emplace(simulate_configuration(scenario, scenario.configurations[i], each));
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  {
    std::vector<std::jthread> helpers;
    for (unsigned t = 1; t < threads; ++t) {
      try {
        helpers.emplace_back(work);
      } catch (const std::system_error&) {
        break;  // no thread to be had: the threads there are do the work
      }
    }
    work();
  }  // joined
  std::vector<ConfigurationResult> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (errors[i]) std::rethrow_exception(errors[i]);
    out.push_back(std::move(*results[i]));
  }
  return out;
}

}  // namespace

SimulationResult simulate(const Scenario& scenario, const SimulateOptions& options) {
  if (options.threads == 0) throw InputError({}, "threads", "must be at least 1");
  check_work(scenario, false);
  SimulationResult result;
  result.scenario = scenario;
  result.timeline_step = options.timeline_step;
  const std::size_t threads =
      std::min<std::size_t>(options.threads, scenario.configurations.size());
  if (threads > 1) {
    result.configurations =
        simulate_side_by_side(scenario, options, static_cast<unsigned>(threads));
    return result;
  }
  for (const ResilienceConfig& c : scenario.configurations) {
    result.configurations.push_back(simulate_configuration(scenario, c, options));
  }
  return result;
}

}  // namespace bulwark::lab
