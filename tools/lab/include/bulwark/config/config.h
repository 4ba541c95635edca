// bulwark/config/config.h — a service's resilience policies, from one TOML file.
//
// One file names every policy a service uses; the code asks for them by name:
//
//   [breaker.reviews]                  # one table per named policy, keys as the
//   kind = "count"                     # C++ field paths (docs/configuration.md)
//   window.size = 100
//   failure_rate = 0.30
//   half_open.probes = 5
//
//   [retry.reviews]
//   max_attempts = 3
//   backoff = { kind = "exponential", initial = "100ms", max = "2s", jitter = "full" }
//
//   [pipeline.reviews]                 # which named parts a pipeline composes
//   breaker = "reviews"
//   retry = "reviews"
//
//   bulwark::config::Config cfg = bulwark::config::load_file("resilience.toml");
//   bulwark::CountWindowBreaker reviews(cfg.breaker<bulwark::CountWindowBreaker>("reviews"));
//
// Sections: breaker, retry, retry_budget, bulkhead, timeout (name = duration), fallback,
// pipeline (parts by name: breaker, retry, retry_budget, bulkhead, timeout, fallback;
// breaker_scope), registry (kind of breaker + `policy`, the name of its breakers'
// default policy), fleet (a bulwark::redis::Fleet's settings and, in
// [fleet.NAME.store], its Redis store's: FleetSettings below; bulwark/config/redis.h
// turns them into the redis library's types) and http_client (a bulwark::http client's
// own settings and the pipeline its hosts get: HttpClientSettings below;
// bulwark/config/http.h makes the http::Config). Each policy's `name` defaults to its
// table's name.
//
// Environment variables override single keys after the file is read and before
// anything is checked: BULWARK__<SECTION>__<NAME>__<KEY>[__<KEY>...], the path's parts
// separated by two underscores and matched case-insensitively (a '-' in a policy's
// name matches '_'): BULWARK__BREAKER__REVIEWS__HALF_OPEN__PROBES=3,
// BULWARK__TIMEOUT__REVIEWS=2s. The value is a TOML value (3, 0.3, true, "400ms");
// anything that is not one is taken as a string (400ms). A fleet's text keys (instance,
// store.host, store.username, store.password, store.prefix) take the value verbatim,
// never as TOML: BULWARK__FLEET__CHECKOUT__STORE__PASSWORD from a secret arrives as it
// is. The section and the policy must be in the file. A bad value is an error naming
// the variable.
//
// Every failure is a ConfigError (bulwark::lab::InputError) naming the file (or the
// environment variable), the line and column, the key, and for an unknown key the
// nearest known one. Keys under deprecated names load with a warning (warnings()).
//
// Thread-safety: the getters and reload() may be called from any thread at once; a
// getter returns a copy taken from one consistent version of the file. Loading costs a
// parse of the file; the getters cost a lock and a copy (not for a call path).

#ifndef BULWARK_CONFIG_CONFIG_H_
#define BULWARK_CONFIG_CONFIG_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "bulwark/deadline_header.h"
#include "bulwark/lab/config.h"
#include "bulwark/lab/input_error.h"

namespace bulwark::config {

using ConfigError = bulwark::lab::InputError;

// The environment to read overrides from: name, value.
using Environment = std::vector<std::pair<std::string, std::string>>;
// The process's BULWARK__* variables.
Environment process_environment();

// A registry: the kind of its breakers and their default policy.
struct RegistrySpec {
  std::string name;
  WindowKind kind = WindowKind::none;
  lab::BreakerSpec policy;
};

// [fleet.NAME.store]: a Redis store's settings, by the field names of
// bulwark::redis::RedisConfig (host ... reconnect_max) and ClusterConfig (cluster, seeds,
// groups, heartbeat), checked as those stores check them. Plain types: this library does not
// depend on bulwark::redis (bulwark/config/redis.h converts). One difference from
// ClusterConfig: `cluster` is false unless the file says otherwise (one server).
struct FleetStoreSettings {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string username{};
  std::string password{};  // set it from the environment, not in the file
  std::string prefix = "{bulwark}:fleet:";
  std::chrono::milliseconds retention = std::chrono::hours(1);
  std::chrono::milliseconds idle_ttl = std::chrono::hours(24);
  std::chrono::milliseconds timeout = std::chrono::milliseconds(500);
  std::chrono::milliseconds reconnect_min = std::chrono::milliseconds(100);
  std::chrono::milliseconds reconnect_max = std::chrono::seconds(5);
  bool cluster = false;
  std::vector<std::string> seeds{};  // "host:port" each
  std::uint32_t groups = 1;
  // How often a quiet group still runs the script (renewing its keys' TTLs). Zero:
  // idle_ttl / 8, at most 5 min.
  std::chrono::milliseconds heartbeat{0};
};

// [fleet.NAME]: a bulwark::redis::Fleet's settings, by FleetConfig's field names
// (defaults as there), and its store's. Not the lab's scenario [fleet] table
// (bulwark::lab::FleetSpec), which describes a simulated fleet.
struct FleetSettings {
  std::string name;      // the table's name
  std::string instance;  // required; usually per instance: BULWARK__FLEET__NAME__INSTANCE
  std::uint32_t quorum = 1;
  std::chrono::milliseconds quorum_window = std::chrono::seconds(10);
  std::chrono::milliseconds sync_interval = std::chrono::milliseconds(200);
  std::chrono::milliseconds lease_duration = std::chrono::milliseconds::zero();
  std::size_t queue_capacity = 4096;
  std::uint32_t max_changes_per_sync = 1000;
  std::chrono::milliseconds count_bucket = std::chrono::milliseconds::zero();
  std::uint32_t count_buckets = 6;
  FleetStoreSettings store{};  // the defaults when the file has no [fleet.NAME.store]
};

// How an HTTP client keys its breakers and bulkheads: bulwark::http::KeyBy's values.
enum class HttpKeyBy : std::uint8_t {
  host,   // one per scheme://host:port
  route,  // one per host and route template
};

// [http_client.NAME]: a bulwark::http client's own settings, by the field names of
// bulwark::http::Config, checked at load with the bounds the client checks (and a few
// of its own: sizes are bounded). Plain types: this library does not depend on
// bulwark::http (bulwark/config/http.h converts). An unset field (nullopt) keeps
// http::Config's default, or the base config's. The function-valued fields (classify,
// fallback, key_generator) are code's.
struct HttpClientSettings {
  std::string name;      // http::Config::name: the table's name unless `name` says otherwise
  std::string pipeline;  // the [pipeline.X] every key gets; empty: none. Default: the
                         // table's name when the file has such a pipeline
  std::optional<HttpKeyBy> key_by{};
  std::optional<Nanos> default_timeout{};  // > 0
  std::optional<Nanos> attempt_timeout{};  // >= 0 (zero: none); not with a pipeline's timeout
  std::optional<Nanos> connect_timeout{};  // > 0
  std::optional<bool> detailed_metrics{};
  std::optional<Nanos> max_retry_after{};                    // >= 0
  std::optional<std::size_t> max_body_bytes{};               // 1 .. 1 GiB
  std::optional<std::size_t> max_header_bytes{};             // 256 .. 1 MiB
  std::optional<std::uint32_t> max_redirects{};              // 0 .. 50
  std::optional<std::vector<std::string>> origin_headers{};  // header names
  std::optional<std::string> deadline_header{};              // a header name, or empty
  std::optional<DeadlineHeaderFormat> deadline_header_format{};
  std::optional<std::string> idempotency_header{};  // a header name
  std::optional<bool> make_idempotency_keys{};
  std::optional<std::size_t> max_idle_handles{};  // 0 .. 1024
  std::optional<std::string> user_agent{};        // no control characters
};

// Everything one version of the file holds, checked.
struct Policies {
  std::string source;
  std::map<std::string, lab::BreakerSpec, std::less<>> breakers;
  std::map<std::string, RetryConfig, std::less<>> retries;
  std::map<std::string, RetryBudgetConfig, std::less<>> retry_budgets;
  std::map<std::string, BulkheadConfig, std::less<>> bulkheads;
  std::map<std::string, Nanos, std::less<>> timeouts;
  std::map<std::string, Reasons, std::less<>> fallbacks;
  std::map<std::string, lab::ResilienceConfig, std::less<>> pipelines;
  std::map<std::string, RegistrySpec, std::less<>> registries;
  std::map<std::string, FleetSettings, std::less<>> fleets;
  std::map<std::string, HttpClientSettings, std::less<>> http_clients;
  std::vector<ConfigError> warnings;
};

// Reads and checks everything; throws ConfigError. `source_name` names the text in errors.
Policies parse(std::string_view toml, const std::string& source_name, const Environment& env = {});

class Config {
 public:
  // The file's policies; `path` is kept for reload().
  Config(std::string path, Policies policies, Environment env);

  // A breaker's configuration, for the breaker type asked for (CircuitBreaker,
  // CountWindowBreaker, TimeWindowBreaker, or a BasicCircuitBreaker of those windows).
  // Throws ConfigError if there is no such breaker or it is of another kind.
  template <class Breaker>
  typename Breaker::Config breaker(std::string_view name) const {
    const lab::BreakerSpec spec = breaker_spec(name);
    using C = typename Breaker::Config;
    if (!std::holds_alternative<C>(spec.config)) wrong_kind(name, spec.window());
    return std::get<C>(spec.config);
  }
  lab::BreakerSpec breaker_spec(std::string_view name) const;
  // The retry's random source is the library's default (thread-safe).
  RetryConfig retry(std::string_view name) const;
  RetryBudgetConfig retry_budget(std::string_view name) const;
  BulkheadConfig bulkhead(std::string_view name) const;
  Nanos timeout(std::string_view name) const;
  Reasons fallback(std::string_view name) const;
  // The pipeline with its named parts resolved.
  lab::ResilienceConfig pipeline(std::string_view name) const;
  RegistrySpec registry(std::string_view name) const;
  // A fleet's settings and its store's (the password included: do not log it).
  FleetSettings fleet(std::string_view name) const;
  // An HTTP client's settings; its `pipeline` names a pipeline of the same version.
  HttpClientSettings http_client(std::string_view name) const;

  // The current version, whole.
  std::shared_ptr<const Policies> policies() const;
  std::vector<ConfigError> warnings() const;
  const std::string& path() const noexcept { return path_; }

  // Reads the file (and the environment given at load) again. If everything checks,
  // the getters return the new values from then on and the result is empty; if not,
  // nothing changes and the result is the error. Runs on the caller's thread; no
  // thread of the library's. Live breakers and registries are not changed by this:
  // the application hands them the new values (BreakerPolicy::reconfigure,
  // BasicRegistry::reconfigure; docs/configuration.md, "Reload"). A live Fleet and its
  // store keep their settings: a fleet's new ones take effect in the next Fleet built.
  std::optional<ConfigError> reload();

 private:
  template <class Map>
  auto find(const Map Policies::*map, std::string_view section, std::string_view name) const;
  [[noreturn]] void wrong_kind(std::string_view name, WindowKind kind) const;

  std::string path_;
  Environment env_;
  mutable std::mutex mu_;
  std::shared_ptr<const Policies> current_;
};

// Reads `path` with the process's BULWARK__* overrides (or `env`). Throws ConfigError.
Config load_file(const std::string& path);
Config load_file(const std::string& path, Environment env);

}  // namespace bulwark::config

#endif  // BULWARK_CONFIG_CONFIG_H_
