// bulwark/registry.h — breakers by the million: get-or-create by key, lock-free lookups.
//
// A registry maps any hashable key (a downstream host, an operation, a partition) to
// its breaker and, optionally, a per-key Extra (say, a struct holding the key's
// Bulkhead and RetryBudget), built on first use from one shared configuration or a
// per-key configuration function. No thread, no timer: idle keys are evicted lazily,
// in bounded steps, by the requests themselves.
//
//   bulwark::Registry<std::string> hosts({
//       .name = "upstreams",
//       .breaker = {.name = "upstream", .consecutive_failures = 5, .open_duration = 30s},
//       .idle_ttl = 10min,                       // optional: forget hosts idle for 10 minutes
//   });
//
//   if (auto call = hosts.try_acquire(host)) {   // lookup (or create) + breaker admission
//     auto response = http_get(host, path);
//     call->record(response.ok() ? bulwark::Outcome::success : bulwark::Outcome::failure,
//                  response.elapsed);
//   } else {
//     respond_503(call.error().retry_after);
//   }
//
//   auto r = hosts.execute(host, ctx, [&](const bulwark::Context& c) { return fetch(host, c); });
//
//   bulwark::prometheus::write(std::cout, hosts);   // prometheus.h: one scrape
//
// References. A Handle (get, find) and a Call (try_acquire, execute) pin their key's
// entry: while one exists the entry is neither evicted, removed nor reused. A Call pins
// it on its own, so it may outlive the Handle it came from. A permit taken from the
// breaker directly (`handle->try_acquire()`) does not pin: keep the handle until it is
// resolved, or use `handle.try_acquire()`, which returns a Call.
//
// Eviction (idle_ttl > 0). A key goes when it has been idle — no lookup, no Handle or
// Call alive — for at least idle_ttl and its breaker is CLOSED; never sooner, possibly
// later (eviction runs when keys are created, on one lookup in 64 per thread when a
// shard's step is due, and in evict_idle()). OPEN, HALF_OPEN, FORCED_OPEN, DISABLED and
// METRICS_ONLY breakers are never evicted. An evicted key's counters are folded into
// the registry's totals, so registry counters never decrease. Memory is bounded by the
// peak number of live keys.
//
// Cost. Lookup of an existing key: one hash, one probe (usually one cache line); with
// idle_ttl or `removable`, one CAS to pin and one atomic subtract to let go. No clock
// read, no allocation, no lock, no wait. Creating a key takes its shard's mutex twice
// and allocates only when the storage grows, the key owns heap memory, or a per-key
// policy is built. Memory: kEntryBytes per key (128 for std::string keys) plus ~8-20
// bytes of index; see memory(). docs/architecture.md ("The registry") has the design.
//
// Per-key components and events. An Extra reports its counters with a member
// `void read_metrics(ComponentReading&)` (metrics.h). Its bulkhead's rejections reach
// events() with the key when the Extra is a BasicBulkhead, has a BasicBulkhead member
// named `bulkhead`, or has a member `observe_rejections(BulkheadObserver)`. execute()
// runs that bulkhead, and a FallbackStage member named `fallback`, around the call.
//
// Thread-safety: every member function may be called concurrently; the registry must
// outlive every Handle and Call.

#ifndef BULWARK_REGISTRY_H_
#define BULWARK_REGISTRY_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "bulwark/breaker_config.h"
#include "bulwark/bulkhead.h"
#include "bulwark/circuit_breaker.h"
#include "bulwark/clock.h"
#include "bulwark/config_error.h"
#include "bulwark/context.h"
#include "bulwark/detail/registry_arena.h"
#include "bulwark/detail/registry_entry.h"
#include "bulwark/detail/registry_events.h"
#include "bulwark/detail/registry_eviction.h"
#include "bulwark/detail/registry_hash.h"
#include "bulwark/detail/registry_ref.h"
#include "bulwark/detail/registry_table.h"
#include "bulwark/expected.h"
#include "bulwark/fallback.h"
#include "bulwark/metrics.h"
#include "bulwark/observe.h"
#include "bulwark/outcome.h"
#include "bulwark/pipeline.h"

namespace bulwark {

// The policy type a breaker is built from (its shareable, validated configuration).
template <class Breaker>
using policy_of = typename Breaker::Policy;

template <class Key, class Breaker = CircuitBreaker, class Extra = NoExtra>
struct RegistryOptions {
  // Identifies the registry in metrics (the `registry` label) and errors. Non-empty.
  std::string name = "default";
  // The configuration every key's breaker shares (one policy for all: no per-key cost).
  typename Breaker::Config breaker{};
  // Optional: a configuration for keys that need their own; std::nullopt means
  // `breaker`. Each one is validated (an invalid one makes get() throw InvalidConfig
  // naming the field) and becomes a policy of its own, a few hundred bytes per key.
  // Called with no registry lock held, before the key exists; may run more than once
  // for one key when threads race to create it.
  std::function<std::optional<typename Breaker::Config>(const Key&)> config_for{};
  // Builds a key's Extra. Required unless Extra is NoExtra, constructible from the
  // key, or default-constructible. Called with no registry lock held; may run more than
  // once for one key when threads race to create it, the losers' Extras destroyed
  // unpublished: register nothing elsewhere from here (read live extras with for_each).
  std::function<Extra(const Key&)> extra_for{};
  // Evict keys idle at least this long. Zero: never evict. Otherwise >= 1 ms.
  Nanos idle_ttl = Nanos::zero();
  // Allow remove(key) without idle_ttl. Entries that can go away count their
  // references: each lookup then costs a CAS and a subtract more. idle_ttl implies it.
  bool removable = false;
  // Table slots one eviction step examines (bounds a request's extra work). >= 1.
  std::uint32_t evict_batch = 32;
  // Shards, a power of two in [1, 1024]: creation and eviction in different shards
  // don't contend. Lookups never wait on a lock, whatever the number.
  std::uint32_t shards = 16;
  // Keep a BreakerMetrics block per key (latency histogram, transitions by from/to,
  // component counters): sizeof(BreakerMetrics) bytes per key.
  bool detailed_metrics = false;
};

namespace detail {

// Every check of a breaker configuration the registry makes goes through here: the
// shared one (validate(options)) and each per-key one (config_for). The checks depend
// on the breaker's sliding window (a failure_rate needs one).
template <class Breaker>
Expected<void, ConfigError> validate_breaker_config(const typename Breaker::Config& config) {
  if constexpr (requires { Breaker::window_type::capacity; }) {
    return validate(config, Breaker::window_type::capacity);  // a time window's buckets
  } else {
    return validate(config);
  }
}

// The checks that don't depend on the template parameters.
Expected<void, ConfigError> validate_registry(const std::string& name, std::uint32_t shards,
                                              Nanos idle_ttl, std::uint32_t evict_batch);

}  // namespace detail

// Checks every field; the error names the first one that is wrong.
template <class Key, class Breaker, class Extra>
Expected<void, ConfigError> validate(const RegistryOptions<Key, Breaker, Extra>& o) {
  if (auto ok = detail::validate_registry(o.name, o.shards, o.idle_ttl, o.evict_batch); !ok)
    return ok;
  if constexpr (!std::is_same_v<Extra, NoExtra> && !std::is_constructible_v<Extra, const Key&> &&
                !std::is_default_constructible_v<Extra>) {
    if (!o.extra_for) {
      return Unexpected(
          ConfigError{"registry '" + o.name + "'", "extra_for",
                      "must be set: the per-key Extra type can't be built from the key alone"});
    }
  }
  return detail::validate_breaker_config<Breaker>(o.breaker);
}

// Memory a registry uses, by part. Bytes.
struct RegistryMemory {
  std::size_t entries = 0;      // entry storage handed out so far (live + free for reuse)
  std::size_t index = 0;        // hash tables, including replaced ones kept for readers
  std::size_t metrics = 0;      // BreakerMetrics blocks (detailed_metrics)
  std::size_t key_heap = 0;     // heap memory owned by keys (long strings)
  std::size_t bookkeeping = 0;  // shards, free lists, the address directory
  std::size_t total() const noexcept { return entries + index + metrics + key_heap + bookkeeping; }
};

template <class Key, class Breaker = CircuitBreaker, class Extra = NoExtra,
          class Hash = KeyHash<Key>, class Eq = std::equal_to<>>
class BasicRegistry {
 public:
  using key_type = Key;
  using breaker_type = Breaker;
  using extra_type = Extra;
  using clock_type = typename Breaker::clock_type;
  using Config = typename Breaker::Config;
  using Policy = typename Breaker::Policy;
  using Options = RegistryOptions<Key, Breaker, Extra>;
  using Permit = typename decltype(std::declval<Breaker&>().try_acquire())::value_type;
  using Rejection = typename decltype(std::declval<Breaker&>().try_acquire())::error_type;

 private:
  using Entry = detail::RegistryEntry<Key, Breaker, Extra>;

 public:
  class Call;

  // A counted reference to one key's entry: while it exists, the entry is neither
  // evicted, removed nor reused. Copying takes another reference (one atomic add);
  // moving is free. An empty Handle (default, moved-from, a find() that missed) tests
  // false. A Handle is also a pipeline breaker stage (`bulwark::breaker(handle)`): its
  // permits are Calls, which pin the entry. Const members may run concurrently; assigning
  // or resetting one Handle may not.
  class Handle {
   public:
    using clock_type = typename Breaker::clock_type;
    using Permit = Call;  // what try_acquire() admits, as a pipeline stage sees it

    Handle() noexcept = default;
    Handle(const Handle& o) noexcept : registry_(o.registry_), entry_(o.entry_) {
      if (entry_ != nullptr) registry_->retain(entry_);
    }
    Handle(Handle&& o) noexcept
        : registry_(o.registry_), entry_(std::exchange(o.entry_, nullptr)) {}
    Handle& operator=(Handle o) noexcept {
      std::swap(registry_, o.registry_);
      std::swap(entry_, o.entry_);
      return *this;
    }
    ~Handle() { reset(); }

    // Drops the reference now.
    void reset() noexcept {
      if (entry_ != nullptr) registry_->unpin(std::exchange(entry_, nullptr));
    }
    explicit operator bool() const noexcept { return entry_ != nullptr; }

    // The key's breaker, key and Extra. Valid while this Handle holds the entry (not
    // on an empty Handle); free.
    Breaker& breaker() const noexcept { return entry_->breaker(); }
    Breaker* operator->() const noexcept { return &entry_->breaker(); }
    Breaker& operator*() const noexcept { return entry_->breaker(); }
    const Key& key() const noexcept { return entry_->key(); }
    Extra& extra() const noexcept requires(!std::is_same_v<Extra, NoExtra>) {
      return entry_->extra();
    }
    // The key's BreakerMetrics block, or nullptr without detailed_metrics.
    BreakerMetrics* metrics() const noexcept { return entry_->metrics; }
    // Unique to this entry's life in this registry: a later lookup of the same key
    // returning another number means the key was evicted and created again.
    std::uint64_t incarnation() const noexcept { return entry_->incarnation; }

    // A fallback stage's observer (fallback.h): `fallback(f).counted_by(handle)` counts
    // each answer in the key's metrics block and emits a `fallback` event with the key.
    // The handle must outlive the stage's use.
    void on_fallback(bool rejected, Reason reason) const noexcept {
      registry_->fallback_answered(entry_, rejected, reason);
    }

    // Asks the breaker for a permit: a Call, which pins the entry on its own (one atomic
    // add; `std::move(handle).try_acquire()` hands this reference over instead). A
    // rejection is emitted to events(). No allocation, no lock.
    Expected<Call, Rejection> try_acquire() const& { return registry_->acquire_on(Handle(*this)); }
    Expected<Call, Rejection> try_acquire() && { return registry_->acquire_on(std::move(*this)); }

   private:
    friend class BasicRegistry;
    Handle(BasicRegistry* r, Entry* e) noexcept : registry_(r), entry_(e) {}
    BasicRegistry* registry_ = nullptr;
    Entry* entry_ = nullptr;
  };

  // One admitted call: the breaker's permit and a reference to its entry (released in
  // that order), so the entry stays valid for as long as the Call lives, whatever
  // happens to the Handle it came from. Report the outcome with record(); a non-zero
  // duration feeds the latency histogram (detailed_metrics) and the breaker's slow-call
  // rules. Destroyed without an outcome, it counts as cancelled. Move-only.
  class [[nodiscard]] Call {
   public:
    Call(Call&&) noexcept = default;
    Call& operator=(Call&& o) noexcept {
      permit_ = std::move(o.permit_);  // resolves our permit while our entry is still pinned
      handle_ = std::move(o.handle_);
      return *this;
    }

    // Reports the outcome; only the first report counts. No allocation, no lock.
    // `duration` zero means "not timed": the histogram skips the call.
    void record(Outcome outcome, Nanos duration = Nanos::zero()) noexcept {
      if (!permit_.active()) return;
      if (BreakerMetrics* m = handle_.metrics(); m != nullptr) m->record_call(duration);
      permit_.record(outcome, duration);
    }
    void record_success(Nanos duration = Nanos::zero()) noexcept {
      record(Outcome::success, duration);
    }
    void record_failure(Nanos duration = Nanos::zero()) noexcept {
      record(Outcome::failure, duration);
    }
    void ignore() noexcept { record(Outcome::ignored); }

    // The breaker's permit, the Handle that pins the entry, and the key's breaker and
    // key. Valid while the Call lives; free.
    Permit& permit() noexcept { return permit_; }
    const Handle& handle() const noexcept { return handle_; }
    Breaker& breaker() const noexcept { return handle_.breaker(); }
    const Key& key() const noexcept { return handle_.key(); }

   private:
    friend class BasicRegistry;
    Call(Handle h, Permit p) noexcept : handle_(std::move(h)), permit_(std::move(p)) {}
    Handle handle_;  // declared first, so destroyed after the permit
    Permit permit_;
  };

  // What for_each() and collect() show of one entry. Valid during the callback only.
  struct EntryView {
    const Key& key;
    const Breaker& breaker;
    const BreakerMetrics* metrics;  // nullptr without detailed_metrics
    // nullptr when Extra is NoExtra. Not const: reading a component may update lazily
    // kept state (RetryBudget::snapshot()), which components allow from any thread.
    Extra* extra;
    Ticks outage_since;  // when it left CLOSED, or detail::kNoOutage
    std::uint64_t incarnation;
  };

  // Validates `options` (throws InvalidConfig naming the field). A stateful clock
  // (ManualClock) must be passed and must outlive the registry. Allocates the shards.
  explicit BasicRegistry(Options options) requires std::is_empty_v<clock_type>
      : BasicRegistry(std::move(options), detail::ClockRef<clock_type>()) {}
  BasicRegistry(Options options, const clock_type& clock)
      : BasicRegistry(std::move(options), detail::ClockRef<clock_type>(clock)) {}
  BasicRegistry(Options, const clock_type&&) = delete;
  BasicRegistry(const BasicRegistry&) = delete;
  BasicRegistry& operator=(const BasicRegistry&) = delete;

  // Every Handle and Call must be gone. Removes the registry's listeners.
  ~BasicRegistry();

  // New thresholds for every key that shares the registry's policy (keys given their
  // own by config_for keep theirs), existing and future, for the decisions made from
  // now on; see BreakerPolicy::reconfigure for what may change and what a live
  // breaker keeps (its state, its OPEN period in progress, permits in flight). Checks
  // `breaker` first: InvalidConfig naming the field, and nothing changes. Thread-safe
  // with every other member; lookups and calls are not blocked.
  void reconfigure(Config breaker) { shared_policy_.reconfigure(std::move(breaker)); }

  // The key's entry, created if needed. `key` may be any type Hash and Eq accept (a
  // std::string_view for std::string keys); a Key is built only on creation.
  // Existing key: one hash + one probe (+ pin), no allocation, no lock. Missing key:
  // creates it under the shard's mutex. Throws what config_for / extra_for throw, or
  // InvalidConfig for an invalid per-key configuration.
  template <class K>
  Handle get(const K& key);

  // The key's entry if it exists, else an empty Handle. Never creates; counts as a use.
  // Lock-free like get(); a miss that raced with an eviction moving slots retries once
  // and then looks under the shard's mutex.
  template <class K>
  Handle find(const K& key);

  // get(key) and the breaker's try_acquire() in one step; the Call pins the entry until
  // it is destroyed. No allocation or lock when the key exists.
  template <class K>
  Expected<Call, Rejection> try_acquire(const K& key) {
    return acquire_on(get(key));
  }

  // Runs `call` (pipeline.h's call contract) for `key` through the key's pipeline:
  // its fallback (the explicit `fallback` argument, else the Extra's `fallback` member
  // if it is a FallbackStage), its breaker, its bulkhead (the Extra, or its `bulkhead`
  // member, if a BasicBulkhead), then the call. Returns Expected<T, Failure<E>> like
  // Pipeline::execute. The key's entry stays pinned throughout; fallback answers are
  // counted on the key (Handle::on_fallback). Costs get(key) plus the stages.
  template <class K, Clock C, class F>
  auto execute(const K& key, const BasicContext<C>& ctx, F&& call) {
    Handle h = get(key);
    if constexpr (detail::extra_has_fallback<Extra>()) {
      return keyed_pipeline(h, h.extra().fallback.counted_by(h)).execute(ctx, call);
    } else {
      return keyed_pipeline(h).execute(ctx, call);
    }
  }
  template <class K, Clock C, class Fb, class F>
  auto execute(const K& key, const BasicContext<C>& ctx, const FallbackStage<Fb>& fallback,
               F&& call) {
    Handle h = get(key);
    return keyed_pipeline(h, fallback.counted_by(h)).execute(ctx, call);
  }

  // Removes the key now, whatever its breaker's state, unless a Handle or Call pins it.
  // Returns true if it was removed; its counters are folded into the totals. Needs
  // idle_ttl or `removable` (returns false otherwise). Takes the shard's mutex.
  template <class K>
  bool remove(const K& key);

  // Runs eviction steps on every shard, about `max_slots` table slots in all (split
  // evenly, at least one per shard; 0: every slot once). Returns the keys evicted. For
  // callers that want memory back without waiting for traffic. No-op without idle_ttl.
  // Takes each shard's mutex in turn.
  std::size_t evict_idle(std::size_t max_slots = 0);

  // Calls f(const EntryView&) for every live entry, each pinned during its call; no
  // lock is held while f runs. Entries created or evicted meanwhile may or may not be
  // visited. Does not count as use. Cost: one CAS and one subtract per entry.
  template <class F>
  void for_each(F&& f) const;

  // Walks every entry once, calling per_entry(view, breaker_reading), and returns the
  // registry's totals: live entries plus the folded counters of evicted ones (what a
  // scrape uses). Each shard is walked under its mutex together with its evicted
  // totals, so no key is counted twice or not at all and successive totals never
  // decrease. Lookups go on meanwhile; creation and eviction in the shard being walked
  // wait. per_entry must not create, remove or evict keys of this registry.
  // Cost: O(keys + shards); allocates only the reading's name and histogram.
  template <class F>
  RegistryReading collect(F&& per_entry) const;
  // The totals alone: collect() without a per-entry callback.
  RegistryReading read() const {
    return collect([](const EntryView&, const BreakerReading&) {});
  }

  // Live keys. Sums per-shard counters: O(shards), no lock.
  std::size_t size() const noexcept {
    std::size_t n = 0;
    for (std::uint32_t si = 0; si <= shard_mask_; ++si)
      n += shards_[si].live.load(std::memory_order_relaxed);
    return n;
  }

  // What the registry occupies, by part. Walks the keys (for their heap memory) and
  // takes each shard's mutex briefly.
  RegistryMemory memory() const;

  // Transitions, rejections, key creation and eviction of every breaker in the
  // registry, with the key (observe.h). A transition reaches its entry in O(1).
  EventHub& events() noexcept { return events_.hub; }

  // The configuration as given. Constant, free, any thread.
  const std::string& name() const noexcept { return name_; }
  clock_type clock() const noexcept requires std::is_empty_v<clock_type> { return clock_.get(); }
  const clock_type& clock() const noexcept requires(!std::is_empty_v<clock_type>) {
    return clock_.get();
  }
  bool detailed_metrics() const noexcept { return detailed_; }
  Nanos idle_ttl() const noexcept { return idle_.ttl; }

  // Bytes of one entry, for capacity planning (128 for std::string keys).
  static constexpr std::size_t kEntryBytes = sizeof(Entry);

 private:
  using Ref = detail::RegistryRef;

  using Evicted = detail::EvictedKey;

  struct alignas(64) Shard {
    // Read by every lookup; written under mu.
    detail::SlotTable table;
    detail::SegmentedArray<Entry, detail::kArenaPage> entries;  // page-aligned: owner_of
    detail::SegmentedArray<BreakerMetrics> metrics;  // parallel to entries (detailed_metrics)
    detail::StepGate gate;

    // Written under mu (atomics where readers look without it).
    alignas(64) mutable std::mutex mu;
    std::atomic<std::uint32_t> allocated{0};  // entries handed out: the walks' bound
    std::atomic<std::uint64_t> live{0};
    std::atomic<std::uint64_t> created{0};
    std::atomic<std::uint64_t> evicted{0};
    std::size_t cursor = 0;  // where the next eviction step looks
    std::vector<std::uint32_t> free;
    std::size_t metrics_blocks = 0;
    detail::RetiredTotals gone;  // counters of evicted and removed entries
  };

  // Forwards the breakers' transitions to the registry while it lives. Listeners hold
  // it by shared_ptr: a policy copied out of the registry may outlive it.
  struct Router {
    std::atomic<BasicRegistry*> target{nullptr};
  };

  BasicRegistry(Options o, detail::ClockRef<clock_type> clock)
      : clock_(clock),
        name_(checked(o)),
        config_for_(std::move(o.config_for)),
        extra_for_(std::move(o.extra_for)),
        shared_policy_(make_policy(std::move(o.breaker))),
        router_(std::make_shared<Router>()),
        shards_(std::make_unique<Shard[]>(o.shards)),
        shard_mask_(o.shards - 1),
        idle_(o.idle_ttl),
        evict_batch_(o.evict_batch),
        detailed_(o.detailed_metrics),
        counted_(o.idle_ttl > Nanos::zero() || o.removable) {
    router_->target.store(this, std::memory_order_release);
    shared_listener_ = hook(shared_policy_);
  }

  static std::string checked(const Options& o) {
    if (auto ok = validate(o); !ok) detail::raise_config_error(std::move(ok).error());
    return o.name;
  }

  Policy make_policy(Config config) const {
    if constexpr (std::is_empty_v<clock_type>) {
      return Policy(std::move(config));
    } else {
      return Policy(std::move(config), clock_.get());
    }
  }

  ListenerId hook(Policy& policy) {
    return policy.on_transition([router = router_](const TransitionEvent& e) {
      if (BasicRegistry* r = router->target.load(std::memory_order_acquire); r != nullptr)
        r->on_transition(e);
    });
  }

  template <class K>
  std::uint64_t hash_of(const K& key) const noexcept {
    return detail::mix64(static_cast<std::uint64_t>(hash_(key)));
  }
  static std::uint32_t tag_of(std::uint64_t h) noexcept {
    return static_cast<std::uint32_t>(h >> 32);
  }
  Shard& shard_for(std::uint64_t h) const noexcept { return shards_[h & shard_mask_]; }

  EntryView view_of(Entry* e) const noexcept {
    Extra* extra = nullptr;
    if constexpr (!std::is_same_v<Extra, NoExtra>) extra = &e->extra();
    return EntryView{e->key(),
                     e->breaker(),
                     e->metrics,
                     extra,
                     e->outage_since.load(std::memory_order_relaxed),
                     e->incarnation};
  }

  // ---- references ------------------------------------------------------------------

  // Takes a reference unless the entry is dead. Without counting, entries die only
  // before they are published (a lost creation race): a live-looking one is used.
  bool pin(Entry* e, bool use = true) const noexcept {
    if (!counted_) return !e->ref.dead();
    return e->ref.pin(use);
  }
  void retain(Entry* e) const noexcept {
    if (counted_) e->ref.retain();
  }
  void unpin(Entry* e) const noexcept {
    if (counted_) e->ref.release();
  }

  // ---- lookup ----------------------------------------------------------------------

  template <class K>
  Entry* find_pinned(const Shard& s, std::uint64_t h, const K& key) const noexcept;

  template <class K>
  bool key_equal(const Key& stored, const K& key) const noexcept(noexcept(eq_(stored, key))) {
    if constexpr (std::is_same_v<Eq, std::equal_to<>> && std::is_same_v<Key, std::string> &&
                  std::is_convertible_v<const K&, std::string_view>) {
      const std::string_view k(key);
      return stored.size() == k.size() && detail::bytes_equal(stored.data(), k.data(), k.size());
    } else {
      return eq_(stored, key);
    }
  }

  Expected<Call, Rejection> acquire_on(Handle h);

  // The key's stages, outermost first: `outer` (a fallback), the Handle as the breaker
  // stage (its permits are Calls: the entry stays pinned), the Extra's bulkhead.
  template <class... Outer>
  auto keyed_pipeline(Handle& h, Outer... outer) {
    if constexpr (detail::extra_has_bulkhead<Extra>()) {
      return pipeline(std::move(outer)..., breaker(h), bulkhead(detail::bulkhead_of(h.extra())));
    } else {
      return pipeline(std::move(outer)..., breaker(h));
    }
  }

  // ---- creation --------------------------------------------------------------------

  template <class K>
  Entry* create(Shard& s, std::uint64_t h, const K& key);

  // An entry to fill (dead, not in the table). Under s.mu.
  std::uint32_t allocate(Shard& s);
  [[noreturn]] static void throw_length();

  // Builds the entry's payload (the Extra runs user code, and a breaker may refuse its
  // policy). If anything throws, the entry goes back to the free list.
  void construct_payload(Shard& s, Entry* e, Key&& key, const Policy& policy, std::uint32_t index);

  Extra make_extra(const Key& key) const;

  // ---- eviction (registry_eviction.h) ------------------------------------------------

  // On the lookup path: one lookup in IdlePolicy::kLookupsPerCheck (per thread) reads
  // the clock and, if the shard's step is due and nobody holds its mutex, takes it.
  void maybe_sweep(Shard& s);

  // One bounded step (detail::sweep_step). Under s.mu.
  std::size_t sweep(Shard& s, Ticks now, std::size_t budget, std::vector<Evicted>& gone);

  // Kills an idle, unreferenced, CLOSED entry so no lookup can pin it again.
  bool try_mark_evicted(Entry* e, std::uint64_t now_u) noexcept;

  // Takes a dead entry out of slot `pos`, folds its counters into the shard's totals,
  // destroys its payload and frees it for reuse. Under s.mu.
  void retire(Shard& s, std::size_t pos, std::uint32_t index, std::uint64_t now_u,
              std::vector<Evicted>& gone);

  // ---- events (registry_events.h) ---------------------------------------------------

  void on_transition(const TransitionEvent& ev) { events_.on_transition(ev); }

  // A per-key bulkhead refused a call (the observer attached in construct_payload).
  static void bulkhead_rejected(void* entry, void* registry,
                                const BulkheadRejectionEvent& ev) noexcept {
    auto* self = static_cast<BasicRegistry*>(registry);
    self->events_.bulkhead_rejected(*static_cast<Entry*>(entry), ev, self->clock_.get());
  }

  // A fallback stage observed through a Handle answered (Handle::on_fallback).
  void fallback_answered(Entry* e, bool rejected, Reason reason) noexcept {
    events_.fallback_answered(*e, rejected, reason, clock_.get());
  }

  void announce_evicted(const std::vector<Evicted>& gone) {
    events_.announce_evicted(gone, clock_.get());
  }

  // ---- memory ------------------------------------------------------------------------

  RegistryMemory memory_without_keys() const;

  const detail::ClockRef<clock_type> clock_;
  const std::string name_;
  const std::function<std::optional<Config>(const Key&)> config_for_;
  const std::function<Extra(const Key&)> extra_for_;
  Policy shared_policy_;
  std::shared_ptr<Router> router_;
  ListenerId shared_listener_ = 0;
  std::unique_ptr<Shard[]> shards_;
  const std::uint32_t shard_mask_;
  const detail::IdlePolicy idle_;
  const std::uint32_t evict_batch_;
  const bool detailed_;
  const bool counted_;  // entries count their references (they can be evicted or removed)
  [[no_unique_address]] Hash hash_;
  [[no_unique_address]] Eq eq_;
  detail::KeyedEvents<Entry> events_;  // the hub, transition counts, address directory
};

// A registry of the default breaker type, keyed by Key.
template <class Key, class Extra = NoExtra>
using Registry = BasicRegistry<Key, CircuitBreaker, Extra>;

}  // namespace bulwark

// The definitions of the members declared above.
#include "bulwark/detail/registry_impl.h"

#endif  // BULWARK_REGISTRY_H_
