#include "demo.h"

#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bulwark/http/client.h"

namespace bulwark::cli {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The reviews service: answers after `latency`, never fails.
class Upstream {
 public:
  Upstream() {
    std::signal(SIGPIPE, SIG_IGN);
    server_.new_task_queue = [] { return new httplib::ThreadPool(160); };
    server_.set_tcp_nodelay(true);
    server_.set_keep_alive_max_count(1000000);
    server_.Get("/reviews", [this](const httplib::Request&, httplib::Response& res) {
      if (degraded_.load()) ++degraded_requests_;
      const int now = ++in_flight_;
      int peak = peak_.load();
      while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
      }
      std::this_thread::sleep_for(milliseconds(latency_ms_.load()));
      --in_flight_;
      res.set_content("[\"clean rooms\",\"great breakfast\"]", "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    if (port_ > 0) {
      thread_ = std::thread([this] { server_.listen_after_bind(); });
      while (!server_.is_running()) std::this_thread::sleep_for(milliseconds(1));
    }
  }
  ~Upstream() {
    if (thread_.joinable()) {
      server_.stop();
      thread_.join();
    }
  }
  bool ok() const { return port_ > 0; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/reviews"; }
  // From now on, answer after `d`; requests received while `degraded` are counted.
  void set_latency(milliseconds d, bool degraded) {
    latency_ms_ = static_cast<int>(d.count());
    degraded_ = degraded;
  }
  int take_degraded_requests() { return degraded_requests_.exchange(0); }
  // The scenario is over (pages still queued are served late): stop counting.
  void stop_counting() { degraded_ = false; }
  int in_flight() const { return in_flight_.load(); }
  int take_peak() { return peak_.exchange(0); }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<int> latency_ms_{12};
  std::atomic<bool> degraded_{false};
  std::atomic<int> degraded_requests_{0};
  std::atomic<int> in_flight_{0};
  std::atomic<int> peak_{0};
};

struct Result {
  std::string name;
  int pages = 0, full = 0, degraded = 0, lost = 0;
  int peak_in_flight = 0;        // the caller's calls in flight at once
  int peak_upstream_busy = 0;    // requests the upstream was working on at once
  int calls_while_degraded = 0;  // requests the upstream got while slow
  std::optional<double> time_to_open_ms;
  double p50_ms = 0, p99_ms = 0;
};

// The two configurations, shared by the live run and the lab's prediction.
constexpr milliseconds kBeforeTimeout{5000};
constexpr milliseconds kAfterTimeout{80};
constexpr std::uint32_t kAfterBulkhead = 8;

// The "after" breaker: slow-call and failure rates over the last 20 calls.
CountWindowConfig after_breaker() {
  return {.name = "reviews",
          .window = {.size = 20},
          .minimum_calls = 10,
          .failure_rate = 0.5,
          .slow_call_rate = 0.5,
          .slow_call_duration = milliseconds(40),
          .open_duration = milliseconds(2000)};
}

http::Config after_config() {
  http::Config c;
  c.name = "reviews-after";
  c.breaker = after_breaker();
  c.bulkhead = {.name = "reviews", .max_concurrent = kAfterBulkhead};
  c.retry = RetryConfig{.name = "reviews", .max_attempts = 1};
  c.default_timeout = kAfterTimeout;
  return c;
}

http::Config before_config() {
  http::Config c;
  c.name = "reviews-before";
  c.breaker = {.name = "reviews", .consecutive_failures = 65535, .open_duration = milliseconds(1)};
  c.bulkhead = {.name = "reviews", .max_concurrent = 100000};
  c.retry = RetryConfig{.name = "reviews", .max_attempts = 1};
  c.default_timeout = kBeforeTimeout;
  return c;
}

double percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

Result run_phase(const std::string& name, const http::Config& config, bool fallback, Upstream& up,
                 const DemoOptions& o) {
  up.set_latency(o.fast_latency, false);
  up.take_peak();
  up.take_degraded_requests();
  http::Client client(config);
  const std::string url = up.url();
  const bool tty = isatty(STDERR_FILENO) != 0;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<Clock::time_point> queue;  // arrival times of pages waiting for a worker
  bool done = false;
  std::atomic<int> full{0}, degraded{0}, lost{0}, pages{0};
  std::atomic<int> in_flight{0}, peak_in_flight{0};  // the caller's calls to the upstream
  std::vector<double> latencies;

  auto worker = [&] {
    for (;;) {
      Clock::time_point arrived;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return done || !queue.empty(); });
        if (queue.empty()) return;
        arrived = queue.front();
        queue.pop_front();
      }
      if (Clock::now() - arrived > o.page_patience) {
        ++lost;  // the visitor gave up before the page started
        continue;
      }
      const int calling = ++in_flight;
      int seen = peak_in_flight.load();
      while (calling > seen && !peak_in_flight.compare_exchange_weak(seen, calling)) {
      }
      auto r = client.get(url);
      --in_flight;
      if (r) {
        ++full;
      } else if (fallback) {
        ++degraded;  // the page without reviews
      } else {
        ++lost;  // no fallback: an error page
        continue;
      }
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - arrived).count();
      std::lock_guard lock(mu);
      latencies.push_back(ms);
    }
  };
  std::vector<std::thread> workers;
  for (int i = 0; i < o.workers; ++i) workers.emplace_back(worker);

  const auto start = Clock::now();
  const auto degrade_at = start + o.healthy;
  const auto end = degrade_at + o.degraded;
  const auto period =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / o.rate));
  bool degraded_now = false;
  std::optional<double> opened;
  const http::BreakerRef breaker = client.breaker_for(url);
  auto next = start;
  auto next_progress = start;
  while (next < end) {
    std::this_thread::sleep_until(next);
    const auto now = Clock::now();
    if (!degraded_now && now >= degrade_at) {
      up.set_latency(o.slow_latency, true);
      degraded_now = true;
    }
    {
      std::lock_guard lock(mu);
      queue.push_back(next);
    }
    cv.notify_one();
    ++pages;
    if (degraded_now && !opened && breaker != nullptr && breaker->state() == State::open)
      opened = std::chrono::duration<double, std::milli>(now - degrade_at).count();
    if (tty && now >= next_progress) {
      std::fprintf(stderr,
                   "\r[%-6s] t=%5.1fs %s pages %4d full %4d degraded %4d lost %4d in flight %3d  ",
                   name.c_str(), std::chrono::duration<double>(now - start).count(),
                   degraded_now ? "SLOW" : "fast", pages.load(), full.load(), degraded.load(),
                   lost.load(), up.in_flight());
      next_progress = now + milliseconds(200);
    }
    next += period;
  }
  up.stop_counting();
  {
    std::lock_guard lock(mu);
    done = true;
  }
  cv.notify_all();
  for (auto& t : workers) t.join();
  if (tty) std::fprintf(stderr, "\r%100s\r", "");

  Result r;
  r.name = name;
  r.pages = pages;
  r.full = full;
  r.degraded = degraded;
  r.lost = lost;
  r.peak_in_flight = peak_in_flight.load();
  r.peak_upstream_busy = up.take_peak();
  r.calls_while_degraded = up.take_degraded_requests();
  r.time_to_open_ms = opened;
  r.p50_ms = percentile(latencies, 0.50);
  r.p99_ms = percentile(latencies, 0.99);
  return r;
}

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

std::string count(std::uint64_t v) { return std::to_string(v); }

}  // namespace

lab::Scenario demo_scenario(const DemoOptions& o) {
  lab::Scenario s;
  s.name = "bulwark demo";
  s.description = "The hotel-reviews incident at the scale of bulwark demo.";
  s.source = "bulwark demo";
  s.duration = o.healthy + o.degraded;
  s.arrivals = {.process = lab::ArrivalProcess::constant, .rate = o.rate};
  s.caller = {.workers = static_cast<std::uint32_t>(o.workers), .work = Nanos::zero()};
  s.dependency.name = "reviews";
  using Latency = lab::Latency;
  s.dependency.phases = {
      {.name = "fast",
       .start = Nanos::zero(),
       .latency = {.distribution = Latency::Distribution::constant, .value = o.fast_latency}},
      {.name = "slow, no errors",
       .start = o.healthy,
       .latency = {.distribution = Latency::Distribution::constant, .value = o.slow_latency},
       .degraded = true},
  };
  lab::ResilienceConfig before;
  before.name = "before";
  before.timeout = kBeforeTimeout;
  lab::ResilienceConfig after;
  after.name = "after";
  after.timeout = kAfterTimeout;
  after.breaker = lab::BreakerSpec(after_breaker());
  after.bulkhead = BulkheadConfig{.name = "reviews", .max_concurrent = kAfterBulkhead};
  after.fallback = Reasons::all();
  s.configurations = {before, after};
  return s;
}

std::vector<DemoComparison> compare_with_prediction(const std::string& configuration,
                                                    const DemoMeasurement& m,
                                                    const lab::ConfigurationResult& p,
                                                    const DemoTolerance& t) {
  auto counted = [&](const char* figure, std::uint64_t measured, std::uint64_t predicted) {
    const double a = static_cast<double>(measured), b = static_cast<double>(predicted);
    const double allowed = std::max(t.relative * b, t.absolute);
    return DemoComparison{configuration, figure, a, b, std::abs(a - b) <= allowed};
  };
  std::vector<DemoComparison> rows;
  rows.push_back(counted("calls while degraded", m.calls_while_degraded, p.calls_while_degraded));
  if (p.served_degraded > 0 || m.served_degraded > 0)
    rows.push_back(counted("pages degraded", m.served_degraded, p.served_degraded));
  if (p.has_breaker) {
    std::optional<double> predicted;
    if (p.time_to_open) {
      predicted = std::chrono::duration<double, std::milli>(*p.time_to_open).count();
    }
    const bool within = m.time_to_open_ms && predicted
                            ? std::abs(*m.time_to_open_ms - *predicted) <= t.open_ms
                            : m.time_to_open_ms.has_value() == predicted.has_value();
    rows.push_back({configuration, "time to open", m.time_to_open_ms, predicted, within});
  }
  return rows;
}

int run_demo(const DemoOptions& o, std::ostream& out) {
  Upstream up;
  if (!up.ok()) {
    std::cerr << "bulwark: error: could not start the demo upstream on 127.0.0.1\n";
    return 1;
  }
  out << "The hotel-reviews incident on 127.0.0.1: " << o.rate << " pages/s, " << o.workers
      << " page workers; reviews answer in " << o.fast_latency.count() << " ms, then in "
      << o.slow_latency.count() << " ms (no errors) for "
      << std::chrono::duration<double>(o.degraded).count() << " s.\n";
  out << "  before: timeout 5 s, nothing else\n"
      << "  after:  timeout 80 ms, breaker (slow > 40 ms or failures, 50 % of 20 calls, open 2 "
         "s),\n"
      << "          bulkhead 8, fallback: the page without reviews\n\n";
  // An output that cannot be written (a full disk, /dev/full) stops the demo before its
  // 30 seconds, with the reason.
  errno = 0;
  if (!out.flush()) {
    const int err = errno != 0 ? errno : EIO;
    throw std::runtime_error(std::string("cannot write to the output: ") + std::strerror(err));
  }
  const Result before = run_phase("before", before_config(), false, up, o);
  const Result after = run_phase("after", after_config(), true, up, o);
  // The same scenario in virtual time (a fraction of a second).
  const lab::SimulationResult sim = lab::simulate(demo_scenario(o));
  const lab::ConfigurationResult& sim_before = sim.configurations.at(0);
  const lab::ConfigurationResult& sim_after = sim.configurations.at(1);

  auto row = [&](const std::string& label, auto measured, auto predicted) {
    out << "  " << std::left << std::setw(24) << label << std::right << std::setw(11)
        << measured(before) << std::setw(11) << measured(after) << std::setw(13)
        << predicted(sim_before) << std::setw(11) << predicted(sim_after) << "\n";
  };
  using Sim = lab::ConfigurationResult;
  out << "  " << std::left << std::setw(24) << "" << std::right << std::setw(22) << "measured"
      << std::setw(24) << "bulwark simulate\n";
  out << "  " << std::left << std::setw(24) << "" << std::right << std::setw(11) << "before"
      << std::setw(11) << "after" << std::setw(13) << "before" << std::setw(11) << "after"
      << "\n";
  row(
      "pages requested", [](const Result& r) { return count(r.pages); },
      [](const Sim& r) { return count(r.requests); });
  row(
      "served fully", [](const Result& r) { return count(r.full); },
      [](const Sim& r) { return count(r.served_full); });
  row(
      "served degraded", [](const Result& r) { return count(r.degraded); },
      [](const Sim& r) { return count(r.served_degraded); });
  row(
      "lost", [](const Result& r) { return count(r.lost); },
      [](const Sim& r) { return count(r.lost + r.failed); });
  row(
      "calls while degraded", [](const Result& r) { return count(r.calls_while_degraded); },
      [](const Sim& r) { return count(r.calls_while_degraded); });
  row(
      "peak calls in flight", [](const Result& r) { return count(r.peak_in_flight); },
      [](const Sim& r) { return count(r.peak_in_flight); });
  row(
      "peak upstream busy", [](const Result& r) { return count(r.peak_upstream_busy); },
      [](const Sim&) { return std::string("-"); });
  row(
      "time to open",
      [](const Result& r) {
        return r.time_to_open_ms ? fixed(*r.time_to_open_ms / 1000, 2) + " s"
                                 : std::string("never");
      },
      [](const Sim& r) {
        if (!r.has_breaker) return std::string("never");
        if (!r.time_to_open) return std::string("never");
        return fixed(std::chrono::duration<double>(*r.time_to_open).count(), 2) + " s";
      });
  row(
      "page p50 (served)", [](const Result& r) { return fixed(r.p50_ms, 1) + " ms"; },
      [](const Sim& r) {
        return fixed(std::chrono::duration<double, std::milli>(r.p50).count(), 1) + " ms";
      });
  row(
      "page p99 (served)", [](const Result& r) { return fixed(r.p99_ms, 1) + " ms"; },
      [](const Sim& r) {
        return fixed(std::chrono::duration<double, std::milli>(r.p99).count(), 1) + " ms";
      });

  // The figures that do not depend on how long a page may wait for a worker (the lab
  // loses it at once), held to the tolerance.
  const DemoTolerance& t = kDemoTolerance;
  out << "\n  measured vs predicted (within " << fixed(t.relative * 100, 0) << " % or "
      << fixed(t.absolute, 0) << "; time to open within " << fixed(t.open_ms, 0) << " ms):\n";
  auto measurement = [](const Result& r) {
    return DemoMeasurement{
        .calls_while_degraded = static_cast<std::uint64_t>(r.calls_while_degraded),
        .served_degraded = static_cast<std::uint64_t>(r.degraded),
        .time_to_open_ms = r.time_to_open_ms};
  };
  std::vector<DemoComparison> rows =
      compare_with_prediction("before", measurement(before), sim_before, t);
  for (auto& c : compare_with_prediction("after", measurement(after), sim_after, t))
    rows.push_back(std::move(c));
  int outside = 0;
  for (const DemoComparison& c : rows) {
    const bool ms = c.figure == "time to open";
    auto show = [&](const std::optional<double>& v) {
      return v ? fixed(*v, 0) + (ms ? " ms" : "") : std::string("never");
    };
    out << "  " << std::left << std::setw(8) << c.configuration << std::setw(22) << c.figure
        << std::right << std::setw(10) << show(c.measured) << " vs " << std::setw(9)
        << show(c.predicted) << "  " << (c.within ? "within" : "OUTSIDE") << "\n";
    if (!c.within) ++outside;
  }
  out << "  "
      << (outside == 0 ? std::string("all within the tolerance")
                       : std::to_string(outside) + " outside the tolerance")
      << "\n";
  errno = 0;
  if (!out.flush()) {
    const int err = errno != 0 ? errno : EIO;
    throw std::runtime_error(std::string("cannot write to the output: ") + std::strerror(err));
  }
  return 0;
}

}  // namespace bulwark::cli
