// The per-host (or per-route) resilience state of a Client, kept in a keyed registry.
// The only file of bulwark::http that uses the registry.

#ifndef BULWARK_HTTP_SRC_HOSTS_H_
#define BULWARK_HTTP_SRC_HOSTS_H_

#include <memory>
#include <string>

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
  std::unique_ptr<RetryBudget> budget;
  std::unique_ptr<Retry> retry;  // counts its calls by kind too (retry.h)
  // False when the client gates requests with a bulkhead of its own (AsyncClient's
  // AsyncBulkhead) and this one is unused: its series would only say "idle".
  bool report_bulkhead = true;

  // The registry hands its observer on, so bulkhead rejections reach its events.
  void observe_rejections(BulkheadObserver o) noexcept { bulkhead->observe_rejections(o); }
  // What the registry's exposition reports beside the breaker.
  void read_metrics(ComponentReading& r) {
    if (report_bulkhead) r.add_bulkhead(*bulkhead);
    r.add_budget(*budget);
    r.add_retry(*retry);
  }
};

class Hosts {
 public:
  using Registry = BasicRegistry<std::string, Breaker, HostState>;

  // `own_bulkheads`: each key's bulkhead gates its requests (Client); false when the
  // client has one bulkhead for all keys (AsyncClient), which it reports itself.
  explicit Hosts(const Config& c, bool own_bulkheads = true)
      : registry_(Registry::Options{
            .name = c.name,
            .breaker = c.breaker,
            .extra_for =
                [bulkhead = c.bulkhead, budget = c.budget, retry = c.retry,
                 own_bulkheads](const std::string& key) {
                  HostState s;
                  s.report_bulkhead = own_bulkheads;
                  BulkheadConfig b = bulkhead;
                  b.name = bulkhead.name + " " + key;
                  s.bulkhead = std::make_unique<Bulkhead>(std::move(b));
                  RetryBudgetConfig g = budget;
                  g.name = budget.name + " " + key;
                  s.budget = std::make_unique<RetryBudget>(std::move(g));
                  RetryConfig r = retry;
                  r.name = retry.name + " " + key;
                  r.idempotency_key = {};  // the client sends its own key
                  s.retry = std::make_unique<Retry>(std::move(r), s.budget.get());
                  return s;
                },
        }) {}

  // The key's state, created on first use. Entries live as long as the client.
  struct Entry {
    Registry::Handle handle;
    Breaker& breaker() const { return handle.breaker(); }
    HostState& state() const { return handle.extra(); }
  };
  Entry get(const std::string& key) { return Entry{registry_.get(key)}; }
  const Registry& registry() const noexcept { return registry_; }
  // Every key's breaker transitions (and rejections, key creation...), with the key.
  EventHub& events() noexcept { return registry_.events(); }

 private:
  Registry registry_;
};

}  // namespace bulwark::http::detail

#endif  // BULWARK_HTTP_SRC_HOSTS_H_
