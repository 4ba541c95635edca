// The web service of examples/web_service, asynchronous: an Asio server on one thread
// whose endpoint calls its upstream through bulwark::asio's pipeline —
//
//   GET /reviews   calls the upstream reviews service through
//                  fallback ∘ breaker ∘ bulkhead ∘ retry ∘ timeout, within a 1 s
//                  per-request deadline, and answers
//                    200 with the reviews,
//                    503 + Retry-After while the breaker is open,
//                    200 with a degraded page when the upstream failed otherwise
//                        (retries exhausted, budget spent, bulkhead full, deadline).
//                  A per-attempt timeout cancels the upstream request (its socket is
//                  closed), and so does the client hanging up.
//   GET /metrics   the Prometheus exposition of the breaker, bulkhead, retry and budget,
//                  and of the service's load shedder
//   GET /health    200 "ok"
//
// Every request passes the service's LoadShedder first, its entry point protection:
// at most 256 requests served at once, /health as critical (the last slots are kept
// for it), the others normal, each with its 1 s deadline — shortened by a caller's
// X-Request-Timeout (gRPC's grpc-timeout format, less 5 ms; bulwark/deadline_header.h),
// which the upstream call then inherits; a refusal is 503 with Retry-After. The io thread must
// never block, so it admits with try_acquire(): the excess is refused at once instead of queueing
// (the shedder's queue is for servers with a thread per request, as examples/web_service).
//
// No thread waits for anything: a slow upstream costs coroutine frames, not threads.
// The upstream runs in the same process and io_context, on its own port, and can be
// broken, slowed down and healed: POST /upstream/fail, /upstream/slow, /upstream/heal.
//
//   build/release/examples/async_web_service/async_web_service          # serve on :8080
//   curl -i localhost:8080/reviews
//   curl -d '' localhost:8080/upstream/fail   # a POST with a (empty) body
//   build/release/examples/async_web_service/async_web_service --demo   # a scripted tour
//
// The HTTP/1.1 here is the minimum an example needs: one request per connection
// (Connection: close), a request head of at most 8 KiB, no request body.

#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <atomic>
#include <cctype>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "bulwark/asio/pipeline.h"
#include "bulwark/deadline_header.h"
#include "bulwark/load_shedder.h"
#include "bulwark/prometheus.h"
#include "bulwark/registry.h"

using namespace std::chrono_literals;
using ::asio::awaitable;
using ::asio::use_awaitable;
using ::asio::experimental::as_tuple;
using ::asio::ip::tcp;

namespace {

// ---------------------------------------------------------------------------
// A minimal HTTP/1.1 exchange
// ---------------------------------------------------------------------------

struct Request {
  std::string method;
  std::string path;
  std::optional<std::string> request_timeout;  // the X-Request-Timeout header, if sent
};

// Reads a request head. nullopt: the peer closed, or sent something that is not one
// (a clear 400 is answered by the caller).
awaitable<std::optional<Request>> read_request(tcp::socket& socket, bool& bad) {
  std::string head;
  auto [ec, n] = co_await ::asio::async_read_until(socket, ::asio::dynamic_buffer(head, 8192),
                                                   "\r\n\r\n", as_tuple(use_awaitable));
  if (ec) {
    bad = ec == ::asio::error::not_found;  // longer than 8 KiB
    co_return std::nullopt;
  }
  const std::string_view line(head.data(), head.find("\r\n"));
  const auto sp1 = line.find(' ');
  const auto sp2 = line.find(' ', sp1 == std::string_view::npos ? sp1 : sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos ||
      line.substr(sp2 + 1).rfind("HTTP/1.", 0) != 0) {
    bad = true;
    co_return std::nullopt;
  }
  Request r{std::string(line.substr(0, sp1)), std::string(line.substr(sp1 + 1, sp2 - sp1 - 1)),
            std::nullopt};
  // The caller's remaining time, if it sent one (header names are case-insensitive).
  for (std::size_t at = head.find("\r\n"); at != std::string::npos && at + 2 < head.size();) {
    const std::size_t end = head.find("\r\n", at + 2);
    const std::string_view field(head.data() + at + 2,
                                 (end == std::string::npos ? head.size() : end) - at - 2);
    const std::size_t colon = field.find(':');
    std::string name(field.substr(0, colon == std::string_view::npos ? 0 : colon));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (name == "x-request-timeout") {
      std::string_view value = field.substr(colon + 1);
      while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
        value.remove_prefix(1);
      while (!value.empty() && (value.back() == ' ' || value.back() == '\t'))
        value.remove_suffix(1);
      r.request_timeout = std::string(value);
    }
    at = end;
  }
  co_return r;
}

awaitable<void> respond(tcp::socket& socket, int status, std::string_view reason,
                        std::string_view body, std::string_view extra_headers = {},
                        std::string_view type = "text/plain; charset=utf-8") {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) +
                    "\r\nContent-Type: " + std::string(type) +
                    "\r\nContent-Length: " + std::to_string(body.size()) +
                    "\r\nConnection: close\r\n" + std::string(extra_headers) + "\r\n" +
                    std::string(body);
  co_await ::asio::async_write(socket, ::asio::buffer(out), as_tuple(use_awaitable));
}

// A response as a client reads it.
struct Response {
  int status = 0;  // 0: no HTTP answer
  std::optional<long> retry_after;
  std::string body;
};

// GET `path` from 127.0.0.1:`port`, reading until the server closes.
awaitable<Response> http_get(std::uint16_t port, std::string_view path) {
  tcp::socket socket(co_await ::asio::this_coro::executor);
  Response r;
  auto [cec] = co_await socket.async_connect({::asio::ip::address_v4::loopback(), port},
                                             as_tuple(use_awaitable));
  if (cec) co_return r;
  const std::string req =
      "GET " + std::string(path) + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  auto [wec, w] =
      co_await ::asio::async_write(socket, ::asio::buffer(req), as_tuple(use_awaitable));
  if (wec) co_return r;
  std::string all;
  auto [rec, n] =
      co_await ::asio::async_read(socket, ::asio::dynamic_buffer(all), as_tuple(use_awaitable));
  if (rec != ::asio::error::eof) co_return r;  // aborted (a timeout), reset, ...
  const auto end_of_head = all.find("\r\n\r\n");
  if (all.rfind("HTTP/1.1 ", 0) != 0 || end_of_head == std::string::npos) co_return r;
  std::from_chars(all.data() + 9, all.data() + 12, r.status);
  if (const auto at = all.find("\r\nRetry-After: "); at != std::string::npos && at < end_of_head) {
    long seconds = 0;
    const char* begin = all.data() + at + 15;
    if (std::from_chars(begin, all.data() + end_of_head, seconds).ec == std::errc()) {
      r.retry_after = seconds;
    }
  }
  r.body = all.substr(end_of_head + 4);
  co_return r;
}

// ---------------------------------------------------------------------------
// The upstream: healthy, failing with 503, or answering after 5 s
// ---------------------------------------------------------------------------

enum class Health { healthy, failing, slow };

class Upstream {
 public:
  explicit Upstream(::asio::io_context& io)
      : acceptor_(io, {::asio::ip::address_v4::loopback(), 0}) {
    ::asio::co_spawn(io, accept(), ::asio::detached);
  }
  std::uint16_t port() const { return acceptor_.local_endpoint().port(); }
  void set(Health h) { health_ = h; }
  int requests() const { return requests_; }
  int abandoned() const { return abandoned_; }  // requests whose caller hung up first

 private:
  awaitable<void> accept() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(as_tuple(use_awaitable));
      if (ec) co_return;
      ::asio::co_spawn(acceptor_.get_executor(), serve(std::move(socket)), ::asio::detached);
    }
  }
  awaitable<void> serve(tcp::socket socket) {
    using namespace ::asio::experimental::awaitable_operators;
    bool bad = false;
    auto request = co_await read_request(socket, bad);
    if (!request) co_return;
    ++requests_;
    if (health_ == Health::slow) {
      // Answers after 5 s, unless the caller hangs up first (its attempt was cancelled).
      ::asio::steady_timer t(socket.get_executor(), 5s);
      auto first = co_await (t.async_wait(as_tuple(use_awaitable)) ||
                             socket.async_wait(tcp::socket::wait_read, as_tuple(use_awaitable)));
      if (first.index() == 1) {
        ++abandoned_;
        co_return;
      }
    }
    if (health_ == Health::failing) {
      co_await respond(socket, 503, "Service Unavailable", "");
    } else {
      co_await respond(socket, 200, "OK", "★★★★☆ \"Great breakfast\"\n");
    }
  }

  tcp::acceptor acceptor_;
  Health health_ = Health::healthy;
  int requests_ = 0;
  int abandoned_ = 0;
};

// ---------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------

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

// The upstream's policies besides its breaker: one per dependency, kept next to the
// breaker in a registry entry so that /metrics reads them with it.
struct ReviewsGuards {
  bulwark::asio::AsyncBulkhead pool{
      {.name = "reviews", .max_concurrent = 80, .max_queue = 200, .max_wait = 250ms}};
  bulwark::RetryBudget budget{{.name = "reviews", .ratio = 0.2, .min_retries_per_second = 10}};
  bulwark::Retry retry{
      {.name = "reviews",
       .max_attempts = 3,
       .backoff =
           bulwark::Backoff::exponential(20ms, 2.0, 200ms).with_jitter(bulwark::Jitter::full)},
      &budget};
  void read_metrics(bulwark::ComponentReading& r) {
    r.add_bulkhead(pool);
    r.add_budget(budget);
    r.add_retry(retry);
  }
  void observe_rejections(bulwark::BulkheadObserver o) { pool.observe_rejections(o); }
};
using Dependencies = bulwark::BasicRegistry<std::string, bulwark::CircuitBreaker, ReviewsGuards>;

bulwark::RegistryOptions<std::string, bulwark::CircuitBreaker, ReviewsGuards> dependencies() {
  bulwark::RegistryOptions<std::string, bulwark::CircuitBreaker, ReviewsGuards> o;
  o.name = "dependencies";
  o.breaker.name = "reviews";
  o.breaker.consecutive_failures = 3;
  o.breaker.open_duration = 2s;
  return o;
}

class Service {
 public:
  Service(::asio::io_context& io, Upstream& upstream, std::uint16_t port)
      : io_(io),
        upstream_(upstream),
        acceptor_(io, {::asio::ip::address_v4::loopback(), port}),
        deps_(dependencies()),
        reviews_(deps_.get("reviews")),
        shedder_({.name = "async_web_service", .max_queue = 0}, bulwark::FixedLimit(256)) {
    ::asio::co_spawn(io, accept(), ::asio::detached);
  }
  std::uint16_t port() const { return acceptor_.local_endpoint().port(); }
  bulwark::CircuitBreaker& breaker() { return reviews_.breaker(); }

 private:
  awaitable<void> accept() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(as_tuple(use_awaitable));
      if (ec) co_return;
      ::asio::co_spawn(io_, session(std::move(socket)), ::asio::detached);
    }
  }

  awaitable<void> session(tcp::socket socket) {
    using namespace ::asio::experimental::awaitable_operators;
    bool bad = false;
    auto request = co_await read_request(socket, bad);
    if (!request) {
      if (bad) co_await respond(socket, 400, "Bad Request", "not an HTTP/1.1 request head\n");
      co_return;
    }
    // The request's deadline: the service's own 1 s, shortened (never lengthened) by the
    // caller's X-Request-Timeout less 5 ms for the transit; a malformed value is ignored
    // (the service's own deadline stands).
    bulwark::Context ctx(bulwark::SteadyClock{}, {},
                         bulwark::Deadline::after(bulwark::SteadyClock{}, 1s));
    if (request->request_timeout) {
      auto caller = bulwark::parse_deadline_header(*request->request_timeout, 5ms,
                                                   bulwark::now_ticks(bulwark::SteadyClock{}));
      if (caller) ctx = ctx.with_deadline(*caller);
    }
    // The entry point's protection: the permit is held until the session ends.
    const auto priority =
        request->path == "/health" ? bulwark::Priority::critical : bulwark::Priority::normal;
    auto admitted = shedder_.try_acquire(ctx, priority);
    if (!admitted) {
      const auto& refusal = admitted.error();
      co_await respond(
          socket, shedder_.config().http_status, "Service Unavailable",
          "overloaded (" + std::string(to_string(refusal.reason)) + ")\n",
          "Retry-After: " + std::to_string(bulwark::retry_after_seconds(refusal.retry_after)) +
              "\r\n");
      co_return;
    }
    if (request->method == "GET" && request->path == "/health") {
      co_await respond(socket, 200, "OK", "ok\n");
    } else if (request->method == "GET" && request->path == "/reviews") {
      // The client hanging up cancels the call, and with it the upstream request.
      co_await (reviews(socket, ctx) || client_gone(socket));
    } else if (request->method == "GET" && request->path == "/metrics") {
      std::ostringstream out;
      bulwark::prometheus::write(out, deps_);
      bulwark::prometheus::write_load_shedder(out, "async_web_service", shedder_.snapshot());
      co_await respond(socket, 200, "OK", out.str(), {}, "text/plain; version=0.0.4");
    } else if (request->method == "POST" && request->path.rfind("/upstream/", 0) == 0) {
      const std::string_view what = std::string_view(request->path).substr(10);
      if (what == "fail" || what == "slow" || what == "heal") {
        upstream_.set(what == "fail"   ? Health::failing
                      : what == "slow" ? Health::slow
                                       : Health::healthy);
        co_await respond(socket, 200, "OK", "upstream: " + std::string(what) + "\n");
      } else {
        co_await respond(socket, 404, "Not Found", "POST /upstream/fail, /slow or /heal\n");
      }
    } else {
      co_await respond(socket, 404, "Not Found", "GET /reviews, /health or /metrics\n");
    }
  }

  // Readable again after the request head: the client closed (or broke the protocol).
  static awaitable<void> client_gone(tcp::socket& socket) {
    co_await socket.async_wait(tcp::socket::wait_read, as_tuple(use_awaitable));
  }

  // The upstream call runs within the request's deadline (`ctx`).
  awaitable<void> reviews(tcp::socket& socket, const bulwark::Context& ctx) {
    using bulwark::Reasons;
    auto& guards = reviews_.extra();
    auto call_reviews = bulwark::asio::pipeline(
        // Breaker rejections become 503 with Retry-After, below; every other failure
        // gets the degraded page.
        bulwark::fallback(std::string("(reviews are unavailable right now)\n"),
                          Reasons::all().except(Reasons::breaker())),
        bulwark::breaker(reviews_.breaker()), bulwark::asio::bulkhead(guards.pool),
        bulwark::retry(guards.retry), bulwark::timeout(300ms));
    const std::uint16_t port = upstream_.port();
    auto page = co_await call_reviews(
        ctx,
        [port](
            const bulwark::Context&) -> awaitable<bulwark::Expected<std::string, UpstreamError>> {
          Response r = co_await http_get(port, "/reviews");
          if (r.status == 200) co_return std::move(r.body);
          std::optional<bulwark::Nanos> after;
          if (r.retry_after) after = std::chrono::seconds(*r.retry_after);
          co_return bulwark::Unexpected(UpstreamError{r.status, after});
        });
    if (page) {
      co_await respond(socket, 200, "OK", *page);
    } else if (page.error().is_breaker_rejection()) {
      const auto seconds =
          std::chrono::ceil<std::chrono::seconds>(page.error().retry_after).count();
      co_await respond(socket, 503, "Service Unavailable", "reviews: temporarily unavailable\n",
                       "Retry-After: " + std::to_string(std::max<long long>(1, seconds)) + "\r\n");
    } else {  // not reached with the fallback above; kept for a pipeline without one
      co_await respond(socket, 502, "Bad Gateway",
                       std::string(bulwark::to_string(page.error().reason)) + "\n");
    }
  }

  ::asio::io_context& io_;
  Upstream& upstream_;
  tcp::acceptor acceptor_;
  Dependencies deps_;
  Dependencies::Handle reviews_;
  bulwark::LoadShedder shedder_;
};

// ---------------------------------------------------------------------------
// The scripted tour
// ---------------------------------------------------------------------------

awaitable<void> demo(Service& service, Upstream& upstream) {
  auto get = [&](const char* what) -> awaitable<void> {
    const auto start = std::chrono::steady_clock::now();
    Response r = co_await http_get(service.port(), "/reviews");
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    const std::string after = r.retry_after ? std::to_string(*r.retry_after) : "-";
    std::printf("%-34s -> %d %5lld ms  Retry-After: %-2s  breaker: %-9s upstream requests: %2d  %s",
                what, r.status, static_cast<long long>(ms), after.c_str(),
                std::string(to_string(service.breaker().state())).c_str(), upstream.requests(),
                r.body.c_str());
  };
  co_await get("healthy upstream");
  upstream.set(Health::failing);
  for (int i = 0; i < 3; ++i) co_await get("upstream failing (retried)");
  co_await get("breaker open: fail fast");
  co_await get("breaker open: fail fast");
  upstream.set(Health::healthy);
  std::printf("... upstream healed; waiting out the 2 s open period\n");
  ::asio::steady_timer t(co_await ::asio::this_coro::executor, 2100ms);
  co_await t.async_wait(use_awaitable);
  co_await get("probe succeeds, breaker closes");
  upstream.set(Health::slow);
  co_await get("slow upstream: timeouts cancel it");
  upstream.set(Health::healthy);
  co_await get("healthy again");
  std::printf("upstream requests abandoned by their cancelled callers: %d\n", upstream.abandoned());
  Response h = co_await http_get(service.port(), "/health");
  std::printf("GET /health -> %d\n", h.status);
  Response m = co_await http_get(service.port(), "/metrics");
  std::printf("GET /metrics -> %d, e.g.:\n", m.status);
  std::istringstream lines(m.body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("bulwark_bulkhead_max_allowed", 0) == 0 ||
        line.rfind("bulwark_circuitbreaker_calls_total", 0) == 0 ||
        line.rfind("bulwark_retry_retries_total", 0) == 0 ||
        line.rfind("bulwark_load_shedder_admitted_total", 0) == 0) {
      std::printf("  %s\n", line.c_str());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  const bool run_demo = argc > 1 && std::strcmp(argv[1], "--demo") == 0;
  long port = 8080;
  if (!run_demo && argc > 1) {
    const char* end = argv[1] + std::strlen(argv[1]);
    if (std::from_chars(argv[1], end, port).ptr != end || port < 1 || port > 65535) {
      std::fprintf(stderr, "usage: %s [PORT | --demo]  (PORT: 1-65535, got '%s')\n", argv[0],
                   argv[1]);
      return 2;
    }
  }
  ::asio::io_context io(1);
  Upstream upstream(io);
  Service service(io, upstream, run_demo ? 0 : static_cast<std::uint16_t>(port));
  if (run_demo) {
    ::asio::co_spawn(io, demo(service, upstream), [&](std::exception_ptr e) {
      if (e) std::fprintf(stderr, "demo failed\n");
      io.stop();
    });
  } else {
    std::printf("listening on http://127.0.0.1:%u/reviews (upstream on :%u)\n", service.port(),
                upstream.port());
  }
  io.run();
  return 0;
}
