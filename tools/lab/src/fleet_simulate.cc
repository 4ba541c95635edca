// The fleet's runs (fleet.h): compiled only when bulwark::redis is built.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "breakers.h"
#include "bulwark/backoff.h"
#include "bulwark/config_error.h"
#include "bulwark/lab/duration.h"
#include "bulwark/lab/fleet.h"
#include "bulwark/lab/input_error.h"
#include "bulwark/redis/fleet.h"
#include "bulwark/redis/fleet_store.h"
#include "fleet_summary.h"
#include "simulation.h"

namespace bulwark::lab {
namespace {

constexpr Ticks kMs = 1'000'000;

// Instance i's arrivals and draws: its own stream, from the scenario's seed and i.
std::uint64_t instance_seed(std::uint64_t seed, std::uint32_t i) {
  SplitMix64 g(seed ^ (0x9E3779B97F4A7C15ull * (static_cast<std::uint64_t>(i) + 1)));
  g();
  return g();
}

bool in_outage(const FleetSpec& f, Ticks t) {
  for (const StoreOutage& o : f.outages) {
    if (t >= o.start.count() && t < o.end.count()) return true;
  }
  return false;
}

// What the outer loop does next: an instance's next event, or an instance's exchange
// with the store (a tick's, or one woken by a local opening).
struct Step {
  enum class Kind : std::uint8_t { event, tick, woken };
  Ticks t;
  Kind kind;
  std::uint32_t instance;
};
struct StepLater {
  bool operator()(const Step& a, const Step& b) const {
    if (a.t != b.t) return a.t > b.t;
    if (a.kind != b.kind) return a.kind > b.kind;  // events first, then exchanges
    return a.instance > b.instance;
  }
};

template <class B>
std::vector<ConfigurationResult> run_instances(const Scenario& scenario,
                                               const ResilienceConfig& config,
                                               const FleetSpec& spec, bool shared, FleetRun& run) {
  const std::uint32_t n = spec.instances;
  const SimulateOptions options{.timeline_step = scenario.duration};
  const Ticks end = scenario.duration.count();

  std::vector<Scenario> scenarios(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    Scenario& s = scenarios[i];
    s.name = scenario.name;
    s.source = scenario.source;
    s.duration = scenario.duration;
    s.seed = instance_seed(scenario.seed, i);
    s.arrivals = scenario.arrivals;
    s.arrivals.rate = scenario.arrivals.rate / n;
    s.caller = scenario.caller;
    s.dependency = scenario.dependency;
  }

  // Declared in this order so that they go in reverse: the Fleets (which listen to the
  // breakers' policies) before the simulations (which own the breakers), and the store
  // last.
  std::vector<char> woken(n, 0);
  std::vector<std::optional<Nanos>> opened_at(n);
  Ticks now = 0;
  redis::MemoryFleetStore store([&now] { return now / kMs; });
  std::vector<std::unique_ptr<detail::Simulation<B>>> sims;
  std::vector<std::unique_ptr<redis::Fleet>> fleets;
  sims.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    sims.push_back(std::make_unique<detail::Simulation<B>>(scenarios[i], config, options));
  }
  if (shared) {
    const std::string key =
        scenario.dependency.name.empty() ? "dependency" : scenario.dependency.name;
    fleets.reserve(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      detail::Simulation<B>* sim = sims[i].get();
      redis::FleetConfig fc;
      fc.instance = "instance-" + std::to_string(i);
      fc.quorum = spec.quorum;
      fc.quorum_window = std::chrono::duration_cast<std::chrono::milliseconds>(spec.quorum_window);
      fc.sync_interval = std::chrono::duration_cast<std::chrono::milliseconds>(spec.sync_interval);
      fc.lease_duration =
          std::chrono::duration_cast<std::chrono::milliseconds>(spec.lease_duration);
      // One key per instance: a few transitions between two syncs at most (an overflow
      // only makes the next sync re-read the breaker). The default's 4096 would reserve
      // about 200 KB per instance.
      fc.queue_capacity = 64;
      // sync_on_open: a local opening wakes the instance's timer, as an application
      // would from this hook.
      if (spec.sync_on_open) {
        char* flag = &woken[i];
        fc.on_queued = [flag](const std::string&, State to) {
          if (to == State::open) *flag = 1;
        };
      }
      fc.wall_ms = [sim] { return sim->clock().now().time_since_epoch().count() / kMs; };
      try {
        fleets.push_back(std::make_unique<redis::Fleet>(std::move(fc), store));
        // The call's timeout bounds a probe, for the derived lease.
        const auto probe_timeout =
            config.timeout ? std::chrono::duration_cast<std::chrono::milliseconds>(*config.timeout)
                           : std::chrono::milliseconds::zero();
        fleets.back()->attach(key, *sim->breaker(),
                              redis::AttachOptions{.fleet_window = spec.fleet_window,
                                                   .probe_timeout = probe_timeout});
      } catch (const InvalidConfig& e) {
        throw InputError({scenario.source}, "fleet." + e.error().field, e.error().message);
      }
    }
  }
  // Each instance's first opening after the degradation starts, at the virtual time it
  // happened. (An adopted open period is dated back to the deciding instance's opening
  // in the breaker's own transition event, so the time to open is taken here.)
  const std::optional<Nanos> degraded = scenario.degraded_from();
  for (std::uint32_t i = 0; i < n; ++i) {
    detail::Simulation<B>* sim = sims[i].get();
    std::optional<Nanos>* first = &opened_at[i];
    sim->breaker()->policy().on_transition([sim, first, degraded, end](const TransitionEvent& e) {
      if (e.to != State::open) return;
      const Nanos t = sim->clock().now().time_since_epoch();
      if (degraded && !*first && t >= *degraded && t.count() <= end) *first = t - *degraded;
    });
  }

  std::priority_queue<Step, std::vector<Step>, StepLater> steps;
  for (std::uint32_t i = 0; i < n; ++i) {
    sims[i]->start();
    steps.push({sims[i]->next_time(), Step::Kind::event, i});
    if (shared) {
      // Ticks spread over the interval, so instances do not sync in lockstep.
      const Ticks phase = spec.sync_interval.count() * i / n;
      steps.push({phase + spec.store_latency.count(), Step::Kind::tick, i});
    }
  }
  auto exchange = [&](std::uint32_t i, Ticks t) {
    now = t;
    sims[i]->advance_to(t);
    store.set_down(in_outage(spec, t));
    ++run.store_exchanges;
    auto r = fleets[i]->sync();
    if (r) {
      run.store_ops += r->published;
    } else {
      ++run.sync_errors;
    }
  };
  while (!steps.empty() && steps.top().t <= end) {
    const Step s = steps.top();
    steps.pop();
    switch (s.kind) {
      case Step::Kind::event: {
        detail::Simulation<B>& sim = *sims[s.instance];
        sim.process_next();
        if (sim.next_time() <= end) steps.push({sim.next_time(), Step::Kind::event, s.instance});
        if (woken[s.instance] != 0) {
          woken[s.instance] = 0;
          steps.push({s.t + spec.store_latency.count(), Step::Kind::woken, s.instance});
        }
        break;
      }
      case Step::Kind::tick:
        exchange(s.instance, s.t);
        steps.push({s.t + spec.sync_interval.count(), Step::Kind::tick, s.instance});
        break;
      case Step::Kind::woken:
        exchange(s.instance, s.t);
        break;
    }
  }
  std::vector<ConfigurationResult> results;
  results.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    results.push_back(sims[i]->finish());
    results.back().time_to_open = opened_at[i];
  }
  fleets.clear();
  return results;
}

}  // namespace

bool fleet_supported() noexcept { return true; }

FleetSimulationResult simulate_fleet(const Scenario& scenario) {
  if (!scenario.fleet) {
    throw InputError({scenario.source}, "fleet",
                     "the scenario has no [fleet] table: nothing to run as a fleet");
  }
  const FleetSpec& spec = *scenario.fleet;
  if (spec.instances < 1 || spec.instances > kMaxInstances) {
    throw InputError({scenario.source}, "fleet.instances", "must be in 1..10000");
  }
  if (spec.sync_interval < std::chrono::milliseconds(1) || spec.store_latency < Nanos::zero() ||
      spec.store_latency >= spec.sync_interval) {
    throw InputError({scenario.source}, "fleet.store_latency",
                     "must be at least 0 and shorter than sync_interval (at least 1ms)");
  }
  for (const StoreOutage& o : spec.outages) {
    if (o.end <= o.start || o.start >= scenario.duration) {
      throw InputError({scenario.source}, "fleet.outages",
                       "each outage must end after it starts, and start before the scenario's "
                       "end (" +
                           format_duration(scenario.duration) + ")");
    }
  }
  // A fleet built in code is held to the bound a file is.
  check_work(scenario, true);
  FleetSimulationResult result;
  result.scenario = scenario;
  Scenario plain = scenario;
  plain.fleet.reset();
  const SimulateOptions one_step{.timeline_step = scenario.duration};
  for (const std::string& name : spec.configurations) {
    const auto c = std::find_if(scenario.configurations.begin(), scenario.configurations.end(),
                                [&](const ResilienceConfig& rc) { return rc.name == name; });
    if (c == scenario.configurations.end() || !c->breaker) {
      throw InputError({scenario.source}, "fleet.configurations",
                       "names " + quote_for_error(name) +
                           ", which is not a configuration of the scenario with a breaker");
    }
    FleetConfigurationResult fr;
    fr.configuration = name;
    // The single instance: the scenario as it is (and its checks).
    std::vector<ConfigurationResult> single;
    single.push_back(simulate_configuration(plain, *c, one_step));
    fr.single = detail::summarize_fleet_run("single", single);
    for (const bool shared : {false, true}) {
      FleetRun run;
      std::vector<ConfigurationResult> results;
      try {
        results = with_breaker_type(c->breaker->window(), [&](auto type) {
          using B = typename decltype(type)::type;
          return run_instances<B>(plain, *c, spec, shared, run);
        });
      } catch (const InvalidConfig& e) {
        throw InputError({scenario.source}, "config." + name + "." + e.error().field,
                         e.error().message);
      }
      FleetRun summary = detail::summarize_fleet_run(shared ? "shared" : "isolated", results);
      summary.store_exchanges = run.store_exchanges;
      summary.store_ops = run.store_ops;
      summary.sync_errors = run.sync_errors;
      const double seconds = std::chrono::duration<double>(scenario.duration).count();
      summary.store_exchanges_per_second = static_cast<double>(run.store_exchanges) / seconds;
      summary.store_ops_per_second = static_cast<double>(run.store_ops) / seconds;
      (shared ? fr.shared : fr.isolated) = std::move(summary);
    }
    fr.goals = detail::fleet_goals(fr, spec);
    result.configurations.push_back(std::move(fr));
  }
  return result;
}

}  // namespace bulwark::lab
