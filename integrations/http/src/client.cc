#include "bulwark/http/client.h"

#include <curl/curl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bulwark/config_error.h"
#include "bulwark/http/retry_after.h"
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
  std::string origin;  // scheme://host:port
  std::string path;
};

// Parses an absolute http(s) URL with libcurl's URL parser.
Expected<ParsedUrl, std::string> parse_url(const std::string& url) {
  CURLU* u = curl_url();
  if (u == nullptr) return Unexpected(std::string("out of memory"));
  struct Free {
    CURLU* u;
    ~Free() { curl_url_cleanup(u); }
  } guard{u};
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
  return ParsedUrl{scheme + "://" + host + ":" + port, part(CURLUPART_PATH, 0)};
}

bool idempotent_method(std::string_view m) noexcept {
  return m == "GET" || m == "HEAD" || m == "PUT" || m == "DELETE" || m == "OPTIONS" || m == "TRACE";
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

// One transfer's state, shared with libcurl's callbacks.
struct Transfer {
  Response response;
  std::size_t max_body = 0;
  std::size_t max_headers = 0;
  std::size_t header_bytes = 0;
  bool body_over = false;
  bool headers_over = false;
  bool cancelled = false;
  const Context* ctx = nullptr;
  std::array<char, CURL_ERROR_SIZE> errbuf{};
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
    t->response.headers.clear();  // a new response (after a redirect or a 100 Continue)
    t->response.body.clear();
    return len;
  }
  const auto colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) return len;
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  t->response.headers.push_back({std::string(line.substr(0, colon)), std::string(value)});
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
  if (auto ok = validate(c.bulkhead); !ok) return ok;
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
    case ErrorKind::body_too_large:
      return "body_too_large";
    case ErrorKind::redirect:
      return "redirect";
    case ErrorKind::rejected_by_breaker:
      return "rejected_by_breaker";
    case ErrorKind::bulkhead_full:
      return "bulkhead_full";
    case ErrorKind::cancelled:
      return "cancelled";
  }
  return "unknown";
}

std::optional<Nanos> Error::retry_after_hint() const noexcept {
  if (!has_hint_) return std::nullopt;
  return retry_after;
}

// A curl header list, freed with its owner.
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

// A request checked and ready for the pipeline.
struct Prepared {
  std::string key;     // the registry key: host, or host and route
  bool retry_allowed;  // idempotent, or with a key
  SList headers;
  Context ctx;  // with the request's deadline
  detail::Hosts::Entry host;
};

class Client::Impl {
 public:
  explicit Impl(Config c) : config(checked(std::move(c))), hosts(config) {
    if (!config.classify) config.classify = default_classify;
    if (!config.key_generator) config.key_generator = random_key;
  }
  ~Impl() {
    for (CURL* h : pool) curl_easy_cleanup(h);
  }

  static Config checked(Config c) {
    if (auto ok = validate_config(c); !ok)
      bulwark::detail::raise_config_error(std::move(ok).error());
    global_init();
    return c;
  }

  CURL* take_handle() {
    {
      std::lock_guard lock(pool_mu);
      if (!pool.empty()) {
        CURL* h = pool.back();
        pool.pop_back();
        return h;
      }
    }
    handles_created.fetch_add(1, std::memory_order_relaxed);
    return curl_easy_init();
  }
  void give_handle(CURL* h) {
    curl_easy_reset(h);  // options back to defaults; live connections are kept
    {
      std::lock_guard lock(pool_mu);
      if (pool.size() < config.max_idle_handles) {
        pool.push_back(h);
        return;
      }
    }
    curl_easy_cleanup(h);
  }

  std::string key_of(const ParsedUrl& u, const std::string& route) const {
    if (config.key_by == KeyBy::host) return u.origin;
    return u.origin + " " + (route.empty() ? u.path : route);
  }

  // One attempt, in three steps so the async client shares them: set the options
  // (an error if no time is left), perform, read the result.
  std::optional<Error> prepare(CURL* h, const Request& req, curl_slist* headers, const Context& ctx,
                               Transfer& t);
  Expected<Response, Error> finish(CURL* h, CURLcode rc, Transfer& t, const Context& ctx);
  Expected<Response, Error> attempt(CURL* h, const Request& req, curl_slist* headers,
                                    const Context& ctx);
  Expected<Prepared, Error> prepare_request(const Request& req, const Context& ctx);
  static Error convert(Failure<Error>&& f, const std::string& key);
  Expected<Response, Error> request(const Request& req, const Context& ctx);

  Config config;
  detail::Hosts hosts;
  std::mutex pool_mu;
  std::vector<CURL*> pool;
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> attempts{0};
  std::atomic<std::uint64_t> hostile_retry_after{0};
  std::atomic<std::uint64_t> handles_created{0};
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
  curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, config.max_redirects > 0 ? 1L : 0L);
  curl_easy_setopt(h, CURLOPT_MAXREDIRS, static_cast<long>(config.max_redirects));
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

Expected<Response, Error> Client::Impl::attempt(CURL* h, const Request& req, curl_slist* headers,
                                                const Context& ctx) {
  Transfer t;
  if (auto e = prepare(h, req, headers, ctx, t)) return Unexpected(std::move(*e));
  return finish(h, curl_easy_perform(h), t, ctx);
}

Expected<Response, Error> Client::Impl::finish(CURL* h, CURLcode rc, Transfer& t,
                                               const Context& ctx) {
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
      return Unexpected(make_error(ErrorKind::transport, Outcome::failure, false,
                                   "response headers exceed max_header_bytes (" +
                                       std::to_string(config.max_header_bytes) + ")"));
    }
    switch (rc) {
      case CURLE_OPERATION_TIMEDOUT:
        return Unexpected(make_error(ErrorKind::timeout, Outcome::failure, true, detail));
      case CURLE_TOO_MANY_REDIRECTS:
        return Unexpected(make_error(
            ErrorKind::redirect, Outcome::ignored, false,
            "more than max_redirects (" + std::to_string(config.max_redirects) + "): " + detail));
      case CURLE_UNSUPPORTED_PROTOCOL:
      case CURLE_URL_MALFORMAT:
        return Unexpected(make_error(ErrorKind::invalid_request, Outcome::ignored, false, detail));
      default:
        return Unexpected(make_error(ErrorKind::transport, Outcome::failure, true, detail));
    }
  }

  long status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  t.response.status = status;
  if (status >= 300 && status < 400 && status != 304 && config.max_redirects == 0) {
    const auto location = t.response.header("Location");
    Error e = make_error(ErrorKind::redirect, Outcome::ignored, false,
                         "redirect not followed (max_redirects is 0) to '" +
                             std::string(location.value_or("")) + "'",
                         status);
    e.response = std::move(t.response);
    return Unexpected(std::move(e));
  }
  const Outcome outcome = config.classify(status);
  if (outcome == Outcome::success) return std::move(t.response);

  Error e = make_error(ErrorKind::status, outcome, outcome == Outcome::failure,
                       "HTTP " + std::to_string(status), status);
  if (const auto value = t.response.header("Retry-After")) {
    const RetryAfter ra =
        parse_retry_after(*value, std::chrono::system_clock::now(), config.max_retry_after);
    if (ra.status == RetryAfter::Status::ok) {
      e.retry_after = ra.delay;
      e.has_hint_ = true;
    } else {
      hostile_retry_after.fetch_add(1, std::memory_order_relaxed);
      e.message +=
          ra.status == RetryAfter::Status::too_large
              ? " (Retry-After '" + std::string(*value) + "' above max_retry_after: ignored)"
              : " (Retry-After '" + std::string(*value) + "' malformed: ignored)";
    }
  }
  e.response = std::move(t.response);
  return Unexpected(std::move(e));
}

Expected<Prepared, Error> Client::Impl::prepare_request(const Request& req, const Context& ctx) {
  requests.fetch_add(1, std::memory_order_relaxed);
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
      .retry_allowed = !needs_key || !key.empty(),
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
  if (f.reason == Reason::cancelled) out.kind = ErrorKind::cancelled;
  // An attempt aborted by the stop_token is the request's cancellation too.
  out.reason = out.kind == ErrorKind::cancelled ? Reason::cancelled : f.reason;
  out.attempts = f.attempts;
  return out;
}

Expected<Response, Error> Client::Impl::request(const Request& req, const Context& ctx) {
  auto prepared = prepare_request(req, ctx);
  if (!prepared) return Unexpected(std::move(prepared).error());
  Prepared& p = *prepared;
  detail::HostState& state = p.host.state();

  struct Lease {
    Impl* impl;
    CURL* h;
    ~Lease() {
      if (h != nullptr) impl->give_handle(h);
    }
  } lease{this, take_handle()};
  if (lease.h == nullptr) {
    return Unexpected(make_error(ErrorKind::transport, Outcome::ignored, false,
                                 "could not create a curl handle"));
  }

  const bool retry_allowed = p.retry_allowed;
  const auto pipe =
      bulwark::pipeline(bulwark::breaker(p.host.breaker()), bulwark::bulkhead(*state.bulkhead),
                        bulwark::retry(*state.retry, [retry_allowed](const Error& e) {
                          return retry_allowed && e.retryable_ && e.outcome() == Outcome::failure;
                        }));
  auto result = pipe.execute(
      p.ctx, [&](const Context& c) { return attempt(lease.h, req, p.headers.list, c); });
  if (result) return std::move(*result);
  return Unexpected(convert(std::move(result).error(), p.key));
}

Client::Client(Config config) : impl_(std::make_unique<Impl>(std::move(config))) {}
Client::~Client() = default;

Expected<Response, Error> Client::request(const Request& request, const Context& ctx) {
  return impl_->request(request, ctx);
}

ClientStats Client::stats() const noexcept {
  return {impl_->requests.load(std::memory_order_relaxed),
          impl_->attempts.load(std::memory_order_relaxed),
          impl_->hostile_retry_after.load(std::memory_order_relaxed),
          impl_->handles_created.load(std::memory_order_relaxed)};
}

const Config& Client::config() const noexcept { return impl_->config; }

void Client::write_metrics(std::ostream& out) const {
  write_metrics(out, prometheus::ExpositionOptions{});
}

void Client::write_metrics(std::ostream& out, const prometheus::ExpositionOptions& options) const {
  prometheus::Exposition scrape(options);  // validates the options
  scrape.add(impl_->hosts.registry());
  scrape.write(out);

  const ClientStats s = stats();
  std::string labels = "client=\"";
  prometheus::append_label_value(labels, impl_->config.name);
  labels += '"';
  prometheus::Writer w(out);
  auto counter = [&](std::string_view what, std::string_view help, std::uint64_t v) {
    const std::string name = options.prefix + "_http_client_" + std::string(what) + "_total";
    w.family(name, "counter", help);
    w.sample(name, "", labels, "", v);
  };
  counter("requests", "Requests made through the client.", s.requests);
  counter("attempts", "Transfers started (attempts of those requests).", s.attempts);
  counter("hostile_retry_after", "Retry-After values ignored: malformed or too long.",
          s.hostile_retry_after);
  counter("handles_created", "curl easy handles created (reuse keeps this small).",
          s.handles_created);
}

const Breaker* Client::breaker_for(const std::string& url, const std::string& route) {
  auto u = parse_url(url);
  if (!u) return nullptr;
  return &impl_->hosts.get(impl_->key_of(*u, route)).breaker();
}

}  // namespace bulwark::http

#if defined(BULWARK_HTTP_ASYNC)
// ---------------------------------------------------------------------------------
// AsyncClient: curl's multi interface driven by an Asio executor.
// ---------------------------------------------------------------------------------

#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
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

// GCC 12 (at -O1, as in the sanitizer builds) reports Asio's coroutine frames, which
// awaitable_frame_base allocates and frees with its own operator new/delete pair, as a
// mismatched new/delete: a false positive on the inlined frame allocator.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

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
      : core(std::move(c)),
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
    for (auto& [h, op] : ops) curl_multi_remove_handle(multi, h);
    ops.clear();
    for (auto& [fd, sock] : sockets) {
      sock->closed = true;
      ::asio::error_code ignored;
      sock->sd.cancel(ignored);
      (void)sock->sd.release();  // curl owns the descriptor
    }
    sockets.clear();
    curl_multi_cleanup(multi);
  }

  struct Socket {
    explicit Socket(::asio::any_io_executor ex, curl_socket_t fd) : sd(ex, fd) {}
    ::asio::posix::stream_descriptor sd;
    int want = 0;
    bool reading = false, writing = false, closed = false;
  };

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
    if (ms < 0) return 0;
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

  ::asio::awaitable<Expected<Response, Error>> attempt(CURL* h, const Request& req,
                                                       curl_slist* headers, Context ctx) {
    Transfer t;
    if (auto e = core.prepare(h, req, headers, ctx, t)) co_return Unexpected(std::move(*e));
    const CURLcode rc = co_await async_perform(h, ::asio::use_awaitable);
    if (rc == CURLE_ABORTED_BY_CALLBACK && !t.cancelled) {
      // Aborted by the pipeline at the deadline (or the attempt's timeout): a timeout.
      if (ctx.expired()) {
        co_return Unexpected(
            make_error(ErrorKind::timeout, Outcome::failure, true, "the attempt ran out of time"));
      }
      co_return Unexpected(make_error(ErrorKind::cancelled, Outcome::ignored, false,
                                      "cancelled: the transfer was aborted"));
    }
    co_return core.finish(h, rc, t, ctx);
  }

  Client::Impl core;
  ::asio::any_io_executor executor;
  ::asio::steady_timer timer;
  bulwark::asio::AsyncBulkhead bulkhead;
  CURLM* multi = nullptr;
  std::unordered_map<curl_socket_t, std::shared_ptr<Socket>> sockets;
  std::unordered_map<CURL*, std::unique_ptr<MultiOp>> ops;
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);
};

AsyncClient::AsyncClient(::asio::any_io_executor executor, Config config)
    : impl_(std::make_shared<Impl>(executor, std::move(config))) {}
AsyncClient::~AsyncClient() = default;

::asio::awaitable<Expected<Response, Error>> AsyncClient::async_request(Request req, Context ctx) {
  // A cancellation is a result (ErrorKind::cancelled), not an exception.
  co_await ::asio::this_coro::throw_if_cancelled(false);
  Impl& impl = *impl_;
  auto prepared = impl.core.prepare_request(req, ctx);
  if (!prepared) co_return Unexpected(std::move(prepared).error());
  Prepared p = std::move(*prepared);
  detail::HostState& state = p.host.state();
  CURL* h = impl.core.take_handle();
  if (h == nullptr) {
    co_return Unexpected(make_error(ErrorKind::transport, Outcome::ignored, false,
                                    "could not create a curl handle"));
  }
  struct Lease {
    Client::Impl* core;
    CURL* h;
    ~Lease() { core->give_handle(h); }
  } lease{&impl.core, h};

  const bool retry_allowed = p.retry_allowed;
  const auto pipe = bulwark::asio::pipeline(
      bulwark::breaker(p.host.breaker()), bulwark::asio::bulkhead(impl.bulkhead),
      bulwark::retry(*state.retry, [retry_allowed](const Error& e) {
        return retry_allowed && e.retryable_ && e.outcome() == Outcome::failure;
      }));
  curl_slist* headers = p.headers.list;
  auto result = co_await pipe.execute(p.ctx, [&impl, h, &req, headers](const Context& c) {
    return impl.attempt(h, req, headers, c);
  });
  if (result) co_return std::move(*result);
  co_return Unexpected(Client::Impl::convert(std::move(result).error(), p.key));
}

ClientStats AsyncClient::stats() const noexcept {
  const Client::Impl& c = impl_->core;
  return {c.requests.load(std::memory_order_relaxed), c.attempts.load(std::memory_order_relaxed),
          c.hostile_retry_after.load(std::memory_order_relaxed),
          c.handles_created.load(std::memory_order_relaxed)};
}

}  // namespace bulwark::http
#endif  // BULWARK_HTTP_ASYNC
