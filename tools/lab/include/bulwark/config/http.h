// bulwark/config/http.h — an HTTP client from a policies file.
//
// A `[http_client.NAME]` of the file (bulwark/config/config.h) holds the client's own
// settings (timeouts, limits, headers, key_by) and names the `[pipeline.X]` whose parts
// each host (or route) of an `http::Client` or `AsyncClient` gets: its breaker (any
// kind), bulkhead, retry, retry budget, per-attempt timeout and adaptive limit.
//
//   bulwark::config::Config cfg = bulwark::config::load_file("resilience.toml");
//   bulwark::http::Client reviews(bulwark::config::http_client(cfg, "reviews"));
//   ...
//   if (!cfg.reload()) bulwark::config::reconfigure(reviews, cfg, "reviews");
//
// NAME is looked up as a client first: with `[http_client.NAME]`, its settings and the
// pipeline its `pipeline` key names; without one, `[pipeline.NAME]` alone (no settings).
//
// Header-only: it is compiled by an application that links bulwark::http and
// bulwark::config; neither library depends on the other.

#ifndef BULWARK_CONFIG_HTTP_H_
#define BULWARK_CONFIG_HTTP_H_

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "bulwark/config/config.h"
#include "bulwark/http/client.h"

namespace bulwark::config {
namespace detail {

// The pipeline NAME stands for in one version of the file: [http_client.NAME]'s (null
// if it names none), else [pipeline.NAME]. `client` is set to the client's settings.
// Throws ConfigError if the file has neither.
inline const lab::ResilienceConfig* http_pipeline(const Policies& p, std::string_view name,
                                                  const HttpClientSettings** client) {
  *client = nullptr;
  if (const auto c = p.http_clients.find(name); c != p.http_clients.end()) {
    *client = &c->second;
    if (c->second.pipeline.empty()) return nullptr;
    return &p.pipelines.at(c->second.pipeline);  // checked at load
  }
  if (const auto it = p.pipelines.find(name); it != p.pipelines.end()) return &it->second;
  throw ConfigError({p.source}, "http_client." + lab::escape_for_error(name),
                    "the file has neither [http_client." + lab::escape_for_error(name) +
                        "] nor [pipeline." + lab::escape_for_error(name) + "]");
}

inline http::AnyBreakerConfig any_breaker(const lab::BreakerSpec& b) {
  return std::visit([](const auto& c) -> http::AnyBreakerConfig { return c; }, b.config);
}

}  // namespace detail

// The client configuration NAME stands for (above), over `base`: the client's settings
// that the file sets replace base's (name always: the table's or its `name`), and each
// host gets the parts its pipeline names; what neither sets keeps base's value (the
// pipeline's timeout is per attempt: `attempt_timeout`). Function-valued fields
// (classify, fallback, key_generator) are base's. Throws ConfigError if the file has
// neither [http_client.NAME] nor [pipeline.NAME]. Cost: a lookup and copies, not for a
// call path. One consistent version of the file even while another thread reloads it.
inline http::Config http_client(const Config& cfg, std::string_view name, http::Config base) {
  const std::shared_ptr<const Policies> policies = cfg.policies();
  const HttpClientSettings* s = nullptr;
  const lab::ResilienceConfig* p = detail::http_pipeline(*policies, name, &s);
  if (p != nullptr) {
    if (p->breaker) base.any_breaker = detail::any_breaker(*p->breaker);
    if (p->bulkhead) base.bulkhead = *p->bulkhead;
    if (p->retry) base.retry = p->retry->config;
    if (p->retry_budget) base.budget = *p->retry_budget;
    if (p->timeout) base.attempt_timeout = *p->timeout;
    if (p->adaptive_limit) base.adaptive_limit = *p->adaptive_limit;
  }
  if (s == nullptr) return base;
  base.name = s->name;
  if (s->key_by) {
    base.key_by = *s->key_by == HttpKeyBy::route ? http::KeyBy::route : http::KeyBy::host;
  }
  if (s->default_timeout) base.default_timeout = *s->default_timeout;
  if (s->attempt_timeout) base.attempt_timeout = *s->attempt_timeout;
  if (s->connect_timeout) base.connect_timeout = *s->connect_timeout;
  if (s->detailed_metrics) base.detailed_metrics = *s->detailed_metrics;
  if (s->max_retry_after) base.max_retry_after = *s->max_retry_after;
  if (s->max_body_bytes) base.max_body_bytes = *s->max_body_bytes;
  if (s->max_header_bytes) base.max_header_bytes = *s->max_header_bytes;
  if (s->max_redirects) base.max_redirects = *s->max_redirects;
  if (s->origin_headers) base.origin_headers = *s->origin_headers;
  if (s->deadline_header) base.deadline_header = *s->deadline_header;
  if (s->deadline_header_format) base.deadline_header_format = *s->deadline_header_format;
  if (s->idempotency_header) base.idempotency_header = *s->idempotency_header;
  if (s->make_idempotency_keys) base.make_idempotency_keys = *s->make_idempotency_keys;
  if (s->max_idle_handles) base.max_idle_handles = *s->max_idle_handles;
  if (s->user_agent) base.user_agent = *s->user_agent;
  return base;
}
// The same over a default http::Config.
inline http::Config http_client(const Config& cfg, std::string_view name) {
  http::Config base;
  return http_client(cfg, name, std::move(base));
}

// Hands a live client the breaker thresholds of NAME's pipeline's breaker (above) as the
// file says now (after Config::reload()): Client::reconfigure, whose rules apply (the
// same breaker kind; InvalidConfig, changing nothing, otherwise). Nothing if there is
// no pipeline or it names no breaker. The client's own settings (timeouts, limits) are
// fixed when it is built: a reload changes them for the next client only. Throws
// ConfigError as http_client() does. Thread-safe as Client::reconfigure is.
template <class AnyClient>
void reconfigure(AnyClient& client, const Config& cfg, std::string_view name) {
  const std::shared_ptr<const Policies> policies = cfg.policies();
  const HttpClientSettings* s = nullptr;
  const lab::ResilienceConfig* p = detail::http_pipeline(*policies, name, &s);
  if (p == nullptr || !p->breaker) return;
  client.reconfigure(detail::any_breaker(*p->breaker));
}

}  // namespace bulwark::config

#endif  // BULWARK_CONFIG_HTTP_H_
