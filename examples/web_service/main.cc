// A web service whose endpoint calls an upstream through bulwark::http's Client:
//
//   GET /reviews   calls the upstream reviews service through the client (the host's
//                  breaker ∘ bulkhead ∘ retry, a 1 s deadline, 300 ms per attempt)
//                  and answers
//                    200 with the reviews,
//                    503 + Retry-After while the breaker is open (fail fast, and tell
//                        clients when to come back),
//                    200 with a degraded page when the upstream failed otherwise
//                        (retries exhausted, budget spent, bulkhead full, deadline).
//   GET /metrics   the Prometheus exposition of the client: the host's breaker,
//                  bulkhead, retry and budget, and the client's counters; and of the
//                  service's load shedder
//   GET /health    200 "ok"
//
// Every route runs behind a load shedder, the service's own entry point protection: at
// most `limit` requests served at once, /health as critical (never refused while other
// routes are served: the last slots are kept for it), the others normal; the excess
// waits in a short controlled-delay queue or is refused with 503 and Retry-After. The
// limit is adaptive (Gradient2 between 8 and 256, from 32): the time each request held
// its slot feeds it, so it rises while service times stay flat and falls when they grow
// (a request served past its deadline counts as dropped). /metrics shows it as
// bulwark_load_shedder_limit and bulwark_adaptive_limit.
//
// Deadlines cross services: a caller's X-Request-Timeout header (gRPC's grpc-timeout
// format, "850m" = 850 ms; what bulwark::http's clients send) becomes the request's
// deadline, less 5 ms for the request's transit and the answer's way back, if it is
// earlier than the service's
// own 1 s; the shedder then refuses at once a request that cannot finish in time, and
// the call to the upstream gets what is left (and sends it on in the same header).
// A malformed value is ignored (the own deadline stands) and named in the response's
// X-Request-Timeout-Ignored header.
//
// The upstream runs in the same process, on its own port, and can be broken and
// healed: POST /upstream/fail, POST /upstream/heal. (The server, cpp-httplib, answers
// 400 to a POST without Content-Length: `curl -X POST` alone sends none.)
//
//   build/release/examples/web_service/web_service            # serve on :8080
//   curl -i localhost:8080/reviews
//   curl -d '' localhost:8080/upstream/fail   # a POST with a (empty) body
//   curl localhost:8080/metrics
//   build/release/examples/web_service/web_service --demo     # a scripted tour, then exit

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>

#include "bulwark/adaptive_limit.h"
#include "bulwark/deadline_header.h"
#include "bulwark/http/client.h"
#include "bulwark/load_shedder.h"

using namespace std::chrono_literals;

namespace {

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

// The client of the reviews service: every request to its host goes through that
// host's breaker, bulkhead and retry (with a retry budget), within a 1 s deadline of
// which each attempt gets at most 300 ms.
bulwark::http::Config reviews_config() {
  bulwark::http::Config c;
  c.name = "reviews";
  c.breaker = {.name = "reviews", .consecutive_failures = 3, .open_duration = 2s};
  c.bulkhead = {.name = "reviews", .max_concurrent = 80};
  c.retry = {
      .name = "reviews",
      .max_attempts = 3,
      .backoff =
          bulwark::Backoff::exponential(20ms, 2.0, 200ms).with_jitter(bulwark::Jitter::full)};
  c.budget = {.name = "reviews", .ratio = 0.2, .min_retries_per_second = 10};
  c.default_timeout = 1s;
  c.attempt_timeout = 300ms;
  return c;
}

// The endpoint: the reviews, a 503 with Retry-After while the breaker is open (fail
// fast, and tell clients when to come back), or a degraded page for any other failure
// (retries exhausted, budget spent, bulkhead full, deadline).
void serve_reviews(bulwark::http::Client& reviews, const std::string& url,
                   const bulwark::Context& ctx, httplib::Response& res) {
  auto r = reviews.request({.url = url}, ctx);
  if (r) {
    res.set_content(r->body, "text/plain; charset=utf-8");
  } else if (r.error().kind == bulwark::http::ErrorKind::rejected_by_breaker) {
    const auto seconds = std::chrono::ceil<std::chrono::seconds>(r.error().retry_after).count();
    res.status = 503;
    res.set_header("Retry-After", std::to_string(std::max<long long>(1, seconds)));
    res.set_content("reviews: service temporarily unavailable\n", "text/plain");
  } else {
    res.set_content("(reviews are unavailable right now)\n", "text/plain; charset=utf-8");
  }
}

using Shedder = bulwark::BasicLoadShedder<bulwark::AdaptiveLimitSource>;

// The request's context: the service's own deadline of 1 s, shortened (never
// lengthened) by the caller's X-Request-Timeout less a 5 ms margin.
bulwark::Context request_context(const httplib::Request& req, httplib::Response& res) {
  const bulwark::SteadyClock clock;
  auto ctx = bulwark::Context(clock).with_timeout(1s);
  if (!req.has_header("X-Request-Timeout")) return ctx;
  auto caller = bulwark::parse_deadline_header(req.get_header_value("X-Request-Timeout"), 5ms,
                                               bulwark::now_ticks(clock));
  if (!caller) {
    res.set_header("X-Request-Timeout-Ignored", std::string(to_string(caller.error())));
    return ctx;
  }
  return ctx.with_deadline(*caller);
}

// Runs `handler(req, res, ctx)` behind the shedder: a refusal is a 503 with Retry-After
// (and the reason, for people reading the response). A request whose deadline (its
// caller's, or the service's own 1 s) leaves less than the expected service time is
// refused at once.
template <class Handler>
httplib::Server::Handler shed(Shedder& shedder, bulwark::Priority priority, Handler handler) {
  return [&shedder, priority, handler](const httplib::Request& req, httplib::Response& res) {
    const bulwark::Context ctx = request_context(req, res);
    auto admitted = shedder.acquire(ctx, priority);
    if (!admitted) {
      const auto& refusal = admitted.error();
      res.status = shedder.config().http_status;
      res.set_header("Retry-After",
                     std::to_string(bulwark::retry_after_seconds(refusal.retry_after)));
      res.set_content("overloaded (" + std::string(to_string(refusal.reason)) + ")\n",
                      "text/plain");
      return;
    }
    handler(req, res, ctx);
  };  // the permit goes back here: the service time is sampled
}

// The tour: each step's expected status and breaker state; false if one differs.
bool demo(int port, Upstream& upstream, bulwark::http::Client& reviews, const std::string& url) {
  httplib::Client client("127.0.0.1", port);
  bool as_expected = true;
  auto get = [&](const char* what, int want_status, bulwark::State want_state) {
    auto res = client.Get("/reviews");
    const std::string retry_after =
        res && res->has_header("Retry-After") ? res->get_header_value("Retry-After") : "-";
    const bulwark::State state = reviews.breaker_for(url)->state();
    std::printf("%-34s -> %d  Retry-After: %-2s  breaker: %-9s upstream requests: %d  body: %s",
                what, res ? res->status : 0, retry_after.c_str(),
                std::string(to_string(state)).c_str(), upstream.requests(),
                res ? res->body.c_str() : "(none)\n");
    if (!res || res->status != want_status || state != want_state) as_expected = false;
  };
  using bulwark::State;
  get("healthy upstream", 200, State::closed);
  upstream.set_failing(true);
  get("upstream failing (retried)", 200, State::closed);
  get("upstream failing (retried)", 200, State::closed);
  get("upstream failing (retried)", 200, State::open);
  get("breaker open: fail fast", 503, State::open);
  get("breaker open: fail fast", 503, State::open);
  upstream.set_failing(false);
  std::printf("... upstream healed; waiting out the 2 s open period\n");
  std::this_thread::sleep_for(2100ms);
  get("probe succeeds, breaker closes", 200, State::closed);
  get("healthy again", 200, State::closed);
  {
    // A caller with no time left: refused at once, before any work.
    auto res = client.Get("/reviews", {{"X-Request-Timeout", "0m"}});
    std::printf("%-34s -> %d  body: %s", "caller's deadline already gone", res ? res->status : 0,
                res ? res->body.c_str() : "(none)\n");
    if (!res || res->status != 503) as_expected = false;
    auto bad = client.Get("/health", {{"X-Request-Timeout", "1.5S"}});
    const std::string why = bad ? bad->get_header_value("X-Request-Timeout-Ignored") : "";
    std::printf("%-34s -> %d  X-Request-Timeout-Ignored: %s\n", "malformed X-Request-Timeout",
                bad ? bad->status : 0, why.c_str());
    if (!bad || bad->status != 200 || why.empty()) as_expected = false;
  }
  auto health = client.Get("/health");
  std::printf("GET /health -> %d\n", health ? health->status : 0);
  if (!health || health->status != 200) as_expected = false;

  auto metrics = client.Get("/metrics");
  std::printf("GET /metrics -> %d, e.g.:\n", metrics ? metrics->status : 0);
  std::istringstream lines(metrics ? metrics->body : "");
  int shown = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("bulwark_circuitbreaker_calls_total", 0) == 0 ||
        line.rfind("bulwark_retry_retries_total", 0) == 0 ||
        line.rfind("bulwark_http_client_requests_total", 0) == 0 ||
        line.rfind("bulwark_load_shedder_admitted_total", 0) == 0 ||
        line.rfind("bulwark_load_shedder_limit", 0) == 0) {
      std::printf("  %s\n", line.c_str());
      ++shown;
    }
  }
  return as_expected && shown > 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  const bool run_demo = argc > 1 && std::strcmp(argv[1], "--demo") == 0;
  int port = 8080;
  if (!run_demo && argc > 1) {
    const char* end = argv[1] + std::strlen(argv[1]);
    if (std::from_chars(argv[1], end, port).ptr != end || port < 1 || port > 65535) {
      std::fprintf(stderr, "usage: %s [PORT | --demo]  (PORT: 1-65535, got '%s')\n", argv[0],
                   argv[1]);
      return 2;
    }
  }

  Upstream upstream;
  const std::string url = "http://127.0.0.1:" + std::to_string(upstream.port()) + "/reviews";
  bulwark::http::Client reviews(reviews_config());
  bulwark::AdaptiveLimitConfig limit_config;
  limit_config.name = "web_service";
  limit_config.algorithm = bulwark::AdaptiveAlgorithm::gradient2;
  limit_config.min_limit = 8;
  limit_config.max_limit = 256;
  limit_config.initial_limit = 32;
  bulwark::AdaptiveLimit limit(limit_config);
  Shedder shedder({.name = "web_service", .max_queue = 64}, bulwark::AdaptiveLimitSource(limit));
  using bulwark::Priority;
  httplib::Server server;
  server.Get("/reviews",
             shed(shedder, Priority::normal,
                  [&](const httplib::Request&, httplib::Response& res,
                      const bulwark::Context& ctx) { serve_reviews(reviews, url, ctx, res); }));
  server.Get("/health",
             shed(shedder, Priority::critical,
                  [](const httplib::Request&, httplib::Response& res, const bulwark::Context&) {
                    res.set_content("ok\n", "text/plain");
                  }));
  server.Get("/metrics",
             shed(shedder, Priority::normal,
                  [&](const httplib::Request&, httplib::Response& res, const bulwark::Context&) {
                    std::ostringstream out;
                    reviews.write_metrics(out);
                    bulwark::prometheus::write_load_shedder(out, "web_service", shedder.snapshot());
                    const bulwark::prometheus::AdaptiveLimitReading readings[] = {
                        bulwark::prometheus::reading(limit)};
                    bulwark::prometheus::write_adaptive_limits(out, readings);
                    res.set_content(out.str(), "text/plain; version=0.0.4");
                  }));
  server.Post("/upstream/fail",
              shed(shedder, Priority::normal,
                   [&](const httplib::Request&, httplib::Response& res, const bulwark::Context&) {
                     upstream.set_failing(true);
                     res.set_content("upstream now fails\n", "text/plain");
                   }));
  server.Post("/upstream/heal",
              shed(shedder, Priority::normal,
                   [&](const httplib::Request&, httplib::Response& res, const bulwark::Context&) {
                     upstream.set_failing(false);
                     res.set_content("upstream healed\n", "text/plain");
                   }));

  if (run_demo) {
    const int bound = server.bind_to_any_port("127.0.0.1");
    std::thread t([&] { server.listen_after_bind(); });
    const bool ok = demo(bound, upstream, reviews, url);
    server.stop();
    t.join();
    if (!ok) std::fprintf(stderr, "the tour did not go as expected\n");
    return ok ? 0 : 1;
  }
  std::printf("listening on http://127.0.0.1:%d/reviews and /metrics (upstream on :%d)\n", port,
              upstream.port());
  return server.listen("127.0.0.1", port) ? 0 : 1;
}
