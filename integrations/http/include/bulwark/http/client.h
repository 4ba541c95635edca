// bulwark/http/client.h — a resilient HTTP client over libcurl's easy interface.
//
// Every request goes through a bulwark pipeline — breaker ∘ bulkhead ∘ retry — whose
// breaker and bulkhead are those of the request's host (or of its route template, see
// Config::key_by), created on first use and kept in a keyed registry:
//
//   bulwark::http::Client reviews({
//       .name = "reviews",
//       .breaker = {.name = "reviews", .consecutive_failures = 5, .open_duration = 10s},
//       .bulkhead = {.name = "reviews", .max_concurrent = 20},
//       .retry = {.name = "reviews", .max_attempts = 3},
//       .default_timeout = 300ms,
//   });
//   auto r = reviews.request({.url = "http://reviews:8080/reviews/42"});
//   if (r) render(r->body);
//   else if (r.error().kind == bulwark::http::ErrorKind::rejected_by_breaker)
//     omit_reviews(r.error().retry_after);
//
// Time. A request has one deadline: the context's, shortened by Request::timeout (or
// Config::default_timeout when that is zero). Each attempt is given what is left of it
// (and at most Config::attempt_timeout) as CURLOPT_TIMEOUT_MS, and at most
// Config::connect_timeout of that as CURLOPT_CONNECTTIMEOUT_MS, so no attempt and no
// backoff outlives the deadline. The context's stop_token ends a bulkhead wait, a
// backoff and a transfer in flight at once (ErrorKind::cancelled).
//
// Classification (Config::classify): a transport error, a timeout, and by default a
// 5xx or 429 are failures — counted by the breaker, retried; any other 4xx is the
// caller's fault — ignored by the breaker, never retried. 1xx-3xx are responses.
// Who is at fault, by ErrorKind:
//   the caller (ignored by the breaker, never retried): invalid_request, cancelled,
//     shutdown, a 4xx status (by default), timeout with no time left for an attempt,
//     redirect when following is off or max_redirects ran out;
//   the server (a failure): status 5xx/429, protocol, body_too_large,
//     headers_too_large, redirect without a usable Location;
//   the network (a failure): transport, timeout.
// A server that answers outside HTTP — a garbled or unknown status line (HTTP/0.9,
// "HTTP/9.9", a status outside 100-999, binary), a header line without a colon or with
// a NUL, a malformed chunk, conflicting Content-Length headers — is ErrorKind::protocol:
// a failure of the server, retried as a 5xx is (an idempotent request, or one with a
// key), since a broken instance behind a balancer often answers well the next time.
// Of the failures, status, protocol and transport/timeout are retried; body_too_large,
// headers_too_large and redirect are not (the same answer would come again).
//
// Retry-After (retry_after.h), on any error status, in either form: honoured by the
// retry in place of the backoff — but a wait that would end past the deadline ends the
// request at once (Reason::deadline_exceeded) — and handed to the caller in
// Error::retry_after. A value that is not well-formed, longer than
// Config::max_retry_after, or sent in more than one Retry-After header, is ignored (the
// backoff applies) and counted in stats().hostile_retry_after.
//
// Idempotency. GET, HEAD, PUT, DELETE, OPTIONS and TRACE are retried. POST and PATCH
// are retried only with an idempotency key: Request::idempotency_key, or one the client
// makes (Config::make_idempotency_keys) once per request; the same key is sent on every
// attempt in the Config::idempotency_header header.
//
// Limits. Response bodies above Config::max_body_bytes end the transfer
// (ErrorKind::body_too_large). Response headers above Config::max_header_bytes in all,
// or one header line longer than libcurl accepts (100 KB), end it too
// (ErrorKind::headers_too_large). Neither is retried.
//
// Redirects. Not followed by default: a 3xx other than 304 is ErrorKind::redirect
// (ignored by the breaker). With max_redirects = N > 0 the client follows 301, 302,
// 303, 307 and 308 itself, as browsers do (the fetch standard), at most N times (more
// is ErrorKind::redirect, ignored); other 3xx statuses stay ErrorKind::redirect. Each
// hop is a request of its own to its origin (scheme, host and port): judged by that
// origin's breaker and bulkhead and retried by its retry, all within the one deadline;
// a 3xx with a usable Location is a success for the origin that sent it. What crosses:
//   - a 301, 302 or 303 without a Location, or with one that is not an http(s) URL, is
//     ErrorKind::redirect, a failure of the server that sent it (not retried);
//   - 303 turns any method but GET and HEAD into GET, and 301 and 302 turn POST into
//     GET, without the body and its Content-* headers (and without the idempotency
//     key, which a GET does not need); 307 and 308 keep the method and the body;
//   - to another origin, Authorization, Proxy-Authorization, Cookie, Cookie2, the
//     idempotency header and Config::origin_headers are dropped: credentials and keys
//     belong to the origin they were meant for. A POST or PATCH that a 307/308 sends on
//     is then retried there only if the client makes keys (a new one for that origin);
//   - the Location is resolved against the URL that answered (relative forms too).
//
// Connection reuse: a small pool of curl easy handles per client (at most
// Config::max_idle_handles kept idle). A request takes a handle for all its attempts
// and gives it back; each handle keeps its own connections alive, so consecutive
// requests to a host reuse a connection. The pool is guarded by a mutex held only to
// push or pop a pointer.
//
// Cost. The resilience stages cost what pipeline.h says (a lookup in the host
// registry: one hash and probe, no lock once the host exists). The request itself
// allocates (URL parsing, headers, the response, a stop_source) and makes a blocking
// libcurl transfer on the calling thread; entering and leaving the client's list of
// requests in flight takes a mutex (held to link or unlink one node). bench/http
// measures the overhead against bare libcurl.
//
// Thread-safety: request() may be called concurrently from any thread. No thread is
// created.
//
// Lifetime: the client may be destroyed while requests run on other threads. The
// destructor cancels them — a bulkhead wait, a backoff or Retry-After wait, a transfer
// in flight all end at once — and waits until every one has returned, with
// ErrorKind::shutdown (the caller's side: ignored by the breaker, never retried). No
// request may start once the destructor has begun (the object is going away), and
// none may be made from a thread the destructor waits for (a callback such as
// Config::classify or key_generator must not destroy the client).

#ifndef BULWARK_HTTP_CLIENT_H_
#define BULWARK_HTTP_CLIENT_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "bulwark/adaptive_limit.h"
#include "bulwark/bulkhead.h"
#include "bulwark/circuit_breaker.h"
#include "bulwark/clock.h"
#include "bulwark/context.h"
#include "bulwark/deadline_header.h"
#include "bulwark/error_traits.h"
#include "bulwark/expected.h"
#include "bulwark/fallback.h"
#include "bulwark/observe.h"
#include "bulwark/outcome.h"
#include "bulwark/retry.h"
#include "bulwark/retry_budget.h"

namespace bulwark::prometheus {
struct ExpositionOptions;
}  // namespace bulwark::prometheus

namespace bulwark::http {

// The breaker kept per host by default (Config::breaker): a count window, so that rate
// and slow-call rules are available (with only consecutive_failures set, the window is
// unused). Config::any_breaker picks another kind.
using Breaker = CountWindowBreaker;

// A breaker of any of the three kinds (circuit_breaker.h), for Config::any_breaker:
// what `bulwark calibrate` proposes may be any of them. monostate: Config::breaker.
using AnyBreakerConfig =
    std::variant<std::monostate, BreakerConfig, CountWindowConfig, TimeWindowConfig>;

// A key's breaker, whatever its kind: what breaker_for() returns. Pointer-like (null
// for a URL that does not parse), a copyable view; valid while the client lives.
// Thread-safe as the breaker's own members are.
class BreakerRef {
 public:
  BreakerRef() noexcept = default;
  BreakerRef(std::nullptr_t) noexcept {}  // NOLINT: a null reference
  template <class B>
  requires(std::is_same_v<B, CircuitBreaker> || std::is_same_v<B, CountWindowBreaker> ||
           std::is_same_v<B, TimeWindowBreaker>) explicit BreakerRef(B* b) noexcept
      : b_(b) {}

  explicit operator bool() const noexcept { return b_.index() != 0; }
  // Calls f(breaker) with the breaker as its own type. Must not be null.
  template <class F>
  decltype(auto) visit(F&& f) const noexcept {
    if (auto* b = get_if<CircuitBreaker>()) return f(*b);
    if (auto* b = get_if<TimeWindowBreaker>()) return f(*b);
    return f(*get_if<CountWindowBreaker>());
  }
  friend bool operator==(const BreakerRef& r, std::nullptr_t) noexcept { return !r; }
  const BreakerRef* operator->() const noexcept { return this; }

  // The breaker as its own type, or null if it is of another kind.
  template <class B>
  B* get_if() const noexcept {
    auto* p = std::get_if<B*>(&b_);
    return p != nullptr ? *p : nullptr;
  }

  // The breaker's state(), snapshot(), name() and reset() (circuit_breaker.h). Must
  // not be null.
  State state() const noexcept {
    return visit([](auto& b) { return b.state(); });
  }
  BreakerSnapshot snapshot() const noexcept {
    return visit([](auto& b) { return b.snapshot(); });
  }
  std::string_view name() const noexcept {
    return visit([](auto& b) { return b.name(); });
  }
  // Back to CLOSED, a new generation: an operator's action (and tests').
  void reset() const noexcept {
    visit([](auto& b) { b.reset(); });
  }

 private:
  std::variant<std::monostate, CircuitBreaker*, CountWindowBreaker*, TimeWindowBreaker*> b_;
};

struct Header {
  std::string name;
  std::string value;
};
using Headers = std::vector<Header>;

// The value of the first header named `name` (ASCII case-insensitive), if any.
std::optional<std::string_view> find_header(const Headers& headers, std::string_view name);

struct Request {
  std::string method = "GET";
  std::string url;  // absolute http:// or https:// URL
  Headers headers = {};
  std::string body = {};
  // The whole request's time, all attempts and backoffs included. Zero: the client's
  // default_timeout. Shortens the context's deadline, never extends it.
  Nanos timeout = Nanos::zero();
  // POST/PATCH: the key that makes a retry safe; sent on every attempt. Empty: none
  // (unless the client makes one). Ignored for the other methods.
  std::string idempotency_key = {};
  // With Config::key_by == route: the route template ("/reviews/{id}") whose breaker
  // and bulkhead this request uses. Empty: the URL's path.
  std::string route = {};
};

struct Response {
  long status = 0;
  Headers headers;
  std::string body;

  std::optional<std::string_view> header(std::string_view name) const {
    return find_header(headers, name);
  }
};

// Who is at fault for each kind, and whether it is retried: see "Classification" above.
enum class ErrorKind : std::uint8_t {
  invalid_request,      // a bad URL, method or header: nothing was sent
  transport,            // connection refused or reset, name resolution, TLS, a body
                        // cut short, an empty reply, ...
  timeout,              // an attempt ran out of time, or no time was left for one
  status,               // the server answered with an error status (see `status`)
  protocol,             // the server's answer is not valid HTTP (a garbled status line,
                        // a malformed header, broken framing): see `message`
  body_too_large,       // the response body exceeded max_body_bytes
  headers_too_large,    // the response headers exceeded max_header_bytes (or one line
                        // exceeded libcurl's 100 KB)
  redirect,             // a redirect not followed (policy off), too many, or one
                        // without a usable Location
  rejected_by_breaker,  // the host's breaker is open: see retry_after
  bulkhead_full,        // the host's bulkhead had no free slot
  cancelled,            // the context's stop_token was triggered (or, AsyncClient, the
                        // awaiting coroutine was cancelled)
  shutdown,             // the client was destroyed while the request was pending
};
std::string_view to_string(ErrorKind k) noexcept;

struct Error {
  ErrorKind kind = ErrorKind::transport;
  // Why the pipeline stopped: call_error (not retried), retries_exhausted,
  // deadline_exceeded, budget_exhausted, breaker_open, ... (fallback.h).
  Reason reason = Reason::call_error;
  long status = 0;      // the HTTP status for ErrorKind::status (and redirect), else 0
  std::string message;  // human-readable detail (curl's error text, the Location, ...)
  Nanos retry_after = Nanos::zero();  // the server's valid Retry-After, or the breaker's
                                      // remaining open time; zero if neither
  std::uint32_t attempts = 0;         // attempts that reached the server (0: none)
  std::optional<Response> response;   // the error response, for ErrorKind::status

  // What the error means to the breaker: failure (the server's fault) or ignored.
  Outcome outcome() const noexcept { return outcome_; }
  // The server's Retry-After, if it sent a valid one (the retry honours it).
  std::optional<Nanos> retry_after_hint() const noexcept;

  // Set by the client as it classifies the error; read through the functions above.
  Outcome outcome_ = Outcome::failure;
  bool has_hint_ = false;      // retry_after holds the server's valid Retry-After
  bool retryable_ = true;      // a retry could succeed (false for a body cap, a redirect, ...)
  bool hint_ignored_ = false;  // the server sent a Retry-After the client ignored
};

// Totals since the client was built. Relaxed atomics.
struct ClientStats {
  std::uint64_t requests;             // request() calls
  std::uint64_t attempts;             // transfers started
  std::uint64_t hostile_retry_after;  // Retry-After values ignored (invalid or too large)
  std::uint64_t handles_created;      // curl easy handles made (reuse keeps this small)
  std::uint64_t in_flight;            // requests started and not yet returned (a gauge)
  std::uint64_t transfers_in_flight;  // transfers in progress now (a gauge)
  std::uint64_t fallbacks_used;       // failed requests Config::fallback answered
  std::uint64_t fallbacks_failed;     // failed requests whose fallback failed too
};

enum class KeyBy : std::uint8_t {
  host,   // one breaker and bulkhead per scheme://host:port
  route,  // one per host and route template (Request::route, or the path)
};

struct Config {
  // Names the client's registry in metrics and errors.
  std::string name = "http";
  // Each host's (or route's) breaker. Rate and slow-call rules use a count window.
  typename Breaker::Config breaker{
      .name = "http", .consecutive_failures = 5, .open_duration = std::chrono::seconds(30)};
  // Another kind of breaker per key, in place of `breaker` when set: a BreakerConfig
  // (consecutive failures: the lightest), a CountWindowConfig or a TimeWindowConfig
  // (rates over the last N calls or the last T). Validated as the registry validates it.
  //   config.any_breaker = bulwark::TimeWindowConfig{.name = "reviews", ...};
  AnyBreakerConfig any_breaker{};
  // Keep a BreakerMetrics block per key (registry.h): write_metrics() then exports
  // <prefix>_circuitbreaker_transitions_total{from,to} — which the flapping alert of
  // docs/alerts uses — and the call-duration histogram. sizeof(BreakerMetrics) per key.
  bool detailed_metrics = false;
  // Each host's bulkhead; max_wait > 0 lets a request queue for a slot (within its deadline).
  BulkheadConfig bulkhead{.name = "http", .max_concurrent = 64};
  // Optional: an adaptive concurrency limit per host (or route: key_by) in the bulkhead's
  // place (adaptive_limit.h): AsyncClient's client-wide bulkhead and Client's per-host one
  // are then not used. Each key gets its own limiter (named "<name> <key>"), fed by its
  // requests: a success completes with the hop's round trip, a timeout or a 503/429 (the
  // server shedding load) drops, other errors are ignored. A request it refuses fails at
  // once with ErrorKind::bulkhead_full, announced as a `rejection` event
  // (BulkheadRejectionInfo, name = this name, key); write_metrics() exports each key's
  // limit, in-flight, rejections and drops as
  // <prefix>_adaptive_{limit,inflight,rejections_total,drops_total}{name="<name> <key>"}.
  std::optional<AdaptiveLimitConfig> adaptive_limit = std::nullopt;
  // Each host's retry. Its idempotency_key hook is not used (see Request).
  RetryConfig retry{};
  // Each host's retry budget.
  RetryBudgetConfig budget{};
  KeyBy key_by = KeyBy::host;

  Nanos default_timeout = std::chrono::seconds(10);  // > 0: a request without its own timeout
  Nanos attempt_timeout = Nanos::zero();             // one attempt's cap; zero: none
  Nanos connect_timeout = std::chrono::seconds(2);   // > 0

  // Status → outcome: success returns the response; failure and ignored return
  // ErrorKind::status (failures are retried). Empty: 5xx and 429 fail, other 4xx are
  // ignored, anything below 400 succeeds.
  std::function<Outcome(long status)> classify = {};

  Nanos max_retry_after = std::chrono::minutes(2);  // longer Retry-After values are ignored
  std::size_t max_body_bytes = 8u << 20;            // response body cap
  std::size_t max_header_bytes = 64u << 10;         // response header cap (all headers)
  std::uint32_t max_redirects = 0;                  // 0: redirects are not followed
  // Request headers that belong to the request's origin, dropped by a redirect to
  // another one — beside those always dropped (Authorization, Proxy-Authorization,
  // Cookie, Cookie2 and idempotency_header). An API key header, say.
  std::vector<std::string> origin_headers = {};

  // Every attempt tells the server the time it has left (Time, above: what the
  // attempt will wait, truncated) in this header, so a server can stop before its
  // caller gives up (bulwark/deadline_header.h reads it). Default format: gRPC's
  // grpc-timeout, "X-Request-Timeout: 850m" (850 ms); milliseconds: "850". A request
  // that sets the header itself keeps its value. Empty: not sent.
  std::string deadline_header = "X-Request-Timeout";
  DeadlineHeaderFormat deadline_header_format = DeadlineHeaderFormat::grpc_timeout;

  std::string idempotency_header = "Idempotency-Key";
  // Make a key for POST/PATCH requests that have none, so they can be retried. Only
  // safe when the server deduplicates by that key.
  bool make_idempotency_keys = false;
  // Makes keys; empty: 128 random bits in hex. Called concurrently: thread-safe.
  std::function<std::string()> key_generator = {};

  // Optional: an answer for a request that failed on a key (host, or host and route:
  // the registry key), in place of the error — a cached page, a default. Called with
  // the key, the request (the redirect hop that failed) and its error, for the errors
  // that protect or report the server (a failure, rejected_by_breaker, bulkhead_full,
  // timeout), never for the caller's own (invalid_request, a 4xx, cancelled,
  // shutdown). Returns:
  //   std::nullopt   no fallback for this key or error: the error stands, not counted;
  //   a Response     returned to the caller; counted in <prefix>_fallback_calls_total
  //                  {kind="rejected"|"failed"} of the key (rejected: no attempt reached
  //                  the server) and <prefix>_http_client_fallback_used_total, and
  //                  announced as a `fallback` event;
  //   an Error       the fallback failed: the request's own error stands, counted in
  //                  <prefix>_http_client_fallback_failed_total.
  // A fallback that throws has failed. Runs on the request's thread (AsyncClient: the
  // executor's): keep it short, it must not block. Called concurrently: thread-safe.
  std::function<std::optional<Expected<Response, Error>>(
      const std::string& key, const Request& request, const Error& error)>
      fallback = {};

  std::size_t max_idle_handles = 16;  // curl handles kept for reuse
  std::string user_agent = "bulwark-http/0.1";
};

class Client {
 public:
  // Validates `config` (throws InvalidConfig naming the field) and initialises libcurl
  // once per process.
  explicit Client(Config config);
  // Cancels the requests in flight and waits until each has returned (see Lifetime).
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends `request` through the host's breaker, bulkhead and retry. Blocks the calling
  // thread for at most the request's deadline (plus scheduling).
  Expected<Response, Error> request(const Request& request, const Context& ctx = Context());

  Expected<Response, Error> get(std::string url, Nanos timeout = Nanos::zero()) {
    return request(Request{.url = std::move(url), .timeout = timeout});
  }

  ClientStats stats() const noexcept;
  const Config& config() const noexcept;

  // The Prometheus exposition (bulwark/prometheus.h) of the client: per host (or
  // route), its breaker, bulkhead, retry and retry budget (labels name, key; registry
  // totals under registry=Config::name), then the counters of stats() as
  // <prefix>_http_client_{requests,attempts,hostile_retry_after,handles_created}_total
  // and the gauges <prefix>_http_client_{requests,transfers}_in_flight (label
  // client=Config::name). What serving /metrics needs. Cost: a scrape of the
  // host registry (prometheus.h); allocates. May be called concurrently with requests.
  void write_metrics(std::ostream& out) const;
  void write_metrics(std::ostream& out, const prometheus::ExpositionOptions& options) const;

  // The breaker of `url`'s host (or route: Config::key_by), created if needed, for
  // inspection (state(), snapshot()), an operator's reset() and tests; of the kind the
  // config chose (BreakerRef::get_if gives the typed breaker). Null for a URL that does
  // not parse. Valid while the client lives. Cost: a registry lookup (allocates only to
  // create the key). Thread-safe: any thread; the breaker's readers are too.
  BreakerRef breaker_for(const std::string& url, const std::string& route = {});

  // New thresholds for every host's (or route's) breaker, for new calls, keeping each
  // breaker's state, counts and permits in flight (BreakerPolicy::reconfigure says what
  // may change): how a service applies a reloaded configuration file
  // (bulwark::config::Config::reload). `next` must be of the breaker kind the client was
  // built with (a CountWindowConfig for Config::breaker). Throws InvalidConfig, changing
  // nothing, if it is not valid, of another kind, or changes what a live breaker keeps.
  // Thread-safe: any thread, while requests run. Cost: a validation and an allocation.
  void reconfigure(const AnyBreakerConfig& next);

  // Calls `listener` on every state change of every host's (or route's) breaker, so a
  // service can log them without polling: Event (observe.h) with key = the breaker's
  // registry key (the origin "scheme://host:port", or origin and route with
  // KeyBy::route), name = Config::breaker.name, info = TransitionInfo (from, to,
  // reason); bulwark::to_logfmt(e) makes it a log line. It runs synchronously on the
  // thread whose request caused the transition (the one calling request()), after the
  // change is visible, with no bulwark lock held; keep it short, as that request waits
  // for it. Cost: with no listener, a transition pays one relaxed load; subscribing
  // allocates. Thread-safe: subscribe and unsubscribe from any thread, concurrently
  // with requests. The Subscription removes the listener when destroyed and must not
  // outlive the client (release() keeps it for the client's lifetime).
  Subscription on_transition(EventListener listener);
  // The same for any kinds of event the client's registry emits (observe.h): breaker
  // rejections, per-host bulkhead rejections, Config::fallback's answers (fallback),
  // retries (retry: RetryInfo, as each retry starts, with what became of the failed
  // attempt's Retry-After: none, honoured, ignored), key creation, flapping. Rejections
  // and retries come by the thousand during an outage: count or sample them.
  Subscription subscribe(EventMask kinds, EventListener listener);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace bulwark::http

namespace bulwark {
template <>
struct ErrorTraits<http::Error> {
  static Outcome outcome(const http::Error& e) noexcept { return e.outcome(); }
  static std::optional<Nanos> retry_after(const http::Error& e) noexcept {
    return e.retry_after_hint();
  }
  // 429 Too Many Requests and 503 Service Unavailable: the server shedding load.
  static bool overloaded(const http::Error& e) noexcept {
    return e.kind == http::ErrorKind::status && (e.status == 429 || e.status == 503);
  }
};
}  // namespace bulwark

#endif  // BULWARK_HTTP_CLIENT_H_
