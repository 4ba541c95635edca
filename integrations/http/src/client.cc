#include "bulwark/http/client.h"

#include <curl/curl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <random>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bulwark/config_error.h"
#include "bulwark/deadline_header.h"
#include "bulwark/http/retry_after.h"
#include "bulwark/metrics.h"
#include "bulwark/pipeline.h"
#include "bulwark/prometheus.h"
#include "hosts.h"

namespace bulwark::http {

namespace {

char lower(char c) noexcept {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

// RFC 9110 token characters (methods, header names).
bool is_token(std::string_view s) noexcept {
  if (s.empty()) return false;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) != 0) continue;
    if (std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos) continue;
    return false;
  }
  return true;
}

// A header value may not hold CR, LF or NUL (no header injection).
bool is_field_value(std::string_view s) noexcept {
  return s.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

std::string_view trim_ows(std::string_view v) noexcept {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

Outcome default_classify(long status) noexcept {
  if (status >= 500 || status == 429) return Outcome::failure;
  if (status >= 400) return Outcome::ignored;
  return Outcome::success;
}

std::string random_key() {
  thread_local std::mt19937_64 gen{std::random_device{}()};
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(gen()),
                static_cast<unsigned long long>(gen()));
  return std::string(buf, 32);
}

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct ParsedUrl {
  std::string url;     // the whole URL, as curl normalised it
  std::string origin;  // scheme://host:port
  std::string path;
};

// Parses an absolute http(s) URL with libcurl's URL parser; with `base`, `url` may be
// relative to it (a redirect's Location).
Expected<ParsedUrl, std::string> parse_url(const std::string& url,
                                           const std::string* base = nullptr) {
  CURLU* u = curl_url();
  if (u == nullptr) return Unexpected(std::string("out of memory"));
  struct Free {
    CURLU* u;
    ~Free() { curl_url_cleanup(u); }
  } guard{u};
  if (base != nullptr && curl_url_set(u, CURLUPART_URL, base->c_str(), 0) != CURLUE_OK)
    return Unexpected("malformed URL '" + *base + "'");
  if (curl_url_set(u, CURLUPART_URL, url.c_str(), 0) != CURLUE_OK)
    return Unexpected("malformed URL '" + url + "'");
  auto part = [&](CURLUPart p, unsigned flags) -> std::string {
    char* s = nullptr;
    if (curl_url_get(u, p, &s, flags) != CURLUE_OK || s == nullptr) return {};
    std::string out(s);
    curl_free(s);
    return out;
  };
  std::string scheme = part(CURLUPART_SCHEME, 0);
  if (scheme != "http" && scheme != "https")
    return Unexpected("unsupported scheme '" + scheme + "' in URL '" + url + "' (http, https)");
  std::string host = part(CURLUPART_HOST, 0);
  if (host.empty()) return Unexpected("no host in URL '" + url + "'");
  std::string port = part(CURLUPART_PORT, CURLU_DEFAULT_PORT);
  return ParsedUrl{part(CURLUPART_URL, 0), scheme + "://" + host + ":" + port,
                   part(CURLUPART_PATH, 0)};
}

bool idempotent_method(std::string_view m) noexcept {
  return m == "GET" || m == "HEAD" || m == "PUT" || m == "DELETE" || m == "OPTIONS" || m == "TRACE";
}

// The redirects the client follows (the fetch standard's redirect statuses).
bool followed_redirect(long status) noexcept {
  return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

Error make_error(ErrorKind kind, Outcome outcome, bool retryable, std::string message,
                 long status = 0) {
  Error e;
  e.kind = kind;
  e.outcome_ = outcome;
  e.retryable_ = retryable;
  e.message = std::move(message);
  e.status = status;
  return e;
}

Error shutdown_error() {
  Error e = make_error(ErrorKind::shutdown, Outcome::ignored, false,
                       "the client was destroyed while the request was pending");
  e.reason = Reason::cancelled;
  return e;
}

// One transfer's state, shared with libcurl's callbacks.
struct SList {
  curl_slist* list = nullptr;
  SList() = default;
  SList(SList&& o) noexcept : list(std::exchange(o.list, nullptr)) {}
  SList& operator=(SList&& o) noexcept {
    std::swap(list, o.list);
    return *this;
  }
  ~SList() { curl_slist_free_all(list); }
  void add(const std::string& line) {
    if (curl_slist* l = curl_slist_append(list, line.c_str())) list = l;
  }
};

struct Transfer {
  Response response;
  std::size_t max_body = 0;
  std::size_t max_headers = 0;
  std::size_t header_bytes = 0;
  bool body_over = false;
  bool headers_over = false;
  bool headers_done = false;  // the blank line that ends the (final) header block came
  bool cancelled = false;
  std::string protocol_error;  // what the server's header block broke, if anything
  std::optional<std::string> content_length;
  const Context* ctx = nullptr;
  std::array<char, CURL_ERROR_SIZE> errbuf{};
  SList headers;  // the request's headers and the deadline header (Config::deadline_header)
};

std::size_t on_body(char* p, std::size_t size, std::size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::size_t len = size * n;
  if (len > t->max_body - std::min(t->max_body, t->response.body.size())) {
    t->body_over = true;
    return 0;  // ends the transfer with CURLE_WRITE_ERROR
  }
  t->response.body.append(p, len);
  return len;
}

// Each header line as libcurl hands it over (status line, fields, the blank line).
// Returning 0 ends the transfer (CURLE_WRITE_ERROR); the flags say why.
std::size_t on_header(char* p, std::size_t size, std::size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::size_t len = size * n;
  t->header_bytes += len;
  if (t->header_bytes > t->max_headers) {
    t->headers_over = true;
    return 0;
  }
  std::string_view line(p, len);
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.remove_suffix(1);
  if (line.starts_with("HTTP/")) {
    // A new response (after a 100 Continue): its own header block.
    t->response.headers.clear();
    t->response.body.clear();
    t->content_length.reset();
    t->headers_done = false;
    return len;
  }
  if (line.empty()) {
    t->headers_done = true;
    return len;
  }
  if (line.front() == ' ' || line.front() == '\t') {
    // obs-fold (RFC 9112 §5.2): the line continues the previous field's value.
    if (t->response.headers.empty()) {
      t->protocol_error = "a folded header line with no header before it";
      return 0;
    }
    const std::string_view more = trim_ows(line);
    std::string& value = t->response.headers.back().value;
    if (!more.empty()) value += (value.empty() ? "" : " ") + std::string(more);
    return len;
  }
  const auto colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0 || !is_token(line.substr(0, colon))) {
    t->protocol_error = "a malformed header line '" + std::string(line.substr(0, 80)) + "'";
    return 0;
  }
  const std::string_view name = line.substr(0, colon);
  const std::string_view value = trim_ows(line.substr(colon + 1));
  if (iequals(name, "Content-Length")) {
    if (t->content_length && *t->content_length != value) {
      t->protocol_error = "conflicting Content-Length headers ('" + *t->content_length + "', '" +
                          std::string(value.substr(0, 40)) + "')";
      return 0;
    }
    t->content_length = std::string(value);
  }
  t->response.headers.push_back({std::string(name), std::string(value)});
  return len;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  if (t->ctx->stop_requested()) {
    t->cancelled = true;
    return 1;
  }
  return 0;
}

std::int64_t ceil_ms(Nanos d) { return std::chrono::ceil<std::chrono::milliseconds>(d).count(); }

Expected<void, ConfigError> validate_config(const Config& c) {
  const auto bad = [&](std::string field, std::string msg) -> Expected<void, ConfigError> {
    return Unexpected(
        ConfigError{"http client '" + c.name + "'", std::move(field), std::move(msg)});
  };
  if (c.name.empty()) return bad("name", "must not be empty");
  if (c.default_timeout <= Nanos::zero()) return bad("default_timeout", "must be positive");
  if (c.connect_timeout <= Nanos::zero()) return bad("connect_timeout", "must be positive");
  if (c.attempt_timeout < Nanos::zero()) return bad("attempt_timeout", "must not be negative");
  if (c.max_retry_after < Nanos::zero()) return bad("max_retry_after", "must not be negative");
  if (c.max_body_bytes == 0) return bad("max_body_bytes", "must be positive");
  if (c.max_header_bytes < 256) return bad("max_header_bytes", "must be at least 256");
  if (c.max_redirects > 50)
    return bad("max_redirects", "must be at most 50 (got " + std::to_string(c.max_redirects) + ")");
  if (!is_token(c.idempotency_header))
    return bad("idempotency_header", "must be a header name (got '" + c.idempotency_header + "')");
  for (const std::string& h : c.origin_headers) {
    if (!is_token(h)) return bad("origin_headers", "must hold header names (got '" + h + "')");
  }
  if (!c.deadline_header.empty() && !is_token(c.deadline_header))
    return bad("deadline_header",
               "must be a header name or empty (got '" + c.deadline_header + "')");
  if (auto ok = validate(c.bulkhead); !ok) return ok;
  if (c.adaptive_limit) {
    if (auto ok = validate(*c.adaptive_limit); !ok) return ok;
  }
  if (auto ok = validate(c.retry); !ok) return ok;
  if (auto ok = validate(c.budget); !ok) return ok;
  return {};
}

}  // namespace

std::optional<std::string_view> find_header(const Headers& headers, std::string_view name) {
  for (const Header& h : headers) {
    if (iequals(h.name, name)) return std::string_view(h.value);
  }
  return std::nullopt;
}

std::string_view to_string(ErrorKind k) noexcept {
  switch (k) {
    case ErrorKind::invalid_request:
      return "invalid_request";
    case ErrorKind::transport:
      return "transport";
    case ErrorKind::timeout:
      return "timeout";
    case ErrorKind::status:
      return "status";
    case ErrorKind::protocol:
      return "protocol";
    case ErrorKind::body_too_large:
      return "body_too_large";
    case ErrorKind::headers_too_large:
      return "headers_too_large";
    case ErrorKind::redirect:
      return "redirect";
    case ErrorKind::rejected_by_breaker:
      return "rejected_by_breaker";
    case ErrorKind::bulkhead_full:
      return "bulkhead_full";
    case ErrorKind::cancelled:
      return "cancelled";
    case ErrorKind::shutdown:
      return "shutdown";
  }
  return "unknown";
}

std::optional<Nanos> Error::retry_after_hint() const noexcept {
  if (!has_hint_) return std::nullopt;
  return retry_after;
}

// A curl header list, freed with its owner.

// A request checked and ready for the pipeline.
struct Prepared {
  std::string key;              // the registry key: host, or host and route
  std::string origin;           // scheme://host:port
  bool retry_allowed;           // idempotent, or with a key
  std::string idempotency_key;  // the key sent, if any
  SList headers;
  Context ctx;  // with the request's deadline
  detail::Hosts::Entry host;
};

// A pooled curl easy handle; the synchronous client drives it through a multi handle
// of its own, so that a stop request can wake the wait (curl_multi_wakeup).
struct Handle {
  CURL* easy = nullptr;
  CURLM* multi = nullptr;
};

class Client::Impl {
 public:
  // `own`: each key's bulkhead gates its requests, as detail::Hosts (false for
  // AsyncClient, which has one for all keys).
  explicit Impl(Config c, bool own = true)
      : config(checked(std::move(c))), hosts(config, own), own_bulkheads(own) {
    if (!config.classify) config.classify = default_classify;
    if (!config.key_generator) config.key_generator = random_key;
  }
  ~Impl() {
    for (const Handle& h : pool) {
      curl_easy_cleanup(h.easy);
      if (h.multi != nullptr) curl_multi_cleanup(h.multi);
    }
  }

  static Config checked(Config c) {
    if (auto ok = validate_config(c); !ok)
      bulwark::detail::raise_config_error(std::move(ok).error());
    global_init();
    return c;
  }

  Handle take_handle() {
    {
      std::lock_guard lock(pool_mu);
      if (!pool.empty()) {
        Handle h = pool.back();
        pool.pop_back();
        return h;
      }
    }
    handles_created.fetch_add(1, std::memory_order_relaxed);
    return Handle{curl_easy_init(), nullptr};
  }
  void give_handle(Handle h) {
    curl_easy_reset(h.easy);  // options back to defaults; live connections are kept
    {
      std::lock_guard lock(pool_mu);
      if (pool.size() < config.max_idle_handles) {
        pool.push_back(h);
        return;
      }
    }
    curl_easy_cleanup(h.easy);
    if (h.multi != nullptr) curl_multi_cleanup(h.multi);
  }

  std::string key_of(const ParsedUrl& u, const std::string& route) const {
    if (config.key_by == KeyBy::host) return u.origin;
    return u.origin + " " + (route.empty() ? u.path : route);
  }

  // One attempt, in three steps so the async client shares them: set the options
  // (an error if no time is left), perform, read the result.
  std::optional<Error> prepare(CURL* h, const Request& req, curl_slist* headers, const Context& ctx,
                               Transfer& t);
  Expected<Response, Error> finish(CURL* h, CURLcode rc, Transfer& t, const Context& ctx,
                                   const std::string& url);
  CURLcode perform(Handle& h, Transfer& t, const std::stop_token& stop);
  Expected<Response, Error> attempt(Handle& h, const Request& req, curl_slist* headers,
                                    const Context& ctx);
  // Checks `req` and makes its header list and key. `count`: a request of the caller's
  // (a redirect's next hop is not counted again).
  Expected<Prepared, Error> prepare_request(const Request& req, const Context& ctx, bool count);
  // The request a followed redirect (`res`, a 3xx whose Location finish() checked)
  // makes of `cur`, as client.h's "Redirects" says.
  Request next_hop(const Request& cur, const Prepared& p, const Response& res) const;
  static Error convert(Failure<Error>&& f, const std::string& key);

  // What one hop's last attempt left for the next attempt's retry event.
  struct Trail {
    RetryAfterUse use = RetryAfterUse::none;
    Nanos delay = Nanos::zero();
  };
  static void note_attempt(Trail& t, const Expected<Response, Error>& r) noexcept {
    t = Trail{};
    if (r) return;
    if (r.error().has_hint_) t = Trail{RetryAfterUse::honoured, r.error().retry_after};
    if (r.error().hint_ignored_) t.use = RetryAfterUse::ignored;
  }
  // Before attempt `call` of a hop: a `retry` event when it is a retry (call > 1) and
  // someone listens. Shared by both clients.
  void announce_retry(Prepared& p, std::uint32_t call, const Trail& t) {
    if (call < 2 || !hosts.events().wants(EventKind::retry)) return;
    const BreakerRef b = p.host.breaker();
    const void* source = b.visit([](auto& breaker) -> const void* { return &breaker; });
    hosts.events().emit(Event{EventKind::retry, b.name(), p.key, source, now_ticks(SteadyClock{}),
                              RetryInfo{call, t.use, t.delay}});
  }
  Expected<Response, Error> request(const Request& req, const Context& ctx);

  // A request's way through its hops: the request, then each redirect followed.
  struct Hops {
    std::optional<Request> owned;  // the current hop's request, once it is a redirect's
    const Request* cur = nullptr;  // the current hop's request
    std::uint32_t earlier = 0;     // attempts of the hops before
    std::uint32_t hop = 0;         // redirects followed so far
  };
  // After a hop's pipeline ended with `result` (`calls` attempts): the request's
  // answer, or nothing, with `prepared` and `hops` set for the next hop.
  std::optional<Expected<Response, Error>> after_hop(Hops& hops,
                                                     Expected<Prepared, Error>& prepared,
                                                     Expected<Response, Failure<Error>>&& result,
                                                     std::uint32_t calls);
  std::optional<Expected<Response, Error>> settle_hop(Hops& hops,
                                                      Expected<Prepared, Error>& prepared,
                                                      Expected<Response, Failure<Error>>&& result,
                                                      std::uint32_t calls);
  // Config::fallback's answer for a request that failed with `e` on `p`'s key, counted
  // and announced (a `fallback` event) when it answers; else `e` itself.
  Expected<Response, Error> fall_back(Prepared& p, const Request& req, Error&& e);

  // The requests in flight, so that the destructor can cancel them and wait.
  struct Live {
    std::stop_source stop;
    Live* prev = nullptr;
    Live* next = nullptr;
  };
  bool enter(Live& l) {
    std::lock_guard lock(live_mu);
    if (closed_) return false;
    l.next = live_head;
    if (live_head != nullptr) live_head->prev = &l;
    live_head = &l;
    return true;
  }
  void leave(Live& l) {
    // Notified under the lock: once it is released the destructor may free the client.
    std::lock_guard lock(live_mu);
    (l.prev != nullptr ? l.prev->next : live_head) = l.next;
    if (l.next != nullptr) l.next->prev = l.prev;
    live_cv.notify_all();
  }
  // Stops every request in flight and waits until each has left.
  void close_and_wait() {
    std::unique_lock lock(live_mu);
    closed_ = true;
    closed.store(true, std::memory_order_release);
    for (Live* l = live_head; l != nullptr; l = l->next) l->stop.request_stop();
    live_cv.wait(lock, [&] { return live_head == nullptr; });
  }

  Config config;
  detail::Hosts hosts;
  std::mutex pool_mu;
  std::vector<Handle> pool;
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> attempts{0};
  std::atomic<std::uint64_t> hostile_retry_after{0};
  std::atomic<std::uint64_t> handles_created{0};
  std::atomic<std::uint64_t> in_flight{0};
  std::atomic<std::uint64_t> transfers_in_flight{0};
  // False for AsyncClient: its one bulkhead is not the registry's, so settle_hop()
  // announces that bulkhead's rejections itself.
  bool own_bulkheads;
  std::atomic<std::uint64_t> fallbacks_used{0};
  std::atomic<std::uint64_t> fallbacks_failed{0};
  std::atomic<bool> closed{false};  // the client is going away: pending requests end

 private:
  std::mutex live_mu;
  std::condition_variable live_cv;
  Live* live_head = nullptr;  // under live_mu
  bool closed_ = false;       // under live_mu
};

std::optional<Error> Client::Impl::prepare(CURL* h, const Request& req, curl_slist* headers,
                                           const Context& ctx, Transfer& t) {
  Nanos budget = ctx.remaining();
  if (config.attempt_timeout > Nanos::zero()) budget = std::min(budget, config.attempt_timeout);
  if (budget < std::chrono::milliseconds(1)) {
    // Nothing was sent: the caller's time ran out, the server did nothing wrong.
    return make_error(ErrorKind::timeout, Outcome::ignored, false, "no time left for an attempt");
  }
  attempts.fetch_add(1, std::memory_order_relaxed);
  const std::int64_t timeout_ms = ceil_ms(budget);
  const std::int64_t connect_ms = std::min(timeout_ms, ceil_ms(config.connect_timeout));

  t.max_body = config.max_body_bytes;
  t.max_headers = config.max_header_bytes;
  t.ctx = &ctx;

  curl_easy_setopt(h, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  // Redirects are followed by the client itself, one hop at a time (request()).
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_ms));
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(connect_ms));
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, &on_progress);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, &t);
  curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(config.max_body_bytes));
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, t.errbuf.data());
  if (!config.deadline_header.empty() && budget != Nanos::max()) {
    // The time this attempt has (what curl will wait), truncated: never more than we
    // have left now. A request that set the header keeps its own.
    bool own = false;
    for (curl_slist* l = headers; l != nullptr; l = l->next) {
      const std::string_view line(l->data);
      own = own || (line.size() > config.deadline_header.size() &&
                    line[config.deadline_header.size()] == ':' &&
                    iequals(line.substr(0, config.deadline_header.size()), config.deadline_header));
      t.headers.add(l->data);
    }
    if (!own) {
      t.headers.add(config.deadline_header + ": " +
                    format_timeout_header(budget, config.deadline_header_format));
      headers = t.headers.list;
    }
  }
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(h, CURLOPT_USERAGENT, config.user_agent.c_str());
  if (req.method == "GET") {
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
  } else if (req.method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else {
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, req.body.data());
    if (req.method != "POST") curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  }

  return std::nullopt;
}

// curl_easy_perform, but through the handle's own multi handle, so that `stop` wakes
// the wait at once (curl_multi_wakeup) instead of at the next progress callback.
CURLcode Client::Impl::perform(Handle& h, Transfer& t, const std::stop_token& stop) {
  if (h.multi == nullptr) {
    h.multi = curl_multi_init();
    if (h.multi == nullptr) return CURLE_OUT_OF_MEMORY;
  }
  if (curl_multi_add_handle(h.multi, h.easy) != CURLM_OK) return CURLE_FAILED_INIT;
  CURLcode rc = CURLE_OK;
  {
    std::stop_callback wake(stop, [m = h.multi] { curl_multi_wakeup(m); });
    for (;;) {
      int running = 0;
      if (curl_multi_perform(h.multi, &running) != CURLM_OK) {
        rc = CURLE_OUT_OF_MEMORY;
        break;
      }
      if (running == 0) {
        int left = 0;
        rc = CURLE_FAILED_INIT;  // no verdict from curl: should not happen
        while (CURLMsg* m = curl_multi_info_read(h.multi, &left)) {
          if (m->msg == CURLMSG_DONE && m->easy_handle == h.easy) rc = m->data.result;
        }
        break;
      }
      if (stop.stop_requested()) {
        t.cancelled = true;
        rc = CURLE_ABORTED_BY_CALLBACK;
        break;
      }
      // Waits for socket activity, curl's own next timeout, or a wakeup; at most 1 s.
      if (curl_multi_poll(h.multi, nullptr, 0, 1000, nullptr) != CURLM_OK) {
        rc = CURLE_OUT_OF_MEMORY;
        break;
      }
    }
  }
  curl_multi_remove_handle(h.multi, h.easy);
  return rc;
}

Expected<Response, Error> Client::Impl::attempt(Handle& h, const Request& req, curl_slist* headers,
                                                const Context& ctx) {
  if (closed.load(std::memory_order_acquire)) return Unexpected(shutdown_error());
  Transfer t;
  if (auto e = prepare(h.easy, req, headers, ctx, t)) return Unexpected(std::move(*e));
  transfers_in_flight.fetch_add(1, std::memory_order_relaxed);
  const CURLcode rc = perform(h, t, ctx.stop_token());
  transfers_in_flight.fetch_sub(1, std::memory_order_relaxed);
  auto r = finish(h.easy, rc, t, ctx, req.url);
  if (!r && r.error().kind == ErrorKind::cancelled && closed.load(std::memory_order_acquire))
    return Unexpected(shutdown_error());
  return r;
}

Expected<Response, Error> Client::Impl::finish(CURL* h, CURLcode rc, Transfer& t,
                                               const Context& ctx, const std::string& url) {
  const std::string detail =
      t.errbuf[0] != '\0' ? std::string(t.errbuf.data()) : curl_easy_strerror(rc);
  if (rc != CURLE_OK) {
    if (t.cancelled || ctx.stop_requested())
      return Unexpected(make_error(ErrorKind::cancelled, Outcome::ignored, false, "cancelled"));
    if (t.body_over || rc == CURLE_FILESIZE_EXCEEDED) {
      return Unexpected(make_error(
          ErrorKind::body_too_large, Outcome::failure, false,
          "response body exceeds max_body_bytes (" + std::to_string(config.max_body_bytes) + ")"));
    }
    if (t.headers_over) {
      return Unexpected(make_error(ErrorKind::headers_too_large, Outcome::failure, false,
                                   "response headers exceed max_header_bytes (" +
                                       std::to_string(config.max_header_bytes) + ")"));
    }
    if (!t.protocol_error.empty()) {
      return Unexpected(make_error(ErrorKind::protocol, Outcome::failure, true,
                                   "invalid response from the server: " + t.protocol_error));
    }
    // One header line longer than libcurl keeps (100 KB) is refused inside libcurl,
    // before the header callback sees it, as "out of memory" (CURLE_TOO_LARGE from
    // curl 8.6): the same error as headers over the cap, not a retryable memory fault.
    bool line_too_large = rc == CURLE_OUT_OF_MEMORY;
#if LIBCURL_VERSION_NUM >= 0x080600
    line_too_large = line_too_large || rc == CURLE_TOO_LARGE;
#endif
    if (line_too_large && !t.headers_done) {
      return Unexpected(make_error(
          ErrorKind::headers_too_large, Outcome::failure, false,
          "response headers exceed max_header_bytes (" + std::to_string(config.max_header_bytes) +
              "): a header line is longer than libcurl accepts (" + detail + ")"));
    }
    // Did anything reach the server? curl connects before it can judge a reply.
    char* ip = nullptr;
    const bool connected = curl_easy_getinfo(h, CURLINFO_PRIMARY_IP, &ip) == CURLE_OK &&
                           ip != nullptr && ip[0] != '\0';
    switch (rc) {
      case CURLE_OPERATION_TIMEDOUT:
        return Unexpected(make_error(ErrorKind::timeout, Outcome::failure, true, detail));
      case CURLE_UNSUPPORTED_PROTOCOL:
        // Before a connection: a scheme this libcurl lacks (the caller's). After one:
        // the server's reply was not HTTP/1.x (HTTP/0.9, "HTTP/9.9", a bad status code).
        if (!connected)
          return Unexpected(
              make_error(ErrorKind::invalid_request, Outcome::ignored, false, detail));
        return Unexpected(make_error(ErrorKind::protocol, Outcome::failure, true,
                                     "invalid response from the server: " + detail));
      case CURLE_WEIRD_SERVER_REPLY:
      case CURLE_BAD_CONTENT_ENCODING:
      case CURLE_HTTP2:
        return Unexpected(make_error(ErrorKind::protocol, Outcome::failure, true,
                                     "invalid response from the server: " + detail));
      case CURLE_RECV_ERROR:
        // libcurl reports a malformed chunk as a receive error; its message names it.
        if (detail.find("chunked-encoding") != std::string::npos) {
          return Unexpected(make_error(ErrorKind::protocol, Outcome::failure, true,
                                       "invalid response from the server: " + detail));
        }
        return Unexpected(make_error(ErrorKind::transport, Outcome::failure, true, detail));
      case CURLE_URL_MALFORMAT:
        return Unexpected(make_error(ErrorKind::invalid_request, Outcome::ignored, false, detail));
      default:
        return Unexpected(make_error(ErrorKind::transport, Outcome::failure, true, detail));
    }
  }

  long status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  t.response.status = status;
  if (status >= 300 && status < 400 && status != 304) {
    const auto location = t.response.header("Location");
    if (config.max_redirects == 0 || !followed_redirect(status)) {
      Error e = make_error(
          ErrorKind::redirect, Outcome::ignored, false,
          (config.max_redirects == 0
               ? std::string("redirect not followed (max_redirects is 0)")
               : "HTTP " + std::to_string(status) + " is not a redirect the client follows") +
              " to '" + std::string(location.value_or("")) + "'",
          status);
      e.response = std::move(t.response);
      return Unexpected(std::move(e));
    }
    // A redirect to follow: without a usable Location it is the server's error.
    std::string why;
    if (!location || trim_ows(*location).empty()) {
      why = "HTTP " + std::to_string(status) + " without a Location header";
    } else if (auto target = parse_url(std::string(trim_ows(*location)), &url); !target) {
      why = "HTTP " + std::to_string(status) + " with an unusable Location: " + target.error();
    }
    if (!why.empty()) {
      Error e = make_error(ErrorKind::redirect, Outcome::failure, false, why, status);
      e.response = std::move(t.response);
      return Unexpected(std::move(e));
    }
    return std::move(t.response);  // request() follows it
  }
  const Outcome outcome = config.classify(status);
  if (outcome == Outcome::success) return std::move(t.response);

  Error e = make_error(ErrorKind::status, outcome, outcome == Outcome::failure,
                       "HTTP " + std::to_string(status), status);
  std::size_t retry_afters = 0;
  for (const Header& hd : t.response.headers) retry_afters += iequals(hd.name, "Retry-After");
  if (retry_afters > 1) {
    // A singleton field sent twice: which one did the server mean? Neither is obeyed.
    hostile_retry_after.fetch_add(1, std::memory_order_relaxed);
    e.hint_ignored_ = true;
    e.message += " (" + std::to_string(retry_afters) + " Retry-After headers: ignored)";
  } else if (const auto value = t.response.header("Retry-After")) {
    const RetryAfter ra =
        parse_retry_after(*value, std::chrono::system_clock::now(), config.max_retry_after);
    if (ra.status == RetryAfter::Status::ok) {
      e.retry_after = ra.delay;
      e.has_hint_ = true;
    } else {
      hostile_retry_after.fetch_add(1, std::memory_order_relaxed);
      e.hint_ignored_ = true;
      e.message +=
          ra.status == RetryAfter::Status::too_large
              ? " (Retry-After '" + std::string(*value) + "' above max_retry_after: ignored)"
              : " (Retry-After '" + std::string(*value) + "' malformed: ignored)";
    }
  }
  e.response = std::move(t.response);
  return Unexpected(std::move(e));
}

Expected<Prepared, Error> Client::Impl::prepare_request(const Request& req, const Context& ctx,
                                                        bool count) {
  if (count) requests.fetch_add(1, std::memory_order_relaxed);
  const auto invalid = [](std::string msg) {
    return Unexpected(
        make_error(ErrorKind::invalid_request, Outcome::ignored, false, std::move(msg)));
  };
  if (!is_token(req.method)) return invalid("invalid method '" + req.method + "'");
  for (const Header& hd : req.headers) {
    if (!is_token(hd.name)) return invalid("invalid header name '" + hd.name + "'");
    if (!is_field_value(hd.value)) return invalid("header '" + hd.name + "' has CR, LF or NUL");
  }
  auto url = parse_url(req.url);
  if (!url) return invalid(std::move(url).error());
  if (req.timeout < Nanos::zero()) return invalid("negative timeout");

  // The idempotency key: one per logical request, sent on every attempt.
  std::string key;
  const bool needs_key = !idempotent_method(req.method);
  if (needs_key) {
    if (const auto given = find_header(req.headers, config.idempotency_header)) {
      key = std::string(*given);  // the caller sent it itself
    } else if (!req.idempotency_key.empty()) {
      if (!is_field_value(req.idempotency_key)) return invalid("idempotency key has CR, LF or NUL");
      key = req.idempotency_key;
    } else if (config.make_idempotency_keys) {
      key = config.key_generator();
    }
  }
  Prepared p{
      .key = key_of(*url, req.route),
      .origin = url->origin,
      .retry_allowed = !needs_key || !key.empty(),
      .idempotency_key = key,
      .headers = {},
      .ctx = ctx.with_timeout(req.timeout > Nanos::zero() ? req.timeout : config.default_timeout),
      .host = {}};
  for (const Header& hd : req.headers) p.headers.add(hd.name + ": " + hd.value);
  if (needs_key && !key.empty() && !find_header(req.headers, config.idempotency_header))
    p.headers.add(config.idempotency_header + ": " + key);
  p.headers.add("Expect:");  // no 100-continue round trip for large bodies
  p.host = hosts.get(p.key);
  return p;
}

Request Client::Impl::next_hop(const Request& cur, const Prepared& p, const Response& res) const {
  const std::string location(trim_ows(res.header("Location").value_or("")));
  auto target = parse_url(location, &cur.url);  // finish() checked that it parses
  Request next;
  next.url = target ? target->url : location;
  const bool cross = !target || target->origin != p.origin;
  const long s = res.status;
  const bool to_get = (s == 303 && cur.method != "GET" && cur.method != "HEAD") ||
                      ((s == 301 || s == 302) && cur.method == "POST");
  next.method = to_get ? "GET" : cur.method;
  if (!to_get) next.body = cur.body;
  next.timeout = cur.timeout;
  if (!cross) next.route = cur.route;
  // The key goes on only to the same origin, with the same method and body.
  const bool keep_key = !cross && !to_get;
  if (keep_key) next.idempotency_key = p.idempotency_key;
  static constexpr std::array<std::string_view, 4> kCredentials = {
      "Authorization", "Proxy-Authorization", "Cookie", "Cookie2"};
  static constexpr std::array<std::string_view, 5> kBodyHeaders = {
      "Content-Type", "Content-Length", "Content-Encoding", "Content-Language", "Content-Location"};
  auto in = [](const auto& names, std::string_view n) {
    return std::any_of(std::begin(names), std::end(names),
                       [&](const auto& x) { return iequals(x, n); });
  };
  for (const Header& h : cur.headers) {
    if (!keep_key && iequals(h.name, config.idempotency_header)) continue;
    if (cross && (in(kCredentials, h.name) || in(config.origin_headers, h.name))) continue;
    if (to_get && in(kBodyHeaders, h.name)) continue;
    next.headers.push_back(h);
  }
  return next;
}

Error Client::Impl::convert(Failure<Error>&& f, const std::string& key) {
  Error out;
  if (f.error) {
    out = std::move(*f.error);
  } else {
    switch (f.reason) {
      case Reason::breaker_open:
      case Reason::breaker_half_open_full:
      case Reason::breaker_forced_open:
        out = make_error(ErrorKind::rejected_by_breaker, Outcome::ignored, false,
                         "the breaker of " + key + " is open");
        out.retry_after = f.retry_after;
        break;
      case Reason::bulkhead_full:
        out = make_error(ErrorKind::bulkhead_full, Outcome::ignored, false,
                         "the bulkhead of " + key + " is full");
        break;
      case Reason::cancelled:
        out = make_error(ErrorKind::cancelled, Outcome::ignored, false, "cancelled");
        break;
      default:
        out = make_error(ErrorKind::timeout, Outcome::ignored, false,
                         std::string("no attempt: ") + std::string(to_string(f.reason)));
        break;
    }
  }
  if (f.reason == Reason::cancelled && out.kind != ErrorKind::shutdown)
    out.kind = ErrorKind::cancelled;
  // An attempt aborted by the stop_token is the request's cancellation too.
  out.reason = out.kind == ErrorKind::cancelled || out.kind == ErrorKind::shutdown
                   ? Reason::cancelled
                   : f.reason;
  out.attempts = f.attempts;
  return out;
}

Expected<Response, Error> Client::Impl::request(const Request& req, const Context& ctx) {
  // The request runs on a stop_source of its own, stopped by the caller's stop_token
  // and by the client's destructor, which waits until it has left: nothing below may
  // touch the client once leave_guard is gone (it is destroyed last).
  Live live;
  if (!enter(live)) return Unexpected(shutdown_error());
  struct Leave {
    Impl* impl;
    Live& live;
    ~Leave() { impl->leave(live); }
  } leave_guard{this, live};
  in_flight.fetch_add(1, std::memory_order_relaxed);
  struct InFlight {
    std::atomic<std::uint64_t>& n;
    ~InFlight() { n.fetch_sub(1, std::memory_order_relaxed); }
  } gauge{in_flight};
  struct Forward {
    std::stop_source* to;
    void operator()() const noexcept { to->request_stop(); }
  };
  std::optional<std::stop_callback<Forward>> forward;
  if (ctx.stop_token().stop_possible()) forward.emplace(ctx.stop_token(), Forward{&live.stop});
  const Context own(SteadyClock{}, live.stop.get_token(), ctx.deadline());

  auto prepared = prepare_request(req, own, true);
  if (!prepared) return Unexpected(std::move(prepared).error());

  struct Lease {
    Impl* impl;
    Handle h;
    ~Lease() {
      if (h.easy != nullptr) impl->give_handle(h);
    }
  } lease{this, take_handle()};
  if (lease.h.easy == nullptr) {
    return Unexpected(make_error(ErrorKind::transport, Outcome::ignored, false,
                                 "could not create a curl handle"));
  }

  // Each hop (the request, then each redirect followed) goes through its origin's
  // breaker, bulkhead and retry.
  Hops hops;
  hops.cur = &req;
  for (;;) {
    Prepared& p = *prepared;
    detail::HostState& state = p.host.state();
    const bool retry_allowed = p.retry_allowed;
    std::uint32_t calls = 0;
    const Request& cur = *hops.cur;
    // The Handle as the breaker stage: its rejections are the registry's events.
    // The key's adaptive limit takes the bulkhead's place when configured.
    const auto run = [&](auto& breaker, auto gate) {
      const auto pipe = bulwark::pipeline(
          bulwark::breaker(breaker), gate,
          bulwark::retry(*state.retry, [retry_allowed](const Error& e) {
            return retry_allowed && e.retryable_ && e.outcome() == Outcome::failure;
          }));
      Trail trail;
      return pipe.execute(p.ctx, [&](const Context& c) {
        announce_retry(p, ++calls, trail);
        auto r = attempt(lease.h, cur, p.headers.list, c);
        note_attempt(trail, r);
        return r;
      });
    };
    auto result = p.host.with_handle([&](auto& breaker) {
      return state.limit ? run(breaker, bulwark::adaptive_limit(*state.limit))
                         : run(breaker, bulwark::bulkhead(*state.bulkhead));
    });
    if (auto answer = after_hop(hops, prepared, std::move(result), calls))
      return std::move(*answer);
  }
}

std::optional<Expected<Response, Error>> Client::Impl::after_hop(
    Hops& hops, Expected<Prepared, Error>& prepared, Expected<Response, Failure<Error>>&& result,
    std::uint32_t calls) {
  auto answer = settle_hop(hops, prepared, std::move(result), calls);
  // An error ends the request on the current hop (`prepared` moves on only with a
  // redirect followed): its key's fallback may answer instead.
  if (answer && !*answer && config.fallback)
    return fall_back(*prepared, *hops.cur, std::move(*answer).error());
  return answer;
}

namespace {

// Whether a fallback may answer for `e`: the server's or the network's fault, or a
// request refused to protect it (breaker, bulkhead, deadline). Not the caller's own
// mistakes, cancellation or shutdown.
bool falls_back(const Error& e) noexcept {
  switch (e.kind) {
    case ErrorKind::invalid_request:
    case ErrorKind::cancelled:
    case ErrorKind::shutdown:
      return false;
    case ErrorKind::rejected_by_breaker:
    case ErrorKind::bulkhead_full:
    case ErrorKind::timeout:
      return true;
    default:
      return e.outcome() == Outcome::failure;
  }
}

}  // namespace

Expected<Response, Error> Client::Impl::fall_back(Prepared& p, const Request& req, Error&& e) {
  if (!falls_back(e)) return Unexpected(std::move(e));
  std::optional<Expected<Response, Error>> answer;
  try {
    answer = config.fallback(p.key, req, e);
  } catch (...) {
    answer = Unexpected(make_error(ErrorKind::transport, Outcome::failure, false,
                                   "the fallback threw an exception"));
  }
  if (!answer) return Unexpected(std::move(e));  // no fallback for this key or error
  detail::HostState& state = p.host.state();
  if (!*answer) {
    fallbacks_failed.fetch_add(1, std::memory_order_relaxed);
    return Unexpected(std::move(e));
  }
  fallbacks_used.fetch_add(1, std::memory_order_relaxed);
  // Rejected: no attempt reached the server; failed: attempts did, and failed.
  const bool rejected = e.attempts == 0;
  state.count_fallback(rejected);
  p.host.with_handle([&](auto& handle) { handle.on_fallback(rejected, e.reason); });
  return std::move(*answer);
}

std::optional<Expected<Response, Error>> Client::Impl::settle_hop(
    Hops& hops, Expected<Prepared, Error>& prepared, Expected<Response, Failure<Error>>&& result,
    std::uint32_t calls) {
  Prepared& p = *prepared;
  using Answer = Expected<Response, Error>;
  if (!result) {
    Error e = convert(std::move(result).error(), p.key);
    const bool adaptive = p.host.state().limit != nullptr;
    if (e.kind == ErrorKind::bulkhead_full && (!own_bulkheads || adaptive) &&
        hosts.events().wants(EventKind::rejection)) {
      // The client-wide bulkhead's or the key's adaptive limit's refusal, with the key of
      // the request it refused (a per-host bulkhead's come from the registry, as its own).
      hosts.events().emit(Event{EventKind::rejection,
                                adaptive ? std::string_view(config.adaptive_limit->name)
                                         : std::string_view(config.bulkhead.name),
                                p.key, this, now_ticks(SteadyClock{}),
                                BulkheadRejectionInfo{BulkheadRejectReason::full}});
    }
    if (e.kind == ErrorKind::cancelled && closed.load(std::memory_order_acquire)) {
      const std::uint32_t tried = e.attempts;
      e = shutdown_error();
      e.attempts = tried;
    }
    e.attempts += hops.earlier;
    return Answer(Unexpected(std::move(e)));
  }
  if (config.max_redirects == 0 || !followed_redirect(result->status))
    return Answer(std::move(*result));
  hops.earlier += calls;
  if (hops.hop >= config.max_redirects) {
    Error e = make_error(ErrorKind::redirect, Outcome::ignored, false,
                         "more than max_redirects (" + std::to_string(config.max_redirects) +
                             ") redirects, the last to '" +
                             std::string(result->header("Location").value_or("")) + "'",
                         result->status);
    e.attempts = hops.earlier;
    e.response = std::move(*result);
    return Answer(Unexpected(std::move(e)));
  }
  Request next = next_hop(*hops.cur, p, *result);
  auto next_prepared = prepare_request(next, p.ctx, false);
  if (!next_prepared) {
    Error e = std::move(next_prepared).error();
    e.attempts = hops.earlier;
    return Answer(Unexpected(std::move(e)));
  }
  hops.owned = std::move(next);
  hops.cur = &*hops.owned;
  ++hops.hop;
  prepared = std::move(next_prepared);
  return std::nullopt;
}

namespace {

ClientStats read_stats(const Client::Impl& c) noexcept {
  return {c.requests.load(std::memory_order_relaxed),
          c.attempts.load(std::memory_order_relaxed),
          c.hostile_retry_after.load(std::memory_order_relaxed),
          c.handles_created.load(std::memory_order_relaxed),
          c.in_flight.load(std::memory_order_relaxed),
          c.transfers_in_flight.load(std::memory_order_relaxed),
          c.fallbacks_used.load(std::memory_order_relaxed),
          c.fallbacks_failed.load(std::memory_order_relaxed)};
}

// Writes one series of the client's own (label client=Config::name).
using ClientMetric = std::function<void(std::string_view what, std::string_view type,
                                        std::string_view help, std::uint64_t value)>;

// The exposition of either client (client.h's write_metrics): the host registry, then
// the client's counters and gauges, then what `extra` writes through the same helper
// (the async client's bulkhead).
void write_client_metrics(const Client::Impl& c, std::ostream& out,
                          const prometheus::ExpositionOptions& options,
                          const std::function<void(const ClientMetric&)>& extra) {
  prometheus::Exposition scrape(options);  // validates the options
  c.hosts.visit([&](const auto& registry) { scrape.add(registry); });
  scrape.write(out);
  if (c.config.adaptive_limit) {
    const auto limits = c.hosts.adaptive_limits();
    prometheus::write_adaptive_limits(out, limits, options.prefix);
  }

  const ClientStats s = read_stats(c);
  std::string labels = "client=\"";
  prometheus::append_label_value(labels, c.config.name);
  labels += '"';
  prometheus::Writer w(out);
  const ClientMetric metric = [&](std::string_view what, std::string_view type,
                                  std::string_view help, std::uint64_t v) {
    const std::string name = options.prefix + "_http_client_" + std::string(what);
    w.family(name, type, help);
    w.sample(name, "", labels, "", v);
  };
  metric("requests_total", "counter", "Requests made through the client.", s.requests);
  metric("attempts_total", "counter", "Transfers started (attempts of those requests).",
         s.attempts);
  metric("hostile_retry_after_total", "counter",
         "Retry-After values ignored: malformed, too long, or sent twice.", s.hostile_retry_after);
  metric("handles_created_total", "counter", "curl easy handles created (reuse keeps this small).",
         s.handles_created);
  metric("requests_in_flight", "gauge", "Requests started and not yet returned.", s.in_flight);
  metric("transfers_in_flight", "gauge", "Transfers in progress.", s.transfers_in_flight);
  if (c.config.fallback) {
    metric("fallback_used_total", "counter",
           "Failed requests answered by the fallback (per key: <prefix>_fallback_calls_total).",
           s.fallbacks_used);
    metric("fallback_failed_total", "counter",
           "Failed requests whose fallback failed too (the request's error was returned).",
           s.fallbacks_failed);
  }
  if (extra) extra(metric);
}

}  // namespace

Client::Client(Config config) : impl_(std::make_unique<Impl>(std::move(config))) {}
Client::~Client() {
  if (impl_) impl_->close_and_wait();
}

Expected<Response, Error> Client::request(const Request& request, const Context& ctx) {
  return impl_->request(request, ctx);
}

ClientStats Client::stats() const noexcept { return read_stats(*impl_); }

const Config& Client::config() const noexcept { return impl_->config; }

void Client::write_metrics(std::ostream& out) const {
  write_metrics(out, prometheus::ExpositionOptions{});
}

void Client::write_metrics(std::ostream& out, const prometheus::ExpositionOptions& options) const {
  write_client_metrics(*impl_, out, options, {});
}

Subscription Client::on_transition(EventListener listener) {
  return subscribe(EventKind::transition, std::move(listener));
}

Subscription Client::subscribe(EventMask kinds, EventListener listener) {
  return impl_->hosts.events().subscribe(kinds, std::move(listener));
}

void Client::reconfigure(const AnyBreakerConfig& next) { impl_->hosts.reconfigure(next); }

BreakerRef Client::breaker_for(const std::string& url, const std::string& route) {
  auto u = parse_url(url);
  if (!u) return nullptr;
  return impl_->hosts.get(impl_->key_of(*u, route)).breaker();
}

}  // namespace bulwark::http

#if defined(BULWARK_HTTP_ASYNC)
// ---------------------------------------------------------------------------------
// AsyncClient: curl's multi interface driven by an Asio executor.
// ---------------------------------------------------------------------------------

// GCC 12 (at -O1, as in the sanitizer builds) reports Asio's coroutine frames, which
// awaitable_frame_base allocates and frees with its own operator new/delete pair, as a
// mismatched new/delete: a false positive on the inlined frame allocator.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
// (Before Asio's headers: the diagnostic is judged where the templates are defined.)

#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <memory>
#include <unordered_map>

#include "bulwark/asio/bulkhead.h"
#include "bulwark/asio/pipeline.h"
#include "bulwark/http/async_client.h"

namespace bulwark::http {
namespace {

// One transfer in the multi handle, waiting for its completion.
struct MultiOp {
  virtual ~MultiOp() = default;
  virtual void complete(CURLcode rc) = 0;
};

template <class Handler>
struct MultiOpFor final : MultiOp {
  explicit MultiOpFor(Handler&& h) : handler(std::move(h)) {}
  void complete(CURLcode rc) override {
    // Never called from inside the slot's own handler (see async_perform).
    auto slot = ::asio::get_associated_cancellation_slot(handler);
    if (slot.is_connected()) slot.clear();
    auto ex = ::asio::get_associated_executor(handler);
    ::asio::post(ex, [h = std::move(handler), rc]() mutable { std::move(h)(rc); });
  }
  Handler handler;
};

}  // namespace

class AsyncClient::Impl {
 public:
  Impl(::asio::any_io_executor ex, Config c)
      : core(std::move(c), false),
        executor(ex),
        timer(ex),
        bulkhead(bulwark::asio::AsyncBulkheadConfig{
            .name = core.config.bulkhead.name,
            .max_concurrent = core.config.bulkhead.max_concurrent,
            .max_queue = core.config.bulkhead.max_wait > Nanos::zero() ? 1024u : 0u,
            .max_wait = core.config.bulkhead.max_wait > Nanos::zero()
                            ? core.config.bulkhead.max_wait
                            : std::chrono::seconds(1)}) {
    multi = curl_multi_init();
    curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, &Impl::on_socket);
    curl_multi_setopt(multi, CURLMOPT_SOCKETDATA, this);
    curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, &Impl::on_timer);
    curl_multi_setopt(multi, CURLMOPT_TIMERDATA, this);
  }
  ~Impl() {
    *alive = false;  // handlers still queued on the executor see it and do nothing
    // Every request holds the Impl while it runs, so no transfer is left by now; a
    // leftover would only be dropped.
    for (auto& [h, op] : ops) curl_multi_remove_handle(multi, h);
    ops.clear();
    release_sockets();
    curl_multi_cleanup(multi);
  }

  struct Socket {
    explicit Socket(::asio::any_io_executor ex, curl_socket_t fd) : sd(ex, fd) {}
    ::asio::posix::stream_descriptor sd;
    int want = 0;
    bool reading = false, writing = false, closed = false;
  };

  // A request in progress, linked in the client's list so that close() reaches it:
  // its pipeline runs under `signal`, which the awaiting coroutine's cancellation and
  // close() both emit.
  struct Pending {
    explicit Pending(Impl& i) : impl(i) {
      next = impl.pending_head;
      if (next != nullptr) next->prev = this;
      impl.pending_head = this;
    }
    ~Pending() {
      (prev != nullptr ? prev->next : impl.pending_head) = next;
      if (next != nullptr) next->prev = prev;
    }
    Pending(const Pending&) = delete;
    Pending& operator=(const Pending&) = delete;
    Impl& impl;
    ::asio::cancellation_signal signal;
    Pending* prev = nullptr;
    Pending* next = nullptr;
  };

  // The client is going away (~AsyncClient, on the executor's thread or while nothing
  // runs the io_context). Every pending request is cancelled where it waits — the
  // bulkhead queue, a backoff or Retry-After timer, a transfer — and ends with
  // ErrorKind::shutdown when it next runs. Nothing the Impl owns holds a request's
  // coroutine afterwards (the bulkhead's queue is emptied by the cancellation, the
  // transfers' handlers are posted), so an io_context destroyed without running again
  // destroys them, and with them the last references to the Impl.
  void close() {
    if (closed) return;
    closed = true;
    for (Pending* p = pending_head; p != nullptr;) {
      Pending* next = p->next;
      p->signal.emit(::asio::cancellation_type::terminal);
      p = next;
    }
    std::unordered_map<CURL*, std::unique_ptr<MultiOp>> aborted = std::move(ops);
    ops.clear();
    for (auto& [h, op] : aborted) {
      curl_multi_remove_handle(multi, h);
      op->complete(CURLE_ABORTED_BY_CALLBACK);
    }
    timer.cancel();
    release_sockets();
  }

  void release_sockets() {
    for (auto& [fd, sock] : sockets) {
      sock->closed = true;
      ::asio::error_code ignored;
      sock->sd.cancel(ignored);
      (void)sock->sd.release();  // curl owns the descriptor
    }
    sockets.clear();
  }

  static int on_socket(CURL*, curl_socket_t fd, int what, void* user, void*) {
    auto* self = static_cast<Impl*>(user);
    auto it = self->sockets.find(fd);
    if (what == CURL_POLL_REMOVE) {
      if (it != self->sockets.end()) {
        it->second->closed = true;
        ::asio::error_code ignored;
        it->second->sd.cancel(ignored);
        (void)it->second->sd.release();
        self->sockets.erase(it);
      }
      return 0;
    }
    std::shared_ptr<Socket> sock;
    if (it == self->sockets.end()) {
      sock = std::make_shared<Socket>(self->executor, fd);
      self->sockets.emplace(fd, sock);
    } else {
      sock = it->second;
    }
    sock->want = what;
    self->arm(fd, sock);
    return 0;
  }

  void arm(curl_socket_t fd, const std::shared_ptr<Socket>& sock) {
    if ((sock->want & CURL_POLL_IN) != 0 && !sock->reading) {
      sock->reading = true;
      sock->sd.async_wait(::asio::posix::stream_descriptor::wait_read,
                          [this, fd, sock, alive_ = alive](const ::asio::error_code& ec) {
                            sock->reading = false;
                            if (!*alive_ || sock->closed || ec) return;
                            action(fd, CURL_CSELECT_IN);
                            if (!sock->closed) arm(fd, sock);
                          });
    }
    if ((sock->want & CURL_POLL_OUT) != 0 && !sock->writing) {
      sock->writing = true;
      sock->sd.async_wait(::asio::posix::stream_descriptor::wait_write,
                          [this, fd, sock, alive_ = alive](const ::asio::error_code& ec) {
                            sock->writing = false;
                            if (!*alive_ || sock->closed || ec) return;
                            action(fd, CURL_CSELECT_OUT);
                            if (!sock->closed) arm(fd, sock);
                          });
    }
  }

  static int on_timer(CURLM*, long ms, void* user) {
    auto* self = static_cast<Impl*>(user);
    self->timer.cancel();
    if (ms < 0 || self->closed) return 0;
    self->timer.expires_after(std::chrono::milliseconds(ms));
    self->timer.async_wait([self, alive_ = self->alive](const ::asio::error_code& ec) {
      if (ec || !*alive_) return;
      self->action(CURL_SOCKET_TIMEOUT, 0);
    });
    return 0;
  }

  void action(curl_socket_t fd, int events) {
    int running = 0;
    curl_multi_socket_action(multi, fd, events, &running);
    int left = 0;
    while (CURLMsg* m = curl_multi_info_read(multi, &left)) {
      if (m->msg != CURLMSG_DONE) continue;
      CURL* h = m->easy_handle;
      const CURLcode rc = m->data.result;
      curl_multi_remove_handle(multi, h);
      auto it = ops.find(h);
      if (it == ops.end()) continue;
      std::unique_ptr<MultiOp> op = std::move(it->second);
      ops.erase(it);
      op->complete(rc);
    }
  }

  // Runs `h` in the multi handle; completes with its CURLcode. The cancellation slot
  // removes it from the multi handle at once and completes with CURLE_ABORTED_BY_CALLBACK.
  template <class Token>
  auto async_perform(CURL* h, Token&& token) {
    return ::asio::async_initiate<Token, void(CURLcode)>(
        [this, h](auto handler) {
          if (closed) {
            auto ex = ::asio::get_associated_executor(handler, executor);
            ::asio::post(ex, [handler = std::move(handler)]() mutable {
              std::move(handler)(CURLE_ABORTED_BY_CALLBACK);
            });
            return;
          }
          auto slot = ::asio::get_associated_cancellation_slot(handler);
          if (slot.is_connected()) {
            slot.assign([this, h, alive_ = alive](::asio::cancellation_type) {
              // Completing here would destroy this very handler (complete() clears
              // the slot): abort from a fresh handler on the executor instead.
              ::asio::post(executor, [this, h, alive_] {
                if (!*alive_) return;
                auto it = ops.find(h);
                if (it == ops.end()) return;
                curl_multi_remove_handle(multi, h);
                std::unique_ptr<MultiOp> op = std::move(it->second);
                ops.erase(it);
                op->complete(CURLE_ABORTED_BY_CALLBACK);
              });
            });
          }
          ops.emplace(h, std::make_unique<MultiOpFor<decltype(handler)>>(std::move(handler)));
          if (curl_multi_add_handle(multi, h) != CURLM_OK) {
            std::unique_ptr<MultiOp> op = std::move(ops[h]);
            ops.erase(h);
            op->complete(CURLE_FAILED_INIT);
          }
        },
        token);
  }

  // One attempt. Holds the Impl, as every coroutine of a request does.
  static ::asio::awaitable<Expected<Response, Error>> attempt(std::shared_ptr<Impl> self, CURL* h,
                                                              const Request& req,
                                                              curl_slist* headers, Context ctx,
                                                              Client::Impl::Trail* trail) {
    // Not in one expression with the co_await (GCC 12 and temporaries).
    auto op = attempt_once(std::move(self), h, req, headers, std::move(ctx));
    auto r = co_await std::move(op);
    Client::Impl::note_attempt(*trail, r);
    co_return r;
  }
  static ::asio::awaitable<Expected<Response, Error>> attempt_once(std::shared_ptr<Impl> self,
                                                                   CURL* h, const Request& req,
                                                                   curl_slist* headers,
                                                                   Context ctx) {
    Impl& impl = *self;
    if (impl.closed) co_return Unexpected(shutdown_error());
    Transfer t;
    if (auto e = impl.core.prepare(h, req, headers, ctx, t)) co_return Unexpected(std::move(*e));
    impl.core.transfers_in_flight.fetch_add(1, std::memory_order_relaxed);
    struct Gauge {
      std::atomic<std::uint64_t>& n;
      ~Gauge() { n.fetch_sub(1, std::memory_order_relaxed); }
    } gauge{impl.core.transfers_in_flight};
    const CURLcode rc = co_await impl.async_perform(h, ::asio::use_awaitable);
    if (rc == CURLE_ABORTED_BY_CALLBACK && !t.cancelled) {
      if (impl.closed) co_return Unexpected(shutdown_error());
      // Aborted by the pipeline at the deadline (or the attempt's timeout): a timeout.
      if (ctx.expired()) {
        co_return Unexpected(
            make_error(ErrorKind::timeout, Outcome::failure, true, "the attempt ran out of time"));
      }
      co_return Unexpected(make_error(ErrorKind::cancelled, Outcome::ignored, false,
                                      "cancelled: the transfer was aborted"));
    }
    co_return impl.core.finish(h, rc, t, ctx, req.url);
  }

  // One hop through the pipeline of `breaker` (the key's registry Handle), the
  // client's bulkhead and the key's retry. The references outlive it: send() awaits it.
  // `gate`: the client's bulkhead, or the key's adaptive limit (Config::adaptive_limit).
  template <class B, class Gate, class Call>
  static ::asio::awaitable<Expected<Response, Failure<Error>>> hop(B& breaker, Gate gate,
                                                                   Retry& retry, bool retry_allowed,
                                                                   Context ctx, Call call) {
    const auto pipe = bulwark::asio::pipeline(
        bulwark::breaker(breaker), gate, bulwark::retry(retry, [retry_allowed](const Error& e) {
          return retry_allowed && e.retryable_ && e.outcome() == Outcome::failure;
        }));
    auto op = pipe.execute(std::move(ctx), std::move(call));
    co_return co_await std::move(op);
  }

  // The request itself, run by run() under the Pending's signal.
  // (An optional: co_spawn's completion needs a default-constructible result.)
  static ::asio::awaitable<std::optional<Expected<Response, Error>>> send(
      std::shared_ptr<Impl> self, Request req, Context ctx) {
    // A cancellation is a result (ErrorKind::cancelled), not an exception.
    co_await ::asio::this_coro::throw_if_cancelled(false);
    Impl& impl = *self;
    if (impl.closed) co_return Unexpected(shutdown_error());
    auto prepared = impl.core.prepare_request(req, ctx, true);
    if (!prepared) co_return Unexpected(std::move(prepared).error());
    Handle h = impl.core.take_handle();
    if (h.easy == nullptr) {
      co_return Unexpected(make_error(ErrorKind::transport, Outcome::ignored, false,
                                      "could not create a curl handle"));
    }
    struct Lease {
      Client::Impl* core;
      Handle h;
      ~Lease() { core->give_handle(h); }
    } lease{&impl.core, h};

    Client::Impl::Hops hops;
    hops.cur = &req;
    for (;;) {
      Prepared& p = *prepared;
      detail::HostState& state = p.host.state();
      const bool retry_allowed = p.retry_allowed;
      std::uint32_t calls = 0;
      const Request* cur = hops.cur;
      curl_slist* headers = p.headers.list;
      CURL* easy = h.easy;
      Client::Impl::Trail trail;
      Prepared* hop_p = &p;
      auto call = [self, easy, cur, headers, &calls, &trail, hop_p](const Context& c) {
        self->core.announce_retry(*hop_p, ++calls, trail);
        return attempt(self, easy, *cur, headers, c, &trail);
      };
      // GCC 12 destroys twice a temporary with a destructor that is created in a
      // full-expression holding a co_await (here the lambda, which owns a reference to
      // the Impl, and the Context): made in statements of their own.
      auto op = p.host.with_handle([&](auto& breaker) {
        return state.limit ? hop(breaker, bulwark::adaptive_limit(*state.limit), *state.retry,
                                 retry_allowed, p.ctx, std::move(call))
                           : hop(breaker, bulwark::asio::bulkhead(impl.bulkhead), *state.retry,
                                 retry_allowed, p.ctx, std::move(call));
      });
      auto result = co_await std::move(op);
      if (auto answer = impl.core.after_hop(hops, prepared, std::move(result), calls)) {
        if (!*answer && answer->error().kind == ErrorKind::cancelled && impl.closed) {
          const std::uint32_t tried = answer->error().attempts;
          Error e = shutdown_error();
          e.attempts = tried;
          co_return Unexpected(std::move(e));
        }
        co_return std::move(*answer);
      }
    }
  }

  // What async_request() returns: links the request, hands the caller's cancellation on
  // to it, and runs send() as a coroutine of its own under the Pending's signal.
  static ::asio::awaitable<Expected<Response, Error>> run(std::shared_ptr<Impl> self, Request req,
                                                          Context ctx) {
    co_await ::asio::this_coro::throw_if_cancelled(false);
    Impl& impl = *self;
    if (impl.closed) {
      impl.core.requests.fetch_add(1, std::memory_order_relaxed);
      co_return Unexpected(shutdown_error());
    }
    impl.core.in_flight.fetch_add(1, std::memory_order_relaxed);
    struct Gauge {
      std::atomic<std::uint64_t>& n;
      ~Gauge() { n.fetch_sub(1, std::memory_order_relaxed); }
    } gauge{impl.core.in_flight};
    Pending pending(impl);
    auto cs = co_await ::asio::this_coro::cancellation_state;
    if (cs.slot().is_connected()) {
      cs.slot().assign([&pending](::asio::cancellation_type type) { pending.signal.emit(type); });
    }
    // Not in one expression with the co_await below (GCC 12 and aggregate temporaries).
    auto op = send(self, std::move(req), std::move(ctx));
    auto result = co_await ::asio::co_spawn(
        impl.executor, std::move(op),
        ::asio::bind_cancellation_slot(pending.signal.slot(), ::asio::use_awaitable));
    co_return std::move(*result);
  }

  Client::Impl core;
  ::asio::any_io_executor executor;
  ::asio::steady_timer timer;
  bulwark::asio::AsyncBulkhead bulkhead;
  CURLM* multi = nullptr;
  std::unordered_map<curl_socket_t, std::shared_ptr<Socket>> sockets;
  std::unordered_map<CURL*, std::unique_ptr<MultiOp>> ops;
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);
  bool closed = false;
  Pending* pending_head = nullptr;
};

AsyncClient::AsyncClient(::asio::any_io_executor executor, Config config)
    : impl_(std::make_shared<Impl>(executor, std::move(config))) {}
AsyncClient::~AsyncClient() {
  if (impl_) impl_->close();
}

::asio::awaitable<Expected<Response, Error>> AsyncClient::async_request(Request request,
                                                                        Context ctx) {
  return Impl::run(impl_, std::move(request), std::move(ctx));
}

void AsyncClient::reconfigure(const AnyBreakerConfig& next) { impl_->core.hosts.reconfigure(next); }

BreakerRef AsyncClient::breaker_for(const std::string& url, const std::string& route) {
  auto u = parse_url(url);
  if (!u) return nullptr;
  return impl_->core.hosts.get(impl_->core.key_of(*u, route)).breaker();
}

Subscription AsyncClient::on_transition(EventListener listener) {
  return subscribe(EventKind::transition, std::move(listener));
}

Subscription AsyncClient::subscribe(EventMask kinds, EventListener listener) {
  return impl_->core.hosts.events().subscribe(kinds, std::move(listener));
}

ClientStats AsyncClient::stats() const noexcept { return read_stats(impl_->core); }

void AsyncClient::write_metrics(std::ostream& out) const {
  write_metrics(out, prometheus::ExpositionOptions{});
}

void AsyncClient::write_metrics(std::ostream& out,
                                const prometheus::ExpositionOptions& options) const {
  const auto b = impl_->bulkhead.snapshot();
  write_client_metrics(impl_->core, out, options, [&](const ClientMetric& metric) {
    metric("bulkhead_concurrent_calls", "gauge",
           "Requests holding a slot of the client's bulkhead.", b.in_use);
    metric("bulkhead_max_allowed_concurrent_calls", "gauge",
           "The client's bulkhead's limit on concurrent requests.", b.max_concurrent);
    metric("bulkhead_queued_calls", "gauge",
           "Requests waiting for a slot of the client's bulkhead.", b.waiting);
    metric("bulkhead_rejected_calls_total", "counter",
           "Requests refused by the client's bulkhead (full queue or wait ended).", b.rejected);
  });
}

}  // namespace bulwark::http
#endif  // BULWARK_HTTP_ASYNC
