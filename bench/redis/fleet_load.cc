// A fleet under load, against a real Redis: many Fleet instances in one process, each
// with its own connection and its own breakers for the same keys, syncing every interval
// with their ticks spread over it, while 1 % of the keys change state per interval
// fleet-wide (each change decided by one instance, adopted by all the others). It starts
// its own servers — one redis-server, or a Redis Cluster of 3 masters and 3 replicas
// (tests/redis/redis_cluster.h) — and stops them at the end. Not part of ctest.
//
//   bulwark_fleet_load --store standalone --instances 100,200,400 --seconds 15
//   bulwark_fleet_load --store cluster --groups 12 --instances 100,200,400 --seconds 15
//   bulwark_fleet_load --store sharded --groups 12 --instances 200 --change 0
// (`sharded`: RedisClusterStore with cluster = false over the one redis-server; `--change
// 0`: a quiet fleet, no key changes.)
//
// Per run it prints, after a warm-up: syncs per second done and late, sync duration
// p50/p99/max, failed syncs, and per master node the commands Redis ran per second (INFO
// commandstats, the script's inner commands included), the EVALSHA calls among them, and
// the node's CPU (INFO cpu, user + sys, as a share of one core). docs/performance.md.

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bulwark/circuit_breaker.h"
#include "bulwark/redis/cluster_store.h"
#include "bulwark/redis/fleet.h"
#include "bulwark/redis/redis_store.h"
#include "redis/redis_cluster.h"
#include "redis/redis_server.h"

namespace {

using namespace bulwark;
using namespace bulwark::redis;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string store = "standalone";  // or "cluster", "sharded"
  std::vector<int> instances{200};
  int keys = 1000;
  double change = 0.01;  // of the keys, per interval, fleet-wide
  int interval_ms = 200;
  int seconds = 15;  // measured, after the warm-up
  int threads = 8;
  std::uint32_t groups = 12;  // cluster: hash-tag groups
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(
      stderr,
      "bulwark_fleet_load: %s\n"
      "usage: bulwark_fleet_load [--store standalone|cluster|sharded] [--instances N[,N...]]\n"
      "  [--keys 1000] [--change 0.01] [--interval-ms 200] [--seconds 15]\n"
      "  [--threads 8] [--groups 12]\n",
      why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage(("missing the value of " + a).c_str());
    const std::string v = argv[++i];
    if (a == "--store") {
      o.store = v;
      if (v != "standalone" && v != "cluster" && v != "sharded")
        usage("--store: standalone, cluster or sharded");
    } else if (a == "--instances") {
      o.instances.clear();
      std::istringstream in(v);
      for (std::string n; std::getline(in, n, ',');) o.instances.push_back(std::atoi(n.c_str()));
    } else if (a == "--keys") {
      o.keys = std::atoi(v.c_str());
    } else if (a == "--change") {
      o.change = std::atof(v.c_str());
    } else if (a == "--interval-ms") {
      o.interval_ms = std::atoi(v.c_str());
    } else if (a == "--seconds") {
      o.seconds = std::atoi(v.c_str());
    } else if (a == "--threads") {
      o.threads = std::atoi(v.c_str());
    } else if (a == "--groups") {
      o.groups = static_cast<std::uint32_t>(std::atoi(v.c_str()));
    } else {
      usage(("unknown option " + a).c_str());
    }
  }
  for (int n : o.instances) {
    if (n < 1 || n > 5000) usage("--instances: 1..5000 each");
  }
  if (o.keys < 1 || o.interval_ms < 10 || o.seconds < 1 || o.seconds > 110 || o.threads < 1 ||
      o.threads > 64 || o.groups < 1 || o.groups > 1000 || o.change < 0 || o.change > 1)
    usage(
        "a value out of range (keys >= 1, interval-ms >= 10, seconds 1..110, threads "
        "1..64, groups 1..1000, change 0..1)");
  return o;
}

// One node's counters: commands run (commandstats, but INFO, CLUSTER, PING and the
// replication traffic) and EVALSHA among them, and its CPU seconds (user + sys).
struct NodeStats {
  double commands = 0, evalsha = 0, cpu = 0;
};
NodeStats node_stats(const testing::RedisServer& s) {
  NodeStats n;
  std::istringstream stats(s.command({"INFO", "commandstats"}));
  for (std::string line; std::getline(stats, line);) {
    const auto colon = line.find(":calls=");
    if (line.rfind("cmdstat_", 0) != 0 || colon == std::string::npos) continue;
    const std::string name = line.substr(8, colon - 8);
    if (name == "info" || name.rfind("cluster", 0) == 0 || name == "ping" || name == "replconf" ||
        name == "psync" || name == "flushall" || name == "config" || name == "command")
      continue;
    const double calls = std::stod(line.substr(colon + 7));
    n.commands += calls;
    if (name == "evalsha") n.evalsha += calls;
  }
  std::istringstream cpu(s.command({"INFO", "cpu"}));
  for (std::string line; std::getline(cpu, line);) {
    if (line.rfind("used_cpu_sys:", 0) == 0) n.cpu += std::stod(line.substr(13));
    if (line.rfind("used_cpu_user:", 0) == 0) n.cpu += std::stod(line.substr(14));
  }
  return n;
}

CircuitBreaker::Config breaker_config() {
  return CircuitBreaker::Config{
      .name = "shared", .consecutive_failures = 5, .open_duration = std::chrono::seconds(30)};
}

// One instance of the service: its store connection, its breakers, its Fleet.
struct Instance {
  Instance(std::unique_ptr<FleetStore> s, std::string id, int keys, int interval_ms)
      : store(std::move(s)) {
    fleet =
        std::make_unique<Fleet>(FleetConfig{.instance = std::move(id),
                                            .sync_interval = std::chrono::milliseconds(interval_ms),
                                            .queue_capacity = 64},
                                *store);
    breakers.reserve(static_cast<std::size_t>(keys));
    for (int k = 0; k < keys; ++k) {
      breakers.push_back(std::make_unique<CircuitBreaker>(policy));
      fleet->attach("key-" + std::to_string(k), *breakers.back());
    }
  }
  // A closed breaker trips (its failures); an open one is closed for the fleet.
  void flip(std::size_t k) {
    CircuitBreaker& b = *breakers[k];
    if (b.state() == State::closed) {
      for (int f = 0; f < 5; ++f) {
        if (auto p = b.try_acquire()) p->record_failure();
      }
    } else {
      (void)fleet->reset("key-" + std::to_string(k));
    }
  }
  std::unique_ptr<FleetStore> store;
  CircuitBreaker::Policy policy{breaker_config()};
  std::vector<std::unique_ptr<CircuitBreaker>> breakers;
  std::unique_ptr<Fleet> fleet;
};

struct Servers {
  std::unique_ptr<testing::RedisServer> one;
  std::unique_ptr<testing::RedisCluster> cluster;
  // The nodes whose counters are read: the server, or the cluster's masters.
  std::vector<testing::RedisServer*> masters() const {
    std::vector<testing::RedisServer*> out;
    if (one) out.push_back(one.get());
    if (cluster) {
      for (const auto& n : cluster->nodes()) {
        if (n.serves) out.push_back(cluster->server(n.port));
      }
    }
    return out;
  }
};

double at(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

double process_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

void run(const Options& o, Servers& servers, int n) {
  for (auto* m : servers.masters()) (void)m->command({"FLUSHALL"});
  const auto t_build = Clock::now();
  std::vector<std::unique_ptr<Instance>> fleet;
  fleet.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    std::unique_ptr<FleetStore> store;
    if (servers.one && o.store == "sharded") {
      store = std::make_unique<RedisClusterStore>(ClusterConfig{
          .redis = {.port = servers.one->port()}, .cluster = false, .groups = o.groups});
    } else if (servers.one) {
      store = std::make_unique<RedisFleetStore>(RedisConfig{.port = servers.one->port()});
    } else {
      store = std::make_unique<RedisClusterStore>(
          ClusterConfig{.redis = {.port = servers.cluster->seed_port()}, .groups = o.groups});
    }
    fleet.push_back(std::make_unique<Instance>(std::move(store), "i" + std::to_string(i), o.keys,
                                               o.interval_ms));
  }
  const double build_s = std::chrono::duration<double>(Clock::now() - t_build).count();

  // Every instance syncs every interval, instance i at i/n of it; thread t serves the
  // instances i with i % threads == t, in phase order.
  const auto interval = std::chrono::milliseconds(o.interval_ms);
  const auto warmup = 3 * std::chrono::seconds(1);
  const auto start = Clock::now() + std::chrono::milliseconds(100);
  const auto measure_from = start + warmup;
  const auto stop = measure_from + std::chrono::seconds(o.seconds);
  std::mutex mu;
  std::vector<double> took_ms;
  std::atomic<std::int64_t> syncs{0}, failed{0}, late{0};
  std::string last_error;
  std::vector<std::thread> pool;
  const int threads = std::min(o.threads, n);
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<double> mine;
      std::vector<int> own;
      for (int i = t; i < n; i += threads) own.push_back(i);
      for (std::int64_t round = 0;; ++round) {
        for (int i : own) {
          const auto due = start + round * interval + interval * i / n;
          if (due >= stop) goto done;
          const auto now = Clock::now();
          if (now < due) {
            std::this_thread::sleep_until(due);
          } else if (now - due > interval && due >= measure_from) {
            late.fetch_add(1);
          }
          const auto t0 = Clock::now();
          auto r = fleet[static_cast<std::size_t>(i)]->fleet->sync();
          const auto t1 = Clock::now();
          if (due < measure_from) continue;
          syncs.fetch_add(1);
          mine.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
          if (!r) {
            failed.fetch_add(1);
            std::lock_guard lock(mu);
            last_error = r.error().message;
          }
        }
      }
    done:
      std::lock_guard lock(mu);
      took_ms.insert(took_ms.end(), mine.begin(), mine.end());
    });
  }
  // The changes: 1 % of the keys per interval, each decided by the next instance.
  std::thread changer([&] {
    const int per_interval =
        o.change > 0 ? std::max(1, static_cast<int>(o.change * o.keys + 0.5)) : 0;
    std::size_t key = 0, who = 0;
    for (auto due = start; due < stop; due += interval) {
      std::this_thread::sleep_until(due);
      for (int c = 0; c < per_interval; ++c) {
        fleet[who % fleet.size()]->flip(key % static_cast<std::size_t>(o.keys));
        ++key, who += 7;
      }
    }
  });
  std::this_thread::sleep_until(measure_from);
  const auto masters = servers.masters();
  std::vector<NodeStats> before;
  for (auto* m : masters) before.push_back(node_stats(*m));
  const double cpu0 = process_cpu_seconds();
  const auto m0 = Clock::now();
  std::this_thread::sleep_until(stop);
  std::vector<NodeStats> after;
  for (auto* m : masters) after.push_back(node_stats(*m));
  const double cpu1 = process_cpu_seconds();
  const double secs = std::chrono::duration<double>(Clock::now() - m0).count();
  changer.join();
  for (auto& th : pool) th.join();

  std::uint64_t adopted = 0, errors = 0;
  for (const auto& in : fleet) {
    const FleetReading r = in->fleet->reading();
    adopted += r.adopted_opens + r.adopted_closes;
    errors += r.sync_errors;
  }
  std::vector<double> sorted = took_ms;
  const double p50 = at(sorted, 0.50), p99 = at(sorted, 0.99);
  const double max = sorted.empty() ? 0 : sorted.back();
  std::printf(
      "%-10s instances %5d  keys %d  syncs/s %7.0f (late %lld, failed %lld)  sync p50 %6.2f ms  "
      "p99 %7.2f ms  max %7.1f ms  adopted %llu  client CPU %.2f cores  (built in %.1f s)\n",
      o.store.c_str(), n, o.keys, static_cast<double>(syncs.load()) / secs,
      static_cast<long long>(late.load()), static_cast<long long>(failed.load()), p50, p99, max,
      static_cast<unsigned long long>(adopted), (cpu1 - cpu0) / secs, build_s);
  double total_cmds = 0, total_cpu = 0;
  for (std::size_t i = 0; i < masters.size(); ++i) {
    const double cmds = (after[i].commands - before[i].commands) / secs;
    const double eval = (after[i].evalsha - before[i].evalsha) / secs;
    const double cpu = (after[i].cpu - before[i].cpu) / secs;
    total_cmds += cmds, total_cpu += cpu;
    std::printf("  node :%d  commands/s %9.0f  evalsha/s %7.0f  CPU %5.1f %% of a core\n",
                masters[i]->port(), cmds, eval, 100 * cpu);
  }
  std::printf(
      "  all nodes  commands/s %9.0f  CPU %5.1f %%; per instance: %.1f commands/s, %.3f %% "
      "CPU\n",
      total_cmds, 100 * total_cpu, total_cmds / n, 100 * total_cpu / n);
  if (!last_error.empty()) std::printf("  last sync error: %s\n", last_error.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (!testing::redis_server_available()) {
    std::fprintf(stderr, "bulwark_fleet_load: redis-server is not installed\n");
    return 2;
  }
  Servers servers;
  if (o.store != "cluster") {
    servers.one = std::make_unique<testing::RedisServer>();
    if (!servers.one->start()) {
      std::fprintf(stderr, "bulwark_fleet_load: redis-server did not start\n");
      return 1;
    }
  } else {
    servers.cluster = std::make_unique<testing::RedisCluster>();
    if (const std::string why = servers.cluster->start(); !why.empty()) {
      std::fprintf(stderr, "bulwark_fleet_load: %s\n", why.c_str());
      return 1;
    }
    // Which master serves each group (the groups' hash tags decide).
    RedisClusterStore probe(
        ClusterConfig{.redis = {.port = servers.cluster->seed_port()}, .groups = o.groups});
    SyncRequest hello;
    hello.instance = "probe";
    hello.now_ms = 1;
    (void)probe.exchange(hello);
    std::map<std::string, int> per_node;
    for (std::uint32_t g = 0; g < o.groups; ++g) ++per_node[probe.node_of(g)];
    std::printf("cluster: %u groups over the masters:", o.groups);
    for (const auto& [node, count] : per_node) std::printf(" %s=%d", node.c_str(), count);
    std::printf("\n");
  }
  for (int n : o.instances) run(o, servers, n);
  return 0;  // the servers stop with `servers`
}
