#include "demo.h"

#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <deque>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
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
  void set_latency(milliseconds d) { latency_ms_ = static_cast<int>(d.count()); }
  int in_flight() const { return in_flight_.load(); }
  int take_peak() { return peak_.exchange(0); }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<int> latency_ms_{12};
  std::atomic<int> in_flight_{0};
  std::atomic<int> peak_{0};
};

struct Result {
  std::string name;
  int pages = 0, full = 0, degraded = 0, lost = 0;
  int peak_in_flight = 0;      // the caller's calls in flight at once
  int peak_upstream_busy = 0;  // requests the upstream was working on at once
  std::optional<double> time_to_open_s;
  double p50_ms = 0, p99_ms = 0;
};

// The "after" breaker: slow-call and failure rates over the last 20 calls.
http::Config after_config(const DemoOptions&) {
  http::Config c;
  c.name = "reviews-after";
  c.breaker = {.name = "reviews",
               .window = {.size = 20},
               .minimum_calls = 10,
               .failure_rate = 0.5,
               .slow_call_rate = 0.5,
               .slow_call_duration = milliseconds(40),
               .open_duration = milliseconds(2000)};
  c.bulkhead = {.name = "reviews", .max_concurrent = 8};
  c.retry = RetryConfig{.name = "reviews", .max_attempts = 1};
  c.default_timeout = milliseconds(80);
  return c;
}

http::Config before_config() {
  http::Config c;
  c.name = "reviews-before";
  c.breaker = {.name = "reviews", .consecutive_failures = 65535, .open_duration = milliseconds(1)};
  c.bulkhead = {.name = "reviews", .max_concurrent = 100000};
  c.retry = RetryConfig{.name = "reviews", .max_attempts = 1};
  c.default_timeout = std::chrono::seconds(5);
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
  up.set_latency(o.fast_latency);
  up.take_peak();
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
  const http::Breaker* breaker = client.breaker_for(url);
  auto next = start;
  auto next_progress = start;
  while (next < end) {
    std::this_thread::sleep_until(next);
    const auto now = Clock::now();
    if (!degraded_now && now >= degrade_at) {
      up.set_latency(o.slow_latency);
      degraded_now = true;
    }
    {
      std::lock_guard lock(mu);
      queue.push_back(next);
    }
    cv.notify_one();
    ++pages;
    if (degraded_now && !opened && breaker != nullptr && breaker->state() == State::open)
      opened = std::chrono::duration<double>(now - degrade_at).count();
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
  r.time_to_open_s = opened;
  r.p50_ms = percentile(latencies, 0.50);
  r.p99_ms = percentile(latencies, 0.99);
  return r;
}

}  // namespace

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
  out.flush();
  const Result before = run_phase("before", before_config(), false, up, o);
  const Result after = run_phase("after", after_config(o), true, up, o);

  auto row = [&](const std::string& label, auto get) {
    out << "  " << std::left << std::setw(26) << label << std::right << std::setw(12) << get(before)
        << std::setw(12) << get(after) << "\n";
  };
  out << "  " << std::left << std::setw(26) << "" << std::right << std::setw(12) << "before"
      << std::setw(12) << "after"
      << "\n";
  row("pages requested", [](const Result& r) { return std::to_string(r.pages); });
  row("served fully", [](const Result& r) { return std::to_string(r.full); });
  row("served degraded", [](const Result& r) { return std::to_string(r.degraded); });
  row("lost", [](const Result& r) { return std::to_string(r.lost); });
  row("peak calls in flight", [](const Result& r) { return std::to_string(r.peak_in_flight); });
  row("peak upstream busy", [](const Result& r) { return std::to_string(r.peak_upstream_busy); });
  row("time to open", [](const Result& r) {
    if (!r.time_to_open_s) return std::string("never");
    std::ostringstream s;
    s << std::fixed << std::setprecision(2) << *r.time_to_open_s << " s";
    return s.str();
  });
  auto ms = [](double v) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(1) << v << " ms";
    return s.str();
  };
  row("page p50 (served)", [&](const Result& r) { return ms(r.p50_ms); });
  row("page p99 (served)", [&](const Result& r) { return ms(r.p99_ms); });
  return 0;
}

}  // namespace bulwark::cli
