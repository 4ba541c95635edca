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
#include "sharded_store.h"
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

// What the outer loop does next: an instance's next event, a failover's step (the
// node fails, its replica takes over, the look after that), or an instance's exchange
// with the store (a tick's, or one woken by a local opening).
struct Step {
  enum class Kind : std::uint8_t { event, failover, tick, woken };
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
  detail::ShardedMemoryStore store(spec.nodes, spec.groups, [&now] { return now / kMs; });
  std::vector<std::unique_ptr<detail::ShardedMemoryStore::Client>> clients;
  std::vector<std::unique_ptr<detail::Simulation<B>>> sims;
  std::vector<std::unique_ptr<redis::Fleet>> fleets;
  sims.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    sims.push_back(std::make_unique<detail::Simulation<B>>(scenarios[i], config, options));
  }
  const std::string key =
      scenario.dependency.name.empty() ? "dependency" : scenario.dependency.name;
  if (shared) {
    fleets.reserve(n);
    clients.reserve(n);
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
        clients.push_back(std::make_unique<detail::ShardedMemoryStore::Client>(store));
        fleets.push_back(std::make_unique<redis::Fleet>(std::move(fc), *clients.back()));
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
  // The failover's three steps: the node fails, its replica takes over, the look one
  // sync interval and round trip later.
  const bool has_failover = shared && spec.failover.has_value();
  const StoreFailover failover = has_failover ? *spec.failover : StoreFailover{};
  std::optional<FleetFailoverOutcome> outcome;
  std::optional<Ticks> reopen_from;  // after a takeover, until the key is open again
  if (has_failover) {
    outcome.emplace();
    outcome->key_on_node = store.node_of_group(store.group_of(key)) == failover.node;
    const Ticks at = failover.at.count(), back = at + failover.down.count();
    steps.push({at, Step::Kind::failover, 0});
    steps.push({back, Step::Kind::failover, 1});
    steps.push(
        {back + spec.sync_interval.count() + spec.store_latency.count(), Step::Kind::failover, 2});
  }
  auto key_open = [&] {
    const auto r = store.record(key);
    return r && r->state == redis::SharedState::open;
  };
  auto not_closed = [&] {
    std::uint32_t c = 0;
    for (const auto& sim : sims) c += sim->breaker()->state() != State::closed;
    return c;
  };
  auto exchange = [&](std::uint32_t i, Ticks t) {
    now = t;
    sims[i]->advance_to(t);
    store.set_all_down(in_outage(spec, t));
    ++run.store_exchanges;
    auto r = fleets[i]->sync();
    if (r) {
      run.store_ops += r->published;
    } else {
      ++run.sync_errors;
    }
    if (reopen_from && key_open()) {
      outcome->key_reopened_after = Nanos(t - *reopen_from);
      reopen_from.reset();
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
      case Step::Kind::failover:
        now = s.t;
        if (s.instance == 0) {
          outcome->key_open_at_failure = key_open();
          outcome->not_closed_at_failure = not_closed();
          store.set_node_down(failover.node, true);
        } else if (s.instance == 1) {
          store.take_over(failover.node, failover.replica_kept);
          outcome->key_open_at_takeover = key_open();
          outcome->not_closed_at_takeover = not_closed();
          if (outcome->key_open_at_takeover) {
            outcome->key_reopened_after = Nanos::zero();
          } else if (outcome->key_open_at_failure) {
            reopen_from = s.t;
          }
        } else {
          outcome->key_open_settled = key_open();
          outcome->not_closed_settled = not_closed();
        }
        break;
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
  if (shared) {
    const double seconds = std::chrono::duration<double>(scenario.duration).count();
    for (std::uint32_t k = 0; k < store.nodes(); ++k) {
      const detail::ShardedMemoryStore::NodeLoad& l = store.load(k);
      FleetNodeLoad node;
      node.node = k;
      node.groups = (spec.groups - k + spec.nodes - 1) / spec.nodes;
      node.latency = spec.node_latency.empty() ? spec.store_latency : spec.node_latency[k];
      node.holds_key = store.node_of_group(store.group_of(key)) == k;
      node.exchanges = l.exchanges;
      node.calls = l.calls;
      node.scripts = l.scripts;
      node.reads = l.reads;
      node.read_exchanges = l.read_exchanges;
      node.ops = l.ops;
      node.unanswered = l.unanswered;
      node.lost_ops = l.lost_ops;
      node.exchanges_per_second = static_cast<double>(l.exchanges) / seconds;
      node.calls_per_second = static_cast<double>(l.calls) / seconds;
      node.scripts_per_second = static_cast<double>(l.scripts) / seconds;
      node.reads_per_second = static_cast<double>(l.reads) / seconds;
      node.cpu =
          (static_cast<double>(l.scripts) * std::chrono::duration<double>(kScriptCost).count() +
           static_cast<double>(l.read_exchanges) *
               std::chrono::duration<double>(kReadCost).count()) /
          seconds;
      node.ops_per_second = static_cast<double>(l.ops) / seconds;
      run.nodes.push_back(node);
    }
    if (outcome) {
      outcome->unanswered = store.load(failover.node).unanswered;
      outcome->lost_ops = store.load(failover.node).lost_ops;
      run.failover = outcome;
    }
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
  if (spec.nodes < 1 || spec.nodes > kMaxStoreNodes || spec.groups < spec.nodes ||
      spec.groups > kMaxStoreGroups) {
    throw InputError({scenario.source}, "fleet.groups",
                     "nodes must be in 1..100 and groups in nodes..1000");
  }
  if (!spec.node_latency.empty() && spec.node_latency.size() != spec.nodes) {
    throw InputError({scenario.source}, "fleet.store_latency",
                     "a list must have one latency per node");
  }
  if (spec.failover &&
      (spec.failover->node >= spec.nodes || spec.failover->at >= scenario.duration ||
       spec.failover->down <= Nanos::zero())) {
    throw InputError({scenario.source}, "fleet.failover",
                     "its node must be in 0..nodes-1, it must start before the scenario's end (" +
                         format_duration(scenario.duration) + ") and last longer than 0s");
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
      summary.nodes = std::move(run.nodes);
      summary.failover = run.failover;
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
