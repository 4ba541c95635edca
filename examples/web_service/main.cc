// A web service whose endpoint calls an upstream through the resilience pipeline:
//
//   GET /reviews   calls the upstream reviews service through
//                  fallback ∘ breaker ∘ bulkhead ∘ retry ∘ timeout, within a 1 s
//                  per-request deadline, and answers
//                    200 with the reviews,
//                    503 + Retry-After while the breaker is open (fail fast, and tell
//                        clients when to come back),
//                    200 with a degraded page when the upstream failed otherwise
//                        (retries exhausted, budget spent, bulkhead full, deadline).
//
// The upstream runs in the same process, on its own port, and can be broken and
// healed: POST /upstream/fail, POST /upstream/heal.
//
//   build/release/examples/web_service/web_service            # serve on :8080
//   curl -i localhost:8080/reviews
//   curl -X POST localhost:8080/upstream/fail
//   build/release/examples/web_service/web_service --demo     # a scripted tour, then exit

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "bulwark/pipeline.h"

using namespace std::chrono_literals;

namespace {

// What calling the upstream can go wrong with.
struct UpstreamError {
  int status = 0;  // 0: no HTTP answer (timeout, connection refused)
  std::optional<bulwark::Nanos> after;

  // A 4xx is our request's fault: neither retried nor held against the upstream.
  bulwark::Outcome outcome() const {
    return status == 0 || status >= 500 || status == 429 ? bulwark::Outcome::failure
                                                         : bulwark::Outcome::ignored;
  }
  std::optional<bulwark::Nanos> retry_after() const { return after; }
};

using Reviews = std::string;

// The call: a GET that gives the upstream only the time this attempt has left, with
// the operation's idempotency key.
bulwark::Expected<Reviews, UpstreamError> fetch_reviews(int port, const bulwark::Context& ctx) {
  httplib::Client client("127.0.0.1", port);
  const auto budget = std::chrono::duration_cast<std::chrono::microseconds>(
      std::min<bulwark::Nanos>(ctx.remaining(), 10s));
  client.set_connection_timeout(budget);
  client.set_read_timeout(budget);
  client.set_write_timeout(budget);
  httplib::Headers headers{{"Idempotency-Key", std::string(ctx.idempotency_key())}};
  auto res = client.Get("/reviews", headers);
  if (!res) return bulwark::Unexpected(UpstreamError{});
  if (res->status != 200) {
    std::optional<bulwark::Nanos> after;
    if (res->has_header("Retry-After"))
      after = std::chrono::seconds(std::atoi(res->get_header_value("Retry-After").c_str()));
    return bulwark::Unexpected(UpstreamError{res->status, after});
  }
  return res->body;
}

// The upstream: healthy, or failing with 503.
class Upstream {
 public:
  Upstream() {
    server_.Get("/reviews", [this](const httplib::Request&, httplib::Response& res) {
      requests_.fetch_add(1);
      if (failing_.load()) {
        res.status = 503;
      } else {
        res.set_content("★★★★☆ \"Great breakfast\"\n", "text/plain; charset=utf-8");
      }
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~Upstream() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  void set_failing(bool failing) { failing_.store(failing); }
  int requests() const { return requests_.load(); }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> failing_{false};
  std::atomic<int> requests_{0};
};

// One dependency's policies, shared by every request that calls it.
struct ReviewsClient {
  bulwark::CircuitBreaker breaker{[] {
    bulwark::BreakerConfig c;
    c.name = "reviews";
    c.consecutive_failures = 3;  // rate rules need a window breaker type
    c.open_duration = 2s;
    return c;
  }()};
  bulwark::Bulkhead bulkhead{{.name = "reviews", .max_concurrent = 80}};
  bulwark::RetryBudget budget{{.name = "reviews", .ratio = 0.2, .min_retries_per_second = 10}};
  bulwark::Retry retry{
      {.name = "reviews",
       .max_attempts = 3,
       .backoff =
           bulwark::Backoff::exponential(20ms, 2.0, 200ms).with_jitter(bulwark::Jitter::full),
       .idempotency_key = [] { return "reviews-" + std::to_string(next_key++); }},
      &budget};
  static inline std::atomic<long> next_key{1};
};

// The endpoint. The order of the stages is read where they are composed.
void serve_reviews(ReviewsClient& reviews, int upstream_port, httplib::Response& res) {
  using bulwark::Reason;
  using bulwark::Reasons;
  auto call_reviews = bulwark::pipeline(
      // Breaker rejections are not hidden behind the degraded page: they become 503
      // with Retry-After, below. Every other failure gets the degraded page.
      bulwark::fallback(Reviews("(reviews are unavailable right now)\n"),
                        Reasons::all().except(Reasons::breaker())),
      bulwark::breaker(reviews.breaker), bulwark::bulkhead(reviews.bulkhead),
      bulwark::retry(reviews.retry), bulwark::timeout(300ms));

  // The per-request deadline: whatever happens inside, this request is answered in ~1 s.
  const bulwark::Context ctx(bulwark::SteadyClock{}, {},
                             bulwark::Deadline::after(bulwark::SteadyClock{}, 1s));
  auto result =
      call_reviews(ctx, [&](const bulwark::Context& c) { return fetch_reviews(upstream_port, c); });

  if (result) {
    res.set_content(*result, "text/plain; charset=utf-8");
    return;
  }
  const auto& failure = result.error();
  if (failure.is_breaker_rejection()) {  // circuit open -> 503
    const auto seconds = std::chrono::ceil<std::chrono::seconds>(failure.retry_after).count();
    res.status = 503;
    res.set_header("Retry-After", std::to_string(std::max<long long>(1, seconds)));
    res.set_content("reviews: service temporarily unavailable\n", "text/plain");
    return;
  }
  res.status = 502;  // not reached with the fallback above; kept for a pipeline without one
  res.set_content(std::string(bulwark::to_string(failure.reason)) + "\n", "text/plain");
}

void demo(int port, Upstream& upstream, ReviewsClient& reviews) {
  httplib::Client client("127.0.0.1", port);
  auto get = [&](const char* what) {
    auto res = client.Get("/reviews");
    const std::string retry_after =
        res && res->has_header("Retry-After") ? res->get_header_value("Retry-After") : "-";
    std::printf("%-34s -> %d  Retry-After: %-2s  breaker: %-9s upstream requests: %d  body: %s",
                what, res ? res->status : 0, retry_after.c_str(),
                std::string(to_string(reviews.breaker.state())).c_str(), upstream.requests(),
                res ? res->body.c_str() : "(none)\n");
  };
  get("healthy upstream");
  upstream.set_failing(true);
  for (int i = 0; i < 3; ++i) get("upstream failing (retried)");
  get("breaker open: fail fast");
  get("breaker open: fail fast");
  upstream.set_failing(false);
  std::printf("... upstream healed; waiting out the 2 s open period\n");
  std::this_thread::sleep_for(2100ms);
  get("probe succeeds, breaker closes");
  get("healthy again");
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  const bool run_demo = argc > 1 && std::strcmp(argv[1], "--demo") == 0;
  const int port = !run_demo && argc > 1 ? std::atoi(argv[1]) : 8080;

  Upstream upstream;
  ReviewsClient reviews;
  httplib::Server server;
  server.Get("/reviews", [&](const httplib::Request&, httplib::Response& res) {
    serve_reviews(reviews, upstream.port(), res);
  });
  server.Post("/upstream/fail", [&](const httplib::Request&, httplib::Response& res) {
    upstream.set_failing(true);
    res.set_content("upstream now fails\n", "text/plain");
  });
  server.Post("/upstream/heal", [&](const httplib::Request&, httplib::Response& res) {
    upstream.set_failing(false);
    res.set_content("upstream healed\n", "text/plain");
  });

  if (run_demo) {
    const int bound = server.bind_to_any_port("127.0.0.1");
    std::thread t([&] { server.listen_after_bind(); });
    demo(bound, upstream, reviews);
    server.stop();
    t.join();
    return 0;
  }
  std::printf("listening on http://127.0.0.1:%d/reviews (upstream on :%d)\n", port,
              upstream.port());
  return server.listen("127.0.0.1", port) ? 0 : 1;
}
