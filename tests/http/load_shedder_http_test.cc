// The load shedder as a real server's entry point, on loopback sockets.
//
// A cpp-httplib server on 127.0.0.1 serves /work behind a LoadShedder (limit 4: three
// slots for normal requests, the last kept for critical ones) and /health as critical.
// /work holds its caller until the test releases it, so the overload is made by the
// test, not by timing: the first three /work requests are served and held, and every
// other /work request of a bounded load generator must be refused with 503 and
// Retry-After while health checks keep getting 200. Each client sends its deadline in
// a test-local header; the server refuses requests whose deadline is shorter than its
// service-time estimate and never admits one whose deadline has passed. After the
// test releases the held requests the server answers again. Every wait is bounded.

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bulwark/load_shedder.h"

namespace bulwark {
namespace {

using namespace std::chrono_literals;

const bool kIgnoreSigpipe = [] {
  std::signal(SIGPIPE, SIG_IGN);
  return true;
}();

// The client's absolute deadline, in steady-clock nanoseconds (one process, one clock).
constexpr const char* kDeadlineHeader = "X-Test-Deadline-Ns";

class ShedServer {
 public:
  ShedServer() : shedder_(config(), FixedLimit(4)) {
    // A bounded pool: every client connection of the test fits, with room to spare.
    server_.new_task_queue = [] { return new httplib::ThreadPool(16); };
    server_.Get("/health", [this](const httplib::Request& req, httplib::Response& res) {
      serve(req, res, Priority::critical, false);
    });
    server_.Get("/work", [this](const httplib::Request& req, httplib::Response& res) {
      serve(req, res, Priority::normal, true);
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(1ms);
  }
  ~ShedServer() {
    release();
    server_.stop();
    thread_.join();
  }

  static LoadShedderConfig config() {
    LoadShedderConfig c;
    c.name = "loopback";
    c.max_queue = 4;
    c.target_delay = 2ms;
    c.interval = 20ms;
    // A pessimistic first estimate that fast health checks lower only slowly: a 1 ms
    // deadline stays far below it for the whole test.
    c.initial_service_time = 1s;
    c.service_time_weight = 0.01;
    return c;
  }

  int port() const { return port_; }
  LoadShedder& shedder() { return shedder_; }
  void release() {
    {
      std::lock_guard lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }
  bool wait_held(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 30s, [&] { return held_ >= n; });
  }
  int expired_at_admission() const { return expired_at_admission_.load(); }
  int outlived() const { return outlived_.load(); }

 private:
  void serve(const httplib::Request& req, httplib::Response& res, Priority p, bool hold) {
    Deadline deadline;
    if (req.has_header(kDeadlineHeader))
      deadline = Deadline::at(std::stoll(req.get_header_value(kDeadlineHeader)));
    const Context ctx(SteadyClock{}, {}, deadline);
    auto admitted = shedder_.acquire(ctx, p);
    if (!admitted) {
      res.status = shedder_.config().http_status;
      res.set_header("Retry-After",
                     std::to_string(retry_after_seconds(admitted.error().retry_after)));
      res.set_header("X-Shed-Reason", std::string(to_string(admitted.error().reason)));
      return;
    }
    if (ctx.expired()) expired_at_admission_.fetch_add(1);
    if (hold) {
      // The work: wait for the test, never past the caller's deadline.
      std::unique_lock lock(mu_);
      ++held_;
      cv_.notify_all();
      const auto until = std::chrono::steady_clock::time_point(Nanos(deadline.ticks()));
      const bool done = deadline.is_never()
                            ? (cv_.wait_for(lock, 30s, [&] { return released_; }))
                            : cv_.wait_until(lock, until, [&] { return released_; });
      --held_;
      if (!done) {
        outlived_.fetch_add(released_ ? 0 : 1);  // the caller has given up: stop working
        res.status = 504;
        return;
      }
    }
    res.status = 200;
    res.set_content("ok", "text/plain");
  }

  LoadShedder shedder_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
  int held_ = 0;
  std::atomic<int> expired_at_admission_{0};
  std::atomic<int> outlived_{0};
};

struct Reply {
  int status = 0;  // 0: transport error
  std::string retry_after;
  std::string reason;
};

Reply get(int port, const std::string& path, Nanos deadline_in) {
  httplib::Client client("127.0.0.1", port);
  const auto deadline = Deadline::after(SteadyClock{}, deadline_in);
  const auto budget = std::chrono::duration_cast<std::chrono::microseconds>(std::max<Nanos>(
      deadline_in, 10s));  // slack for the transport (a SYN retried after 1 s): the server decides
  client.set_connection_timeout(budget);
  client.set_read_timeout(budget);
  client.set_write_timeout(budget);
  httplib::Headers headers{{kDeadlineHeader, std::to_string(deadline.ticks())}};
  auto res = client.Get(path, headers);
  if (!res) return {0, "", httplib::to_string(res.error())};
  return {res->status, res->get_header_value("Retry-After"),
          res->get_header_value("X-Shed-Reason")};
}

TEST(LoadShedderHttp, ExcessIsRefusedHealthIsServedAndTheServerRecovers) {
  ShedServer server;
  constexpr int kLong = 6;        // generators with a long deadline: 3 get held
  constexpr int kPerThread = 15;  // requests each (bounded load)
  std::mutex done_mu;
  std::condition_variable done_cv;
  int finished = 0;
  auto finish = [&] {
    {
      std::lock_guard lock(done_mu);
      ++finished;
    }
    done_cv.notify_all();
  };
  std::atomic<int> ok{0}, refused{0}, refused_with_hint{0}, other{0};
  std::atomic<int> short_refused_for_deadline{0}, short_other{0};

  std::vector<std::thread> load;
  for (int t = 0; t < kLong; ++t) {
    load.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        const Reply r = get(server.port(), "/work", 30s);
        if (r.status == 200) {
          ++ok;
        } else if (r.status == 503) {
          ++refused;
          if (!r.retry_after.empty() && std::stoi(r.retry_after) >= 1) ++refused_with_hint;
        } else {
          ++other;
        }
      }
      finish();
    });
  }
  // Requests whose deadline (1 ms) is shorter than the expected service time.
  load.emplace_back([&] {
    for (int i = 0; i < kPerThread; ++i) {
      const Reply r = get(server.port(), "/work", 1ms);
      if (r.status == 503 && r.reason == "deadline_too_short") {
        ++short_refused_for_deadline;
      } else {
        ++short_other;
        ADD_FAILURE() << "short request: status " << r.status << " reason " << r.reason;
      }
    }
    finish();
  });

  ASSERT_TRUE(server.wait_held(3));
  // While the three normal slots are held and the generators push, health checks (the
  // critical class) are served every time.
  // (At most 40 of them, so that their fast service times leave the estimate far above
  // the short deadlines.)
  constexpr int kUnheld = kLong - 3 + 1;
  int health_ok = 0, health_total = 0;
  auto generators_done = [&] {
    std::lock_guard lock(done_mu);
    return finished == kUnheld;
  };
  while (health_total < 40 && !generators_done()) {
    ++health_total;
    if (get(server.port(), "/health", 5s).status == 200) ++health_ok;
  }
  {
    std::unique_lock lock(done_mu);
    ASSERT_TRUE(done_cv.wait_for(lock, 60s, [&] { return finished == kUnheld; }))
        << "the generators did not finish in 60 s";
  }
  ++health_total;  // and once more with the three slots still held
  if (get(server.port(), "/health", 5s).status == 200) ++health_ok;
  // Every request of the unheld generators was refused, with a hint.
  EXPECT_EQ(refused.load(), (kLong - 3) * kPerThread);
  EXPECT_EQ(refused_with_hint.load(), refused.load());
  EXPECT_EQ(short_refused_for_deadline.load(), kPerThread);
  EXPECT_EQ(short_other.load(), 0);
  EXPECT_EQ(health_ok, health_total);
  EXPECT_EQ(server.shedder().in_flight(), 3u);

  // The load stops: the held requests finish, and the server answers again.
  server.release();
  for (auto& th : load) th.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(ok.load(), 3 * kPerThread);  // the held threads go on and are served
  EXPECT_EQ(get(server.port(), "/work", 5s).status, 200);
  EXPECT_EQ(get(server.port(), "/health", 5s).status, 200);
  EXPECT_EQ(server.expired_at_admission(), 0);
  EXPECT_EQ(server.outlived(), 0);

  const auto snap = server.shedder().snapshot();
  EXPECT_EQ(snap.in_flight, 0u);
  EXPECT_EQ(snap.queued, 0u);
  EXPECT_EQ(snap.admitted[static_cast<int>(Priority::critical)],
            static_cast<std::uint64_t>(health_total + 1));
  EXPECT_EQ(snap.refused[static_cast<int>(ShedReason::deadline_too_short)],
            static_cast<std::uint64_t>(kPerThread));
}

}  // namespace
}  // namespace bulwark
