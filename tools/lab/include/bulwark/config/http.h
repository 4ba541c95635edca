// bulwark/config/http.h — an HTTP client's per-host policies from a policies file.
//
// A `[pipeline.NAME]` of the file (bulwark/config/config.h) names the parts each host of
// an `http::Client` or `AsyncClient` gets: its breaker (any kind), bulkhead, retry,
// retry budget and per-attempt timeout.
//
//   bulwark::config::Config cfg = bulwark::config::load_file("resilience.toml");
//   bulwark::http::Client reviews(bulwark::config::http_client(cfg, "reviews"));
//   ...
//   if (!cfg.reload()) bulwark::config::reconfigure(reviews, cfg, "reviews");
//
// Header-only: it is compiled by an application that links bulwark::http and
// bulwark::config; neither library depends on the other.

#ifndef BULWARK_CONFIG_HTTP_H_
#define BULWARK_CONFIG_HTTP_H_

#include <string_view>
#include <utility>
#include <variant>

#include "bulwark/config/config.h"
#include "bulwark/http/client.h"

namespace bulwark::config {

// The client configuration whose hosts each get the parts `[pipeline.NAME]` names; a part
// it does not name keeps `base`'s value (the pipeline's timeout is per attempt:
// `attempt_timeout`; the request's own deadline stays `base.default_timeout`). Throws
// ConfigError for an unknown pipeline. Cost: a lookup and copies, not for a call path.
inline http::Config http_client(const Config& cfg, std::string_view pipeline, http::Config base) {
  const lab::ResilienceConfig p = cfg.pipeline(pipeline);
  if (p.breaker) {
    base.any_breaker =
        std::visit([](const auto& c) -> http::AnyBreakerConfig { return c; }, p.breaker->config);
  }
  if (p.bulkhead) base.bulkhead = *p.bulkhead;
  if (p.retry) base.retry = p.retry->config;
  if (p.retry_budget) base.budget = *p.retry_budget;
  if (p.timeout) base.attempt_timeout = *p.timeout;
  if (p.adaptive_limit) base.adaptive_limit = *p.adaptive_limit;
  return base;
}
// The same over a default http::Config.
inline http::Config http_client(const Config& cfg, std::string_view pipeline) {
  http::Config base;
  return http_client(cfg, pipeline, std::move(base));
}

// Hands a live client the breaker thresholds of `[pipeline.NAME]`'s breaker as the file
// says now (after Config::reload()): Client::reconfigure, whose rules apply (the same
// breaker kind; InvalidConfig, changing nothing, otherwise). Nothing if the pipeline
// names no breaker. Thread-safe as Client::reconfigure is.
template <class AnyClient>
void reconfigure(AnyClient& client, const Config& cfg, std::string_view pipeline) {
  const lab::ResilienceConfig p = cfg.pipeline(pipeline);
  if (!p.breaker) return;
  client.reconfigure(
      std::visit([](const auto& c) -> http::AnyBreakerConfig { return c; }, p.breaker->config));
}

}  // namespace bulwark::config

#endif  // BULWARK_CONFIG_HTTP_H_
