// bulwark/rate_limiter_registry.h — one rate limiter per key (a tenant, an API key, a
// client address), made on first use.
//
//   bulwark::RateLimiterRegistry<std::string> tenants({.name = "tenant", .permits = 50,
//                                                      .period = 1s});
//   if (auto ok = tenants.try_acquire(tenant_id); !ok) return too_many(ok.error().retry_after);
//
// BasicRegistry (registry.h) keys circuit breakers and can carry a per-key Extra, but
// every key there owns a breaker; a limiter-only key is this small map instead.
//
// Cost. A lookup of an existing key takes a std::shared_mutex in shared mode and does
// one hash lookup in a std::unordered_map (a few tens of ns uncontended; readers
// share the lock's cache line, so under heavy multi-core traffic it is the
// bottleneck, not the limiter). Creating a key takes the lock exclusively and
// allocates the limiter (~200 bytes with the map node, plus the key). Keys are never
// evicted: memory grows with the number of distinct keys seen, so key by something
// bounded (tenants, not client-chosen strings) or shard by hash yourself. The
// limiters themselves stay lock-free: a reference from get() may be kept and used
// without the map.
// Thread-safety: every member function may be called concurrently; references stay
// valid for the registry's lifetime.

#ifndef BULWARK_RATE_LIMITER_REGISTRY_H_
#define BULWARK_RATE_LIMITER_REGISTRY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bulwark/clock.h"
#include "bulwark/config_error.h"
#include "bulwark/expected.h"
#include "bulwark/rate_limiter.h"

namespace bulwark {

template <class Key, Clock C = SteadyClock, class Hash = std::hash<Key>>
class BasicRateLimiterRegistry {
 public:
  using clock_type = C;
  using Limiter = BasicRateLimiter<C>;
  // Builds a key's configuration; empty: every key gets the registry's configuration.
  using PerKey = std::function<RateLimiterConfig(const Key&)>;

  // Validates `config` now (throws InvalidConfig naming the field). A per-key
  // configuration is validated when its key is created, by get() (which throws then).
  explicit BasicRateLimiterRegistry(RateLimiterConfig config, const C& clock = C{},
                                    PerKey per_key = {})
      : config_(std::move(config)), clock_(&clock), per_key_(std::move(per_key)) {
    if (auto ok = validate(config_); !ok) detail::raise_config_error(std::move(ok).error());
  }

  // The key's limiter, made on first use.
  Limiter& get(const Key& key) {
    {
      std::shared_lock lock(mu_);
      if (auto it = map_.find(key); it != map_.end()) return *it->second;
    }
    auto made = std::make_unique<Limiter>(per_key_ ? per_key_(key) : config_, *clock_);
    std::unique_lock lock(mu_);
    auto [it, inserted] = map_.try_emplace(key, std::move(made));
    return *it->second;
  }

  Expected<void, RateLimited> try_acquire(const Key& key, std::uint64_t n = 1) {
    return get(key).try_acquire(n);
  }

  std::size_t size() const {
    std::shared_lock lock(mu_);
    return map_.size();
  }

  // Every key's snapshot, with `key` set by `format` (the key itself for string-like
  // keys, std::to_string for numbers).
  template <class Format>
  std::vector<RateLimiterSnapshot> snapshots(Format&& format) const {
    std::vector<RateLimiterSnapshot> out;
    std::shared_lock lock(mu_);
    out.reserve(map_.size());
    for (const auto& [key, limiter] : map_) {
      out.push_back(limiter->snapshot());
      out.back().key = format(key);
    }
    return out;
  }
  std::vector<RateLimiterSnapshot> snapshots() const {
    return snapshots([](const Key& k) {
      if constexpr (std::is_convertible_v<const Key&, std::string>) {
        return std::string(k);
      } else {
        return std::to_string(k);
      }
    });
  }

 private:
  RateLimiterConfig config_;
  const C* clock_;
  PerKey per_key_;
  mutable std::shared_mutex mu_;
  std::unordered_map<Key, std::unique_ptr<Limiter>, Hash> map_;
};

template <class Key>
using RateLimiterRegistry = BasicRateLimiterRegistry<Key, SteadyClock>;

}  // namespace bulwark

#endif  // BULWARK_RATE_LIMITER_REGISTRY_H_
