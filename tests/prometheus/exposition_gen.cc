// Writes what the real Prometheus tools check (see CMakeLists.txt next to this file):
//
//   exposition_gen scrape
//       One exposition of a deterministic scenario (virtual time): a registry of hosts
//       with tricky keys, detailed metrics and component counters, a registry with
//       integer keys, and a standalone breaker. check_exposition.py knows the scenario
//       and checks the values it parses back.
//
//   exposition_gen scrape-prometheus-cpp
//       The same scenario served through bulwark::prometheus_cpp: a Collector whose
//       families prometheus-cpp's own TextSerializer writes (built when that target is).
//
//   exposition_gen serve
//       The same scenario behind a prometheus-cpp Exposer on a free loopback port: prints
//       the port, then serves until its standard input closes. A real Prometheus server
//       scrapes it (check_exposition.py prometheus-server).
//
//   exposition_gen alert-test <rules.yml> <out.yml>
//       Runs a second scenario for 20 virtual minutes, scraping every minute, and writes
//       a `promtool test rules` file whose input series are the values this exporter
//       actually produced, with the alerts that must (and must not) fire.

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bulwark/prometheus.h"
#include "bulwark/registry.h"

#ifdef BULWARK_TEST_PROMETHEUS_CPP
#include <prometheus/exposer.h>
#include <prometheus/text_serializer.h>

#include <memory>

#include "bulwark/prometheus_cpp/collector.h"
#endif

namespace {

using namespace std::chrono_literals;
using bulwark::ManualClock;
using bulwark::Outcome;
using bulwark::State;

using Breaker = bulwark::BasicCircuitBreaker<ManualClock>;
using Hosts = bulwark::BasicRegistry<std::string, Breaker>;
using Partitions = bulwark::BasicRegistry<int, Breaker>;

void call(Hosts& reg, std::string_view key, Outcome outcome, bulwark::Nanos took) {
  auto c = reg.try_acquire(key);
  if (c) c->record(outcome, took);
}

// How the scenario's exposition leaves the process: `write` writes it.
using Writer = std::function<void(std::ostream&)>;
using Emit = std::function<int(const Writer& write)>;

// Keep in step with check_exposition.py.
int scrape(const Emit& emit) {
  ManualClock clock;
  Hosts hosts({.name = "hosts",
               .breaker = {.name = "upstream", .consecutive_failures = 2, .open_duration = 60s},
               .detailed_metrics = true},
              clock);

  // plain:443 — 3 successes (3 ms, 7 ms, 120 ms) and 1 failure (900 ms): CLOSED.
  call(hosts, "plain:443", Outcome::success, 3ms);
  call(hosts, "plain:443", Outcome::failure, 900ms);
  call(hosts, "plain:443", Outcome::success, 7ms);
  call(hosts, "plain:443", Outcome::success, 120ms);
  {
    auto h = hosts.get("plain:443");
    auto& m = h.metrics()->components;
    m.record_fallback(bulwark::FallbackKind::rejected);
    m.record_fallback(bulwark::FallbackKind::rejected);
    m.record_fallback(bulwark::FallbackKind::failed);
    m.record_retry_call(bulwark::RetryCallKind::successful_with_retry);
    m.record_retry();
    m.record_retry_budget_exhausted();
    m.bulkhead_acquired();
    m.bulkhead_acquired();
    m.bulkhead_released();
    m.bulkhead_rejected();
  }
  // Tricky keys, one success each (1 ms).
  // Two keys that differ only in an invalid UTF-8 byte: two series.
  for (const char* key :
       {"quote\"d", "back\\slash", "new\nline", "ünïcødé ☃ 🚀", "bad \xff utf8", "bad \xfe utf8"}) {
    call(hosts, key, Outcome::success, 1ms);
  }
  // down:443 opens at t=0 and its probes keep failing: open for the whole 7 minutes.
  call(hosts, "down:443", Outcome::failure, 10ms);
  call(hosts, "down:443", Outcome::failure, 10ms);
  for (int i = 0; i < 3; ++i) (void)hosts.try_acquire("down:443");  // 3 rejections
  for (int minute = 1; minute <= 7; ++minute) {
    clock.advance(60s);
    call(hosts, "down:443", Outcome::failure, 5ms);  // the probe fails: OPEN again
  }
  // By now t = 420 s. recovered:443 opened at 420 s - 0 and closed again: open_seconds 0.
  call(hosts, "recovered:443", Outcome::failure, 1ms);
  call(hosts, "recovered:443", Outcome::failure, 1ms);
  clock.advance(60s);                                   // t = 480 s
  call(hosts, "recovered:443", Outcome::success, 2ms);  // the probe succeeds: CLOSED
  // forced:443 forced open by an operator at 480 s, 30 s before the scrape.
  (void)hosts.get("forced:443")->transition_to(State::forced_open);
  clock.advance(30s);  // t = 510 s: the scrape

  Partitions partitions({.name = "partitions", .breaker = {.name = "ledger"}}, clock);
  for (int p = 0; p < 3; ++p) partitions.try_acquire(p)->record(Outcome::success);

  // A breaker type with a sliding window: failure and slow-call ratios (NaN while the
  // window holds fewer than minimum_calls), and what the window holds.
  bulwark::BasicRegistry<std::string,
                         bulwark::BasicCircuitBreaker<ManualClock, bulwark::CountWindow>>
      rated({.name = "rated",
             .breaker = {.name = "rated",
                         .window = {.size = 4},
                         .minimum_calls = 4,
                         .failure_rate = 0.9,
                         .slow_call_duration = 100ms,
                         .consecutive_failures = 0}},
            clock);
  rated.try_acquire("few")->record(Outcome::failure, 200ms);
  rated.try_acquire("many")->record(Outcome::success, 10ms);
  rated.try_acquire("many")->record(Outcome::success, 300ms);
  rated.try_acquire("many")->record(Outcome::success, 10ms);
  rated.try_acquire("many")->record(Outcome::failure, 150ms);

  Breaker solo({.name = "solo", .consecutive_failures = 1}, clock);
  bulwark::BreakerMetrics solo_metrics;
  auto policy = solo.policy();
  const auto id = solo_metrics.track(policy, &solo);
  solo.try_acquire()->record(Outcome::success);

  const int status = emit([&](std::ostream& out) {
    bulwark::prometheus::Exposition e;
    e.add(hosts);
    e.add(partitions);
    e.add(rated);
    e.add(solo, &solo_metrics, clock);
    e.write(out);
  });
  policy.remove_listener(id);
  return status;
}

int to_stdout(const Writer& write) {
  write(std::cout);
  return 0;
}

#ifdef BULWARK_TEST_PROMETHEUS_CPP
int through_prometheus_cpp(const Writer& write) {
  bulwark::prometheus_cpp::Collector collector;
  collector.add(write);
  const auto families = collector.Collect();
  if (!collector.last_error().empty()) {
    std::cerr << "exposition_gen: " << collector.last_error() << "\n";
    return 1;
  }
  std::cout << prometheus::TextSerializer().Serialize(families);
  return 0;
}

int serve(const Writer& write) {
  auto collector = std::make_shared<bulwark::prometheus_cpp::Collector>();
  collector->add(write);
  prometheus::Exposer exposer("127.0.0.1:0");
  exposer.RegisterCollectable(collector);
  std::cout << exposer.GetListeningPorts().at(0) << std::endl;
  std::string ignored;
  while (std::getline(std::cin, ignored)) {
  }
  return 0;
}
#endif

// Second scenario: "open longer than 5 minutes" must fire for a breaker that has been
// failing for 10 minutes (its probes fail every minute, so it goes OPEN -> HALF_OPEN ->
// OPEN and its time in state never exceeds a minute), and not for one that recovered
// and reopened 2 minutes ago.
int alert_test(const std::string& rules, const std::string& out_path) {
  ManualClock clock;
  Hosts hosts({.name = "hosts",
               .breaker = {.name = "upstream", .consecutive_failures = 1, .open_duration = 60s}},
              clock);
  (void)hosts.get("down:443");
  (void)hosts.get("flaky:443");
  std::map<std::string, std::vector<std::string>> series;  // key -> open_seconds per minute
  for (int minute = 0; minute <= 20; ++minute) {
    // What happens during this minute, then the scrape at its end.
    if (minute == 2) {
      call(hosts, "down:443", Outcome::failure, 1ms);
      call(hosts, "flaky:443", Outcome::failure, 1ms);
    } else if (minute > 2) {
      call(hosts, "down:443", Outcome::failure, 1ms);  // every probe fails
      // flaky:443's probes fail until minute 8, when one succeeds and closes it; it is
      // healthy until minute 16, when it opens again and stays open.
      const bool healthy = minute >= 8 && minute < 16;
      call(hosts, "flaky:443", healthy ? Outcome::success : Outcome::failure, 1ms);
    }
    std::ostringstream text;
    bulwark::prometheus::write(text, hosts);
    std::istringstream lines(text.str());
    for (std::string line; std::getline(lines, line);) {
      const std::string prefix = "bulwark_circuitbreaker_open_seconds{name=\"upstream\",key=\"";
      if (line.rfind(prefix, 0) != 0) continue;
      const auto end = line.find('"', prefix.size());
      series[line.substr(prefix.size(), end - prefix.size())].push_back(
          line.substr(line.rfind(' ') + 1));
    }
    clock.advance(60s);
  }

  std::ofstream out(out_path);
  out << "# Generated by exposition_gen from bulwark's own exposition: open_seconds scraped\n"
         "# every minute of a virtual-time scenario (tests/prometheus/exposition_gen.cc).\n"
         "rule_files:\n  - "
      << rules
      << "\nevaluation_interval: 1m\n"
         "tests:\n  - interval: 1m\n    input_series:\n";
  for (const auto& [key, values] : series) {
    out << "      - series: 'bulwark_circuitbreaker_open_seconds{name=\"upstream\",key=\"" << key
        << "\"}'\n"
        << "        values: '";
    for (std::size_t i = 0; i < values.size(); ++i) out << (i ? " " : "") << values[i];
    out << "'\n";
  }
  // down:443 opened at the end of minute 2 (t=120 s) and never closed: open_seconds
  // passes 300 s at minute 7 and the alert fires from then on (no `for:`: the gauge
  // already measures the duration). flaky:443 reopened at minute 16: never 5 minutes.
  out << "    alert_rule_test:\n"
         "      - eval_time: 6m\n"
         "        alertname: CircuitBreakerOpenTooLong\n"
         "        exp_alerts: []\n"
         "      - eval_time: 12m\n"
         "        alertname: CircuitBreakerOpenTooLong\n"
         "        exp_alerts:\n"
         "          - exp_labels: {severity: warning, name: upstream, key: 'down:443'}\n"
         "            exp_annotations:\n"
         "              summary: \"Circuit breaker upstream (down:443) has been open for 10m 0s\"\n"
         "              description: \"It has rejected or probed calls instead of calling the "
         "dependency since it "
         "left CLOSED. A fallback may be hiding the failure: check the dependency.\"\n"
         "      - eval_time: 20m\n"
         "        alertname: CircuitBreakerOpenTooLong\n"
         "        exp_alerts:\n"
         "          - exp_labels: {severity: warning, name: upstream, key: 'down:443'}\n"
         "            exp_annotations:\n"
         "              summary: \"Circuit breaker upstream (down:443) has been open for 18m 0s\"\n"
         "              description: \"It has rejected or probed calls instead of calling the "
         "dependency since it "
         "left CLOSED. A fallback may be hiding the failure: check the dependency.\"\n";
  std::cout << "wrote " << out_path << " (" << series.size() << " series)\n";
  for (const auto& [key, values] : series) {
    std::cout << key << ":";
    for (const auto& v : values) std::cout << " " << v;
    std::cout << "\n";
  }
  return out ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "scrape") return scrape(to_stdout);
#ifdef BULWARK_TEST_PROMETHEUS_CPP
  if (mode == "scrape-prometheus-cpp") return scrape(through_prometheus_cpp);
  if (mode == "serve") return scrape(serve);
#endif
  if (mode == "alert-test" && argc == 4) return alert_test(argv[2], argv[3]);
  std::cerr << "usage: exposition_gen scrape | scrape-prometheus-cpp | serve | alert-test "
               "<rules.yml> <out.yml>\n";
  return 2;
}
