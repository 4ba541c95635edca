// The per-host (or per-route) resilience state of a Client, kept in a keyed registry.
// The only file of bulwark::http that uses the registry.

#ifndef BULWARK_HTTP_SRC_HOSTS_H_
#define BULWARK_HTTP_SRC_HOSTS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "bulwark/adaptive_limit.h"
#include "bulwark/bulkhead.h"
#include "bulwark/http/client.h"
#include "bulwark/metrics.h"
#include "bulwark/registry.h"
#include "bulwark/retry.h"
#include "bulwark/retry_budget.h"

namespace bulwark::http::detail {

// One key's bulkhead, retry budget and retry (the breaker is the registry's).
struct HostState {
  std::unique_ptr<Bulkhead> bulkhead;
  // Config::adaptive_limit's limiter for this key, in the bulkhead's place; null without.
  std::unique_ptr<AdaptiveLimit> limit;
  std::unique_ptr<RetryBudget> budget;
  std::unique_ptr<Retry> retry;  // counts its calls by kind too (retry.h)
  // False when the client gates requests with a bulkhead of its own (AsyncClient's
  // AsyncBulkhead) and this one is unused: its series would only say "idle".
  bool report_bulkhead = true;

  // Config::fallback's answers for this key, by FallbackKind (rejected, failed). With
  // detailed_metrics the registry's metrics block counts them (Handle::on_fallback) and
  // these stay null, so they are not counted twice.
  std::unique_ptr<std::array<std::atomic<std::uint64_t>, 2>> fallbacks;
  void count_fallback(bool rejected) noexcept {
    if (fallbacks) (*fallbacks)[rejected ? 0 : 1].fetch_add(1, std::memory_order_relaxed);
  }

  // The registry hands its observer on, so bulkhead rejections reach its events.
  void observe_rejections(BulkheadObserver o) noexcept { bulkhead->observe_rejections(o); }
  // What the registry's exposition reports beside the breaker.
  void read_metrics(ComponentReading& r) {
    if (report_bulkhead && !limit) r.add_bulkhead(*bulkhead);
    r.add_budget(*budget);
    r.add_retry(*retry);
    if (fallbacks) {
      r.has_fallback = true;
      for (std::size_t i = 0; i < fallbacks->size(); ++i)
        r.fallbacks[i] += (*fallbacks)[i].load(std::memory_order_relaxed);
    }
  }
};

// HostState for one key: built by the registry of whichever breaker kind the client uses.
inline HostState make_host_state(const Config& c, bool own_bulkheads, const std::string& key) {
  HostState s;
  s.report_bulkhead = own_bulkheads;
  if (c.fallback && !c.detailed_metrics)
    s.fallbacks = std::make_unique<std::array<std::atomic<std::uint64_t>, 2>>();
  BulkheadConfig b = c.bulkhead;
  b.name = c.bulkhead.name + " " + key;
  s.bulkhead = std::make_unique<Bulkhead>(std::move(b));
  if (c.adaptive_limit) {
    AdaptiveLimitConfig a = *c.adaptive_limit;
    a.name = c.adaptive_limit->name + " " + key;
    s.limit = std::make_unique<AdaptiveLimit>(std::move(a));
  }
  RetryBudgetConfig g = c.budget;
  g.name = c.budget.name + " " + key;
  s.budget = std::make_unique<RetryBudget>(std::move(g));
  RetryConfig r = c.retry;
  r.name = c.retry.name + " " + key;
  r.idempotency_key = {};  // the client sends its own key
  s.retry = std::make_unique<Retry>(std::move(r), s.budget.get());
  return s;
}

// The keys' registry, of the breaker kind the config chose (Config::any_breaker, else
// Config::breaker's count window). Everything that depends on the kind — running a
// pipeline with the key's breaker, the exposition, events — goes through visit(), so
// Client and AsyncClient share one implementation for the three kinds.
class Hosts {
 public:
  template <class B>
  using RegistryOf = BasicRegistry<std::string, B, HostState>;

  // `own_bulkheads`: each key's bulkhead gates its requests (Client); false when the
  // client has one bulkhead for all keys (AsyncClient), which it reports itself.
  Hosts(const Hosts&) = delete;  // extra_for refers to this
  Hosts& operator=(const Hosts&) = delete;
  explicit Hosts(const Config& c, bool own_bulkheads = true) {
    std::visit(
        [&](const auto& bc) {
          using C = std::decay_t<decltype(bc)>;
          if constexpr (std::is_same_v<C, std::monostate>) {
            make<CountWindowBreaker>(c, c.breaker, own_bulkheads);
          } else if constexpr (std::is_same_v<C, BreakerConfig>) {
            make<CircuitBreaker>(c, bc, own_bulkheads);
          } else if constexpr (std::is_same_v<C, CountWindowConfig>) {
            make<CountWindowBreaker>(c, bc, own_bulkheads);
          } else {
            make<TimeWindowBreaker>(c, bc, own_bulkheads);
          }
        },
        c.any_breaker);
  }

  // The key's state, created on first use. Entries live as long as the client.
  struct Entry {
    std::variant<std::monostate, RegistryOf<CircuitBreaker>::Handle,
                 RegistryOf<CountWindowBreaker>::Handle, RegistryOf<TimeWindowBreaker>::Handle>
        handle;
    // Calls f(breaker) with the key's breaker as its own type.
    template <class F>
    decltype(auto) with_breaker(F&& f) const {
      if (auto* h = std::get_if<1>(&handle)) return f(h->breaker());
      if (auto* h = std::get_if<3>(&handle)) return f(h->breaker());
      return f(std::get<2>(handle).breaker());
    }
    // Calls f(handle) with the key's registry Handle, a breaker stage of its own kind
    // (pipeline.h) whose rejections reach the registry's events.
    template <class F>
    decltype(auto) with_handle(F&& f) {
      if (auto* h = std::get_if<1>(&handle)) return f(*h);
      if (auto* h = std::get_if<3>(&handle)) return f(*h);
      return f(std::get<2>(handle));
    }
    BreakerRef breaker() const {
      return with_breaker([](auto& b) { return BreakerRef(&b); });
    }
    HostState& state() const {
      return std::visit(
          [](const auto& h) -> HostState& {
            if constexpr (std::is_same_v<std::decay_t<decltype(h)>, std::monostate>) {
              std::abort();  // an Entry is used only once get() has filled it
            } else {
              return h.extra();
            }
          },
          handle);
    }
  };
  // Calls f(registry) with the registry as its own type.
  template <class F>
  decltype(auto) visit(F&& f) const {
    if (count_) return f(*count_);
    if (consecutive_) return f(*consecutive_);
    return f(*time_);
  }
  Entry get(const std::string& key) {
    return visit([&](auto& r) { return Entry{r.get(key)}; });
  }
  // New thresholds for every key's breaker (BasicRegistry::reconfigure). Throws
  // InvalidConfig, changing nothing, for another kind of breaker than the client's.
  void reconfigure(const AnyBreakerConfig& next) {
    visit([&](auto& r) {
      using Wanted = typename std::decay_t<decltype(r)>::Config;
      const Wanted* c = std::get_if<Wanted>(&next);
      if (c == nullptr) {
        throw InvalidConfig(ConfigError{
            "http client", "any_breaker",
            "must be of the breaker kind the client was built with (BreakerConfig, "
            "CountWindowConfig or TimeWindowConfig): a live client keeps its breakers' kind"});
      }
      r.reconfigure(*c);
    });
  }
  // Every key's adaptive limit (Config::adaptive_limit), as write_adaptive_limits()
  // takes them: read from the registry's live entries, so a HostState built for a key
  // that another thread created first (and destroyed by the registry) is never seen.
  // The readings' names point into the limiters, which live as long as the registry
  // (keys are never evicted). Allocates.
  std::vector<prometheus::AdaptiveLimitReading> adaptive_limits() const {
    std::vector<prometheus::AdaptiveLimitReading> out;
    visit([&](const auto& r) {
      r.for_each([&](const auto& view) {
        if (view.extra != nullptr && view.extra->limit)
          out.push_back(prometheus::reading(*view.extra->limit));
      });
    });
    return out;
  }
  // Every key's breaker transitions (and rejections, key creation...), with the key.
  EventHub& events() noexcept {
    return visit([](auto& r) -> EventHub& { return r.events(); });
  }

 private:
  template <class B>
  void make(const Config& c, const typename B::Config& bc, bool own_bulkheads) {
    auto r = std::make_unique<RegistryOf<B>>(typename RegistryOf<B>::Options{
        .name = c.name,
        .breaker = bc,
        .extra_for = [c, own_bulkheads](
                         const std::string& key) { return make_host_state(c, own_bulkheads, key); },
        .detailed_metrics = c.detailed_metrics,
    });
    if constexpr (std::is_same_v<B, CircuitBreaker>) consecutive_ = std::move(r);
    if constexpr (std::is_same_v<B, CountWindowBreaker>) count_ = std::move(r);
    if constexpr (std::is_same_v<B, TimeWindowBreaker>) time_ = std::move(r);
  }

  // Exactly one is set.
  std::unique_ptr<RegistryOf<CircuitBreaker>> consecutive_;
  std::unique_ptr<RegistryOf<CountWindowBreaker>> count_;
  std::unique_ptr<RegistryOf<TimeWindowBreaker>> time_;
};

}  // namespace bulwark::http::detail

#endif  // BULWARK_HTTP_SRC_HOSTS_H_
