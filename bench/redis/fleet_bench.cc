// What sharing breaker state costs: the call path of an attached breaker against the
// same breaker alone (the ratio is the goal: 1x), a transition heard by the fleet's
// listener, one sync of 1,000 keys over the in-process store, and the Redis traffic of
// instances with 10,000 keys of which 1 % change state per sync.
//
//   bulwark_redis_bench --benchmark_repetitions=5 --benchmark_format=json > fleet.json

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bulwark/redis/fleet.h"
#include "bulwark/redis/redis_store.h"
#include "redis/redis_server.h"

namespace {

using bulwark::CircuitBreaker;
using bulwark::State;
using namespace bulwark::redis;

// The only place this file builds a breaker configuration.
CircuitBreaker::Config config(std::string name) {
  return CircuitBreaker::Config{.name = std::move(name), .consecutive_failures = 5};
}

void BM_Fleet_Baseline_ClosedPath(benchmark::State& state) {
  static CircuitBreaker breaker(config("plain"));
  for (auto _ : state) {
    auto permit = breaker.try_acquire();
    permit->record_success();
  }
}
BENCHMARK(BM_Fleet_Baseline_ClosedPath)->Threads(1)->Threads(2);

struct Attached {
  Attached() { fleet.attach(breaker); }
  MemoryFleetStore store;
  CircuitBreaker breaker{config("attached")};
  Fleet fleet{FleetConfig{.instance = "bench"}, store};
};

void BM_Fleet_ClosedPath(benchmark::State& state) {
  static Attached attached;
  CircuitBreaker& breaker = attached.breaker;
  for (auto _ : state) {
    auto permit = breaker.try_acquire();
    permit->record_success();
  }
}
BENCHMARK(BM_Fleet_ClosedPath)->Threads(1)->Threads(2);

// One open and one close of a breaker (manual, so no calls in the loop), without and
// with the fleet's listener queueing both; a sync every 1,000 drains the queue.
void BM_Fleet_Baseline_Transitions(benchmark::State& state) {
  CircuitBreaker breaker(config("plain"));
  for (auto _ : state) {
    (void)breaker.transition_to(State::open);
    breaker.reset();
  }
}
BENCHMARK(BM_Fleet_Baseline_Transitions);

void BM_Fleet_Transitions(benchmark::State& state) {
  MemoryFleetStore store;
  CircuitBreaker breaker(config("attached"));
  Fleet fleet(FleetConfig{.instance = "bench"}, store);
  fleet.attach(breaker);
  int n = 0;
  for (auto _ : state) {
    (void)breaker.transition_to(State::open);
    breaker.reset();
    if (++n == 1000) {
      state.PauseTiming();
      (void)fleet.sync();
      n = 0;
      state.ResumeTiming();
    }
  }
}
BENCHMARK(BM_Fleet_Transitions);

struct Side {
  Side(FleetStore& store, const std::string& id, int keys) {
    fleet = std::make_unique<Fleet>(FleetConfig{.instance = id}, store);
    for (int i = 0; i < keys; ++i) {
      breakers.push_back(std::make_unique<CircuitBreaker>(policy));
      fleet->attach("key-" + std::to_string(i), *breakers.back());
    }
  }
  // Flips `n` breakers, walking through the keys: a closed one trips (its failures), an
  // open one is closed for the fleet (Fleet::reset; a breaker's own reset() would stay
  // local and publish nothing).
  void flip(int n) {
    for (int i = 0; i < n; ++i) {
      const std::size_t k = next;
      next = (next + 1) % breakers.size();
      flip_key(k);
    }
  }
  void flip_key(std::size_t k) {
    CircuitBreaker& b = *breakers[k];
    if (b.state() == State::closed) {
      for (int f = 0; f < 5; ++f) {
        if (auto p = b.try_acquire()) p->record_failure();
      }
    } else {
      (void)fleet->reset("key-" + std::to_string(k));
    }
  }
  CircuitBreaker::Policy policy{config("shared")};
  std::vector<std::unique_ptr<CircuitBreaker>> breakers;
  std::unique_ptr<Fleet> fleet;
  std::size_t next = 0;
};

// One idle sync of an instance with range(0) keys, and (range(1) > 0) a sync of an
// instance publishing range(1) changes plus the sync of a peer applying them.
void BM_Fleet_SyncMemory(benchmark::State& state) {
  MemoryFleetStore store;
  const int keys = static_cast<int>(state.range(0));
  const int changes = static_cast<int>(state.range(1));
  Side a(store, "a", keys), b(store, "b", keys);
  (void)a.fleet->sync(), (void)b.fleet->sync();
  for (auto _ : state) {
    if (changes > 0) a.flip(changes);
    benchmark::DoNotOptimize(a.fleet->sync());
    if (changes > 0) benchmark::DoNotOptimize(b.fleet->sync());
  }
  state.counters["keys"] = keys;
  state.counters["changes_per_sync"] = changes;
}
BENCHMARK(BM_Fleet_SyncMemory)->Args({1000, 0})->Args({1000, 10})->Unit(benchmark::kMicrosecond);

// Fleet windows. The closed path of a count-window breaker alone, and of the same kind
// attached with fleet_window (the ratio is the goal: 1x; the window's level is read by
// sync(), never on the call path), with a sync every 1,000 calls outside the timing.
using bulwark::CountWindowBreaker;
CountWindowBreaker::Config window_config(std::string name) {
  return CountWindowBreaker::Config{
      .name = std::move(name), .window = {.size = 100}, .minimum_calls = 20, .failure_rate = 0.5};
}

void BM_Fleet_Baseline_WindowClosedPath(benchmark::State& state) {
  static CountWindowBreaker breaker(window_config("plain-window"));
  for (auto _ : state) {
    auto permit = breaker.try_acquire();
    permit->record_success();
  }
}
BENCHMARK(BM_Fleet_Baseline_WindowClosedPath)->Threads(1)->Threads(2);

struct WindowAttached {
  WindowAttached() { fleet.attach(breaker, {.fleet_window = true}); }
  MemoryFleetStore store;
  CountWindowBreaker breaker{window_config("attached-window")};
  Fleet fleet{FleetConfig{.instance = "bench"}, store};
};

void BM_Fleet_WindowClosedPath(benchmark::State& state) {
  static WindowAttached attached;
  CountWindowBreaker& breaker = attached.breaker;
  int n = 0;
  for (auto _ : state) {
    auto permit = breaker.try_acquire();
    permit->record_success();
    if (state.thread_index() == 0 && ++n == 1000) {
      state.PauseTiming();
      (void)attached.fleet.sync();
      n = 0;
      state.ResumeTiming();
    }
  }
}
BENCHMARK(BM_Fleet_WindowClosedPath)->Threads(1)->Threads(2);

using bulwark::TimeWindowBreaker;
TimeWindowBreaker::Config time_window_config(std::string name) {
  return TimeWindowBreaker::Config{.name = std::move(name),
                                   .window = {.length = std::chrono::seconds(60), .buckets = 10},
                                   .minimum_calls = 20,
                                   .failure_rate = 0.5};
}

// One sync of an instance with range(0) fleet_window keys of which range(1) had calls
// since the last sync (each sends its level and reads the fleet's totals), against a
// store that holds a peer's levels for every key. Time windows (60 s), so that a busy
// key's level changes at every one of its calls.
void BM_Fleet_SyncWindowMemory(benchmark::State& state) {
  MemoryFleetStore store;
  const int keys = static_cast<int>(state.range(0));
  const int busy = static_cast<int>(state.range(1));
  std::vector<std::unique_ptr<TimeWindowBreaker>> mine, theirs;
  Fleet a(FleetConfig{.instance = "a"}, store), b(FleetConfig{.instance = "b"}, store);
  for (int i = 0; i < keys; ++i) {
    const std::string key = "k" + std::to_string(i);
    mine.push_back(std::make_unique<TimeWindowBreaker>(time_window_config(key)));
    theirs.push_back(std::make_unique<TimeWindowBreaker>(time_window_config(key)));
    a.attach(*mine.back(), {.fleet_window = true});
    b.attach(*theirs.back(), {.fleet_window = true});
    theirs.back()->try_acquire()->record_success();
  }
  (void)b.sync();
  std::size_t next = 0;
  for (auto _ : state) {
    for (int i = 0; i < busy; ++i) {
      mine[next]->try_acquire()->record_success();
      next = (next + 1) % mine.size();
    }
    benchmark::DoNotOptimize(a.sync());
  }
  state.counters["keys"] = keys;
  state.counters["busy_per_sync"] = busy;
}
BENCHMARK(BM_Fleet_SyncWindowMemory)
    ->Args({1000, 0})
    ->Args({1000, 100})
    ->Unit(benchmark::kMicrosecond);

// Sum of calls over INFO commandstats, and the EVALSHA calls among them.
void command_calls(const bulwark::testing::RedisServer& server, double& total, double& evalsha) {
  std::istringstream in(server.command({"INFO", "commandstats"}));
  total = evalsha = 0;
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(":calls=");
    if (line.rfind("cmdstat_", 0) != 0 || colon == std::string::npos) continue;
    const double calls = std::stod(line.substr(colon + 7));
    const std::string name = line.substr(8, colon - 8);
    if (name == "info") continue;
    total += calls;
    if (name == "evalsha") evalsha += calls;
  }
}

// The benchmark's own redis-server on a free port, or nullptr with the benchmark marked
// skipped (no redis-server installed, or it did not start).
std::unique_ptr<bulwark::testing::RedisServer> start_server(benchmark::State& state) {
  if (!bulwark::testing::redis_server_available()) {
    state.SkipWithError("redis-server is not installed");
    return nullptr;
  }
  auto server = std::make_unique<bulwark::testing::RedisServer>();
  if (!server->start()) {
    state.SkipWithError("redis-server did not start");
    return nullptr;
  }
  return server;
}

// Two instances with range(0) keys; each iteration one of them flips range(1) keys
// and both sync. Counters per instance per sync: commands sent (round trips) and the
// commands Redis ran for them (inside the script), and per second at 5 syncs/s.
void BM_Fleet_SyncRedis(benchmark::State& state) {
  const auto server_ptr = start_server(state);
  if (!server_ptr) return;
  bulwark::testing::RedisServer& server = *server_ptr;
  const RedisConfig rc{.port = server.port(), .timeout = std::chrono::seconds(5)};
  RedisFleetStore sa(rc), sb(rc);
  const int keys = static_cast<int>(state.range(0));
  const int changes = static_cast<int>(state.range(1));
  Side a(sa, "a", keys), b(sb, "b", keys);
  (void)a.fleet->sync(), (void)b.fleet->sync();
  double total0 = 0, eval0 = 0;
  command_calls(server, total0, eval0);
  std::int64_t syncs = 0;
  for (auto _ : state) {
    a.flip(changes);
    if (!a.fleet->sync() || !b.fleet->sync()) {
      state.SkipWithError("a sync failed");
      return;
    }
    syncs += 2;
  }
  double total1 = 0, eval1 = 0;
  command_calls(server, total1, eval1);
  const double per_sync = syncs > 0 ? (eval1 - eval0) / static_cast<double>(syncs) : 0;
  const double inner = syncs > 0 ? (total1 - total0) / static_cast<double>(syncs) : 0;
  state.counters["keys"] = keys;
  state.counters["changes_per_sync"] = changes;
  state.counters["round_trips_per_sync"] = per_sync;
  state.counters["redis_commands_per_sync"] = inner;
  state.counters["round_trips_per_s_at_5hz"] = per_sync * 5;
  state.counters["redis_commands_per_s_at_5hz"] = inner * 5;
}
BENCHMARK(BM_Fleet_SyncRedis)
    ->Args({10000, 100})
    ->Args({10000, 0})
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(50);

// One sync of an instance whose 100 fleet_window keys all changed, against a Redis that
// holds the levels of range(0) instances for each key: the cost per window op should
// not grow with the fleet (a running sum, stale entries found through a sorted set).
void BM_Fleet_SyncRedisWindow(benchmark::State& state) {
  const auto server_ptr = start_server(state);
  if (!server_ptr) return;
  bulwark::testing::RedisServer& server = *server_ptr;
  const RedisConfig rc{.port = server.port(), .timeout = std::chrono::seconds(5)};
  RedisFleetStore store(rc);
  constexpr int kKeys = 100;
  const int instances = static_cast<int>(state.range(0));
  // A long sync interval, so that no level goes stale while the benchmark runs.
  auto fleet_config = [](std::string id) {
    return FleetConfig{.instance = std::move(id), .sync_interval = std::chrono::seconds(60)};
  };
  std::vector<std::unique_ptr<TimeWindowBreaker>> breakers;
  std::vector<std::unique_ptr<Fleet>> fleets;
  for (int n = 0; n < instances; ++n) {
    std::string id = "i";
    id += std::to_string(n);
    fleets.push_back(std::make_unique<Fleet>(fleet_config(std::move(id)), store));
    for (int k = 0; k < kKeys; ++k) {
      std::string key = "k";
      key += std::to_string(k);
      breakers.push_back(std::make_unique<TimeWindowBreaker>(time_window_config(std::move(key))));
      fleets.back()->attach(*breakers.back(), {.fleet_window = true});
      breakers.back()->try_acquire()->record_success();
    }
    if (!fleets.back()->sync()) {
      state.SkipWithError("a sync failed");
      return;
    }
  }
  Fleet& a = *fleets.front();
  for (auto _ : state) {
    for (int k = 0; k < kKeys; ++k) breakers[k]->try_acquire()->record_success();
    if (!a.sync()) {
      state.SkipWithError("a sync failed");
      return;
    }
  }
  state.counters["instances"] = instances;
  state.counters["window_ops_per_sync"] = kKeys;
}
BENCHMARK(BM_Fleet_SyncRedisWindow)
    ->Arg(2)
    ->Arg(100)
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(200);

// A fleet under load: range(0) instances (each its own connection) with range(1) keys
// each, of which range(2) change state per sync interval fleet-wide (decided by one
// instance, adopted by the others), the instances syncing in parallel from range(3)
// threads. Each iteration is one interval. Reported: the duration of every sync (p50,
// p99, p99.9, max, in ms), the share of syncs longer than 50, 100, 250 and 500 ms, and the
// syncs that failed against the store's default timeout (RedisConfig::timeout). Run it
// on a busy machine too (another build, or `stress`), as a host that also serves traffic.
void BM_Fleet_SyncRedisFleet(benchmark::State& state) {
  const auto server_ptr = start_server(state);
  if (!server_ptr) return;
  const int instances = static_cast<int>(state.range(0));
  const int keys = static_cast<int>(state.range(1));
  const int changes = static_cast<int>(state.range(2));
  const int threads = static_cast<int>(state.range(3));
  std::vector<std::unique_ptr<RedisFleetStore>> stores;
  std::vector<std::unique_ptr<Side>> sides;
  for (int i = 0; i < instances; ++i) {
    stores.push_back(std::make_unique<RedisFleetStore>(RedisConfig{.port = server_ptr->port()}));
    sides.push_back(std::make_unique<Side>(*stores.back(), "i" + std::to_string(i), keys));
  }
  std::vector<double> took;  // ms, every sync
  std::atomic<std::int64_t> failed{0};
  std::mutex took_mu;
  std::string last_error;  // of a failed sync, if any
  auto sync_all = [&](bool record) {
    std::vector<std::thread> pool;
    std::atomic<int> next_instance{0};
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&] {
        std::vector<double> mine;
        for (int i; (i = next_instance.fetch_add(1)) < instances;) {
          const auto t0 = std::chrono::steady_clock::now();
          const auto result = sides[static_cast<std::size_t>(i)]->fleet->sync();
          const bool ok = result.has_value();
          if (!ok && record) {
            std::lock_guard lock(took_mu);
            last_error = result.error().message;
          }
          mine.push_back(
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count());
          if (!ok && record) failed.fetch_add(1);
        }
        if (!record) return;
        std::lock_guard lock(took_mu);
        took.insert(took.end(), mine.begin(), mine.end());
      });
    }
    for (auto& th : pool) th.join();
  };
  for (int i = 0; i < 5; ++i) sync_all(false);  // everyone connected and caught up
  std::size_t key = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (int c = 0; c < changes; ++c) {
      sides[key % sides.size()]->flip_key(key % static_cast<std::size_t>(keys));
      ++key;
    }
    state.ResumeTiming();
    sync_all(true);
  }
  std::sort(took.begin(), took.end());
  auto at = [&](double q) {
    return took.empty()
               ? 0.0
               : took[std::min(took.size() - 1,
                               static_cast<std::size_t>(q * static_cast<double>(took.size())))];
  };
  auto over = [&](double ms) {
    return took.empty()
               ? 0.0
               : static_cast<double>(took.end() - std::upper_bound(took.begin(), took.end(), ms)) /
                     static_cast<double>(took.size());
  };
  state.counters["syncs"] = static_cast<double>(took.size());
  state.counters["p50_ms"] = at(0.5);
  state.counters["p99_ms"] = at(0.99);
  state.counters["p999_ms"] = at(0.999);
  state.counters["max_ms"] = took.empty() ? 0.0 : took.back();
  state.counters["over_50ms"] = over(50);
  state.counters["over_100ms"] = over(100);
  state.counters["over_250ms"] = over(250);
  state.counters["over_500ms"] = over(500);
  if (!last_error.empty()) state.SetLabel("last error: " + last_error);
  state.counters["failed"] =
      took.empty() ? 0.0 : static_cast<double>(failed.load()) / static_cast<double>(took.size());
}
BENCHMARK(BM_Fleet_SyncRedisFleet)
    ->Args({100, 1000, 10, 4})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(50)
    ->UseRealTime();

}  // namespace
