// bulwark/registry.h — breakers by the million: get-or-create by key, lock-free lookups.
//
// One breaker per downstream host, per operation or per partition (seeds 000 and 002)
// means thousands to millions of breakers, created on first use. A registry maps any
// hashable key to its breaker (and, optionally, per-key extras such as a bulkhead and a
// retry budget), from one shared configuration or a per-key configuration function.
// No thread, no timer: idle keys are evicted lazily, in bounded steps, by the requests
// themselves.
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
//   bulwark::prometheus::write(std::cout, hosts);   // prometheus.h: one scrape
//
// Handles. get() returns a Handle: a reference to the key's entry that keeps the
// breaker alive and un-evictable while it exists (counted when entries can be evicted
// or removed; a plain pointer otherwise, as entries then live as long as the registry). A Call
// (try_acquire) holds the handle and the breaker's permit together, so a call in flight always pins
// its entry. If you take a permit from the breaker yourself (`handle->try_acquire()`), keep the
// handle until the permit is resolved: a permit points at the breaker.
//
// Eviction (idle_ttl > 0). A key is evicted when it has been idle — not looked up, and
// no handle held — for at least idle_ttl, and its breaker is CLOSED. A breaker that is
// OPEN, HALF_OPEN, FORCED_OPEN, DISABLED or METRICS_ONLY is never evicted (that state
// is information, or an operator's decision), nor is an entry with a handle or call
// alive. Eviction runs in bounded steps (`evict_batch` table slots) when a key is
// created, when a lookup notices a step is due (it looks once every 64 lookups of its
// thread), and in evict_idle(). Idle time is observed by the steps, as the CLOCK
// algorithm of page replacement does: a lookup only sets a "used" bit in the entry's
// reference word, in the CAS that pins it, and a step that finds the bit set (or the
// entry referenced) clears it and starts the key's idle time again. Lookups therefore
// never read the clock; a key goes at the first step that finds it idle for idle_ttl —
// later than idle_ttl, never sooner. An evicted key's counters — its breaker's, its
// BreakerMetrics block's, and those its Extra reports (read_metrics: bulkhead
// rejections, retry-budget exhaustion) — are folded into the shard's totals under the
// lock that unlinks it, and a scrape reads each shard's entries and evicted totals under
// that same lock, so registry counters never decrease. Memory is bounded by the peak
// number of live keys, not by the keys ever seen: freed entries are reused; the index
// and entry storage keep their peak size.
//
// How lookups stay lock-free. Keys are spread over `shards` shards; each shard has an
// open-addressing table of 8-byte slots (32-bit hash tag + 32-bit entry index) that
// readers probe with atomic loads, and an arena of entries that is never freed while
// the registry lives (type-stable memory). When entries can be evicted, a reader pins
// an entry with one CAS on its reference word — which fails if the entry is being
// evicted — and only then compares the key. Creation, eviction and table growth take the shard's
// mutex; a lookup that misses takes it to create the key. Replaced tables are kept until the
// registry is destroyed (a reader may still be probing one); they total less than the live table.
//
// Cost. Lookup of an existing key: one hash and one probe (usually one cache line).
// If entries can go away (idle_ttl, or `removable` for remove()), also one CAS to pin
// the entry and one atomic subtract to let it go. No clock read, no allocation, no lock.
// With idle_ttl, one lookup in 64 (per thread) reads the coarse clock to see whether the
// shard's next eviction step is due; when it is, that lookup try-locks the shard's mutex
// (never waits: if another thread holds it, the step is left to a later lookup) and runs
// one bounded step. So a lookup never blocks on a lock, but about one lookup per shard
// per idle_ttl/8 takes one. Creating a key takes the shard mutex twice and allocates only
// when the arena grows, the key owns heap memory, or a per-key policy is built. Memory:
// sizeof(Entry) (128 bytes for std::string keys: the 64-byte breaker, the reference
// word, outage start, metrics pointer, and the key) plus ~8-20 bytes of index per key;
// see memory().
//
// Per-key components and events. An Extra (say, a struct holding the key's Bulkhead and
// RetryBudget) reports its counters with a member `void read_metrics(ComponentReading&)`
// (metrics.h). Its bulkhead's rejections reach events() as `rejection` events with the
// key (BulkheadRejectionInfo) when the Extra is a BasicBulkhead, has a BasicBulkhead
// member named `bulkhead`, or has a member `observe_rejections(BulkheadObserver)` that
// hands the observer on to its bulkheads: the registry attaches it when it builds the
// Extra. A pipeline's fallback stage given a Handle (`fallback(f).counted_by(handle)`)
// counts each answer in the key's metrics block and emits a `fallback` event.
//
// Thread-safety: every member function may be called concurrently, except that the
// registry must outlive every Handle and Call.

#ifndef BULWARK_REGISTRY_H_
#define BULWARK_REGISTRY_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <charconv>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
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
#include "bulwark/expected.h"
#include "bulwark/fallback.h"
#include "bulwark/metrics.h"
#include "bulwark/observe.h"
#include "bulwark/outcome.h"

#if defined(__SANITIZE_ADDRESS__)
#define BULWARK_REGISTRY_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BULWARK_REGISTRY_ASAN 1
#endif
#endif
#if defined(BULWARK_REGISTRY_ASAN)
#include <sanitizer/asan_interface.h>
#endif

namespace bulwark {

// The default per-key extra: nothing.
struct NoExtra {};

namespace detail {

inline std::uint64_t load_u64(const char* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline std::uint64_t load_u32(const char* p) noexcept {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
// 64x64 -> 128-bit multiply, halves folded: the mixing step of wyhash.
inline std::uint64_t mul_fold(std::uint64_t a, std::uint64_t b) noexcept {
  __extension__ using u128 = unsigned __int128;
  const u128 r = static_cast<u128>(a) * b;
  return static_cast<std::uint64_t>(r) ^ static_cast<std::uint64_t>(r >> 64);
}

// A wyhash-style hash of a byte string, inline: keys like "host-123456:443" (<= 16
// bytes) take two overlapping loads and two multiplies, where std::hash's out-of-line
// MurmurHash2 costs a library call and a loop. Not seeded, like std::hash: for keys an
// adversary chooses, give the registry a keyed hash of your own.
inline std::uint64_t hash_bytes(const char* p, std::size_t n) noexcept {
  constexpr std::uint64_t k0 = 0xa0761d6478bd642fULL, k1 = 0xe7037ed1a0b428dbULL,
                          k2 = 0x8ebc6af09c88c6e3ULL;
  std::uint64_t seed = k0, a = 0, b = 0;
  if (n <= 16) {
    if (n >= 4) {
      const std::size_t mid = (n >> 3) << 2;  // 0 for n < 8, 4 for n >= 8
      a = (load_u32(p) << 32) | load_u32(p + mid);
      b = (load_u32(p + n - 4) << 32) | load_u32(p + n - 4 - mid);
    } else if (n > 0) {
      const auto u = [&](std::size_t i) {
        return static_cast<std::uint64_t>(static_cast<unsigned char>(p[i]));
      };
      a = (u(0) << 16) | (u(n >> 1) << 8) | u(n - 1);
    }
  } else {
    std::size_t i = n;
    for (; i > 16; i -= 16, p += 16) seed = mul_fold(load_u64(p) ^ k1, load_u64(p + 8) ^ seed);
    a = load_u64(p + i - 16);
    b = load_u64(p + i - 8);
  }
  return mul_fold(k1 ^ n, mul_fold(a ^ k1, b ^ seed ^ k2));
}

// Equality of two byte strings of the same length, inline for short ones (the call to
// memcmp is a good part of a lookup otherwise).
inline bool bytes_equal(const char* a, const char* b, std::size_t n) noexcept {
  if (n <= 16) {
    if (n >= 8)
      return (load_u64(a) ^ load_u64(b)) == 0 && (load_u64(a + n - 8) ^ load_u64(b + n - 8)) == 0;
    if (n >= 4)
      return (load_u32(a) ^ load_u32(b)) == 0 && (load_u32(a + n - 4) ^ load_u32(b + n - 4)) == 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (a[i] != b[i]) return false;
    }
    return true;
  }
  return std::memcmp(a, b, n) == 0;
}

}  // namespace detail

// The registry's hash: std::hash for most keys; for std::string keys an inline
// wyhash-style hash (detail::hash_bytes), transparent, so that a lookup by
// std::string_view or const char* builds no string.
template <class Key>
struct KeyHash {
  std::size_t operator()(const Key& key) const noexcept(noexcept(std::hash<Key>{}(key))) {
    return std::hash<Key>{}(key);
  }
};
template <>
struct KeyHash<std::string> {
  using is_transparent = void;
  std::size_t operator()(std::string_view key) const noexcept {
    return static_cast<std::size_t>(detail::hash_bytes(key.data(), key.size()));
  }
};

// How a key appears as text (the Prometheus `key` label, events). Customise it for
// your own key type with an ADL-found `void bulwark_key_text(const K&, std::string&)`;
// strings, integers and types with a to_string() work as they are.
template <class Key>
void append_key_text(std::string& out, const Key& key) {
  if constexpr (requires { bulwark_key_text(key, out); }) {
    bulwark_key_text(key, out);
  } else if constexpr (std::is_convertible_v<const Key&, std::string_view>) {
    out.append(std::string_view(key));
  } else if constexpr (std::is_integral_v<Key>) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, key);
    out.append(buf, r.ptr);
  } else if constexpr (requires { to_string(key); }) {
    out.append(to_string(key));
  } else if constexpr (requires { std::to_string(key); }) {
    out.append(std::to_string(key));
  } else {
    static_assert(
        sizeof(Key) == 0,
        "bulwark: define `void bulwark_key_text(const Key&, std::string&)` next to your key type");
  }
}

// The policy type a breaker is built from (BreakerPolicy<C, Window> today), read from the
// breaker itself so the registry follows the breaker's template parameters.
template <class Breaker>
using policy_of = std::remove_cvref_t<decltype(std::declval<const Breaker&>().policy())>;

template <class Key, class Breaker = CircuitBreaker, class Extra = NoExtra>
struct RegistryOptions {
  // Identifies the registry in metrics (the `registry` label) and errors. Non-empty.
  std::string name = "default";
  // The configuration every key's breaker shares (one policy for all: no per-key cost).
  typename Breaker::Config breaker{};
  // Optional: a configuration for keys that need their own. Return std::nullopt for
  // keys that use `breaker`. Each returned configuration is validated (an invalid one
  // makes get() throw InvalidConfig naming the field) and becomes a policy of its own,
  // which costs a few hundred bytes per key: return nullopt whenever you can.
  // Called without any registry lock held, before the key is created; may run more
  // than once for one key when threads race to create it.
  std::function<std::optional<typename Breaker::Config>(const Key&)> config_for{};
  // Builds a key's Extra (say, a struct holding its Bulkhead and RetryBudget). Required
  // unless Extra is NoExtra, constructible from the key, or default-constructible.
  // Called without any registry lock held.
  std::function<Extra(const Key&)> extra_for{};
  // Evict keys idle at least this long (see the header comment). Zero: never evict.
  // Otherwise at least 1 ms (idle time is kept in ~1 ms units).
  Nanos idle_ttl = Nanos::zero();
  // Allow remove(key) in a registry without idle_ttl. Entries that can go away must
  // count the handles that reference them: each lookup then costs two more atomic
  // operations (a CAS to pin the entry, a subtraction to let it go). idle_ttl > 0
  // implies it. Without either, entries live as long as the registry, and handles are
  // plain pointers.
  bool removable = false;
  // Table slots one eviction step examines (bounds the work a request may do). >= 1.
  std::uint32_t evict_batch = 32;
  // Shards, a power of two in [1, 1024]: creation and eviction in different shards
  // don't contend. Lookups never wait on a lock, whatever the number.
  std::uint32_t shards = 16;
  // Keep a BreakerMetrics block per key (latency histogram, transitions by from/to,
  // component counters): sizeof(BreakerMetrics) bytes per key. Without it, per-key
  // metrics are what the breaker counts itself (state, calls by outcome, openings).
  bool detailed_metrics = false;
};

namespace detail {

// Checks a breaker configuration for the breaker type it will build: the checks
// depend on its sliding window (a failure_rate needs one).
template <class Breaker>
Expected<void, ConfigError> validate_for(const typename Breaker::Config& config) {
  if constexpr (requires { Breaker::window_type::capacity; }) {
    return validate(config, Breaker::window_type::capacity);
  } else {
    return validate(config);
  }
}

// The checks that don't depend on the template parameters.
Expected<void, ConfigError> validate_registry(const std::string& name, std::uint32_t shards,
                                              Nanos idle_ttl, std::uint32_t evict_batch);
}  // namespace detail

// Checks every field; the error names the first one that is wrong (breaker fields are
// checked by bulwark::validate(typename Breaker::Config)).
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
  return detail::validate_for<Breaker>(o.breaker);
}

// Memory a registry uses, by part. Bytes.
struct RegistryMemory {
  std::size_t entries = 0;      // entry storage handed out so far (live + free for reuse)
  std::size_t index = 0;        // hash tables, including replaced ones kept for readers
  std::size_t metrics = 0;      // BreakerMetrics blocks (detailed_metrics)
  std::size_t key_heap = 0;     // heap memory owned by keys (long strings)
  std::size_t bookkeeping = 0;  // shards, free lists
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
  using Policy = policy_of<Breaker>;
  using Options = RegistryOptions<Key, Breaker, Extra>;
  using Permit = typename decltype(std::declval<Breaker&>().try_acquire())::value_type;
  using Rejection = typename decltype(std::declval<Breaker&>().try_acquire())::error_type;

 private:
  struct Entry;

 public:
  class Call;

  // A counted reference to one key's entry: while it exists, the entry is neither
  // evicted nor reused. Copying takes another reference (one atomic add); moving is
  // free. An empty Handle (default-constructed, moved-from, or a find() that missed)
  // tests false.
  class Handle {
   public:
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

    Breaker& breaker() const noexcept { return entry_->breaker(); }
    Breaker* operator->() const noexcept { return &entry_->breaker(); }
    Breaker& operator*() const noexcept { return entry_->breaker(); }
    const Key& key() const noexcept { return entry_->key(); }
    Extra& extra() const noexcept requires(!std::is_same_v<Extra, NoExtra>) {
      return entry_->extra();
    }
    // The key's BreakerMetrics block, or nullptr without detailed_metrics. Pipelines
    // and integrations count fallbacks, retries and bulkhead use here.
    BreakerMetrics* metrics() const noexcept { return entry_->metrics; }
    // A number unique to this entry's life in this registry: if a later lookup of the
    // same key returns another one, the key was evicted and created again.
    std::uint64_t incarnation() const noexcept { return entry_->incarnation; }

    // A pipeline fallback stage's observer (fallback.h): `fallback(f).counted_by(handle)`
    // counts each answer in the key's metrics block (with detailed_metrics) and emits a
    // `fallback` event with the key to events(). The handle must outlive the stage's use.
    void on_fallback(bool rejected, Reason reason) const noexcept {
      registry_->fallback_answered(entry_, rejected, reason);
    }

    // Asks the breaker for a permit. The Call holds its own reference (one more
    // atomic add); `std::move(handle).try_acquire()` hands this one over instead.
    Expected<Call, Rejection> try_acquire() const& { return registry_->acquire_on(Handle(*this)); }
    Expected<Call, Rejection> try_acquire() && { return registry_->acquire_on(std::move(*this)); }

   private:
    friend class BasicRegistry;
    Handle(BasicRegistry* r, Entry* e) noexcept : registry_(r), entry_(e) {}
    BasicRegistry* registry_ = nullptr;
    Entry* entry_ = nullptr;
  };

  // One admitted call: the breaker's permit and a reference to its entry, released in
  // that order. Report the outcome with record(); a duration feeds the latency
  // histogram (detailed_metrics) and the breaker's slow-call rules. Only calls reported
  // with a non-zero duration reach the histogram: a breaker that judges slowness
  // measures calls reported without one for its own rules, but that measurement is not
  // seen here. Destroyed without an outcome, the permit counts as cancelled. Move-only.
  class [[nodiscard]] Call {
   public:
    Call(Call&&) noexcept = default;
    Call& operator=(Call&& o) noexcept {
      permit_ = std::move(o.permit_);  // resolves our permit while our entry is still pinned
      handle_ = std::move(o.handle_);
      return *this;
    }

    // Reports the outcome; only the first report counts. No allocation, no lock.
    // `duration` (how long the call took) feeds the latency histogram; zero means "not
    // timed": the histogram skips the call.
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

  // What for_each() shows of one entry. Valid during the callback only.
  struct EntryView {
    const Key& key;
    const Breaker& breaker;
    const BreakerMetrics* metrics;  // nullptr without detailed_metrics
    // nullptr when Extra is NoExtra. Not const: reading a component may update lazily
    // kept state (RetryBudget::snapshot() accrues its floor), which components allow
    // from any thread.
    Extra* extra;
    Ticks outage_since;  // when it left CLOSED, or detail::kNoOutage
    std::uint64_t incarnation;
  };

  // Validates `options` (throws InvalidConfig naming the field). A stateful clock
  // (ManualClock) must be passed and must outlive the registry.
  explicit BasicRegistry(Options options) requires std::is_empty_v<clock_type>
      : BasicRegistry(std::move(options), detail::ClockRef<clock_type>()) {}
  BasicRegistry(Options options, const clock_type& clock)
      : BasicRegistry(std::move(options), detail::ClockRef<clock_type>(clock)) {}
  BasicRegistry(Options, const clock_type&&) = delete;
  BasicRegistry(const BasicRegistry&) = delete;
  BasicRegistry& operator=(const BasicRegistry&) = delete;

  // Every Handle and Call must be gone. Removes the registry's listeners.
  ~BasicRegistry() {
    router_->target.store(nullptr, std::memory_order_release);
    shared_policy_.remove_listener(shared_listener_);
    for (std::uint32_t si = 0; si <= shard_mask_; ++si) {
      Shard& s = shards_[si];
      const std::uint32_t n = s.allocated.load(std::memory_order_acquire);
      for (std::uint32_t i = 0; i < n; ++i) {
        Entry* e = entry_at(s, i);
        if ((e->refs.load(std::memory_order_acquire) & kDead) == 0) destroy_payload(e);
        if (e->metrics != nullptr) std::destroy_at(e->metrics);
      }
      for (std::size_t k = 0; k < kMaxSegments; ++k) {
        if (Entry* seg = s.segments[k].load(std::memory_order_relaxed); seg != nullptr) {
#if defined(BULWARK_REGISTRY_ASAN)
          ASAN_UNPOISON_MEMORY_REGION(seg, segment_size(k) * sizeof(Entry));
#endif
          ::operator delete (seg, std::align_val_t{alignof(Entry)});
        }
        if (BreakerMetrics* m = s.metric_segments[k]; m != nullptr) {
          ::operator delete (m, std::align_val_t{alignof(BreakerMetrics)});
        }
      }
    }
  }

  // Returns the key's entry, creating it if needed. `key` may be any type Hash and Eq
  // accept (a std::string_view for std::string keys); Key is built from it only when
  // the key is created. Lock-free when the key exists (see Cost above); on a miss,
  // creates it under the shard's mutex. Throws what config_for / extra_for throw, or
  // InvalidConfig for an invalid per-key configuration.
  template <class K>
  Handle get(const K& key) {
    const std::uint64_t h = hash_of(key);
    Shard& s = shard_for(h);
    if (Entry* e = find_pinned(s, h, key); e != nullptr) {
      maybe_sweep(s);
      return Handle(this, e);
    }
    return Handle(this, create(s, h, key));
  }

  // Returns the key's entry if it exists, else an empty Handle. Never creates; counts
  // as a use of the key. Lock-free, like get().
  template <class K>
  Handle find(const K& key) {
    const std::uint64_t h = hash_of(key);
    Shard& s = shard_for(h);
    for (int attempt = 0; attempt < 2; ++attempt) {
      const std::uint64_t seq = s.seq.load(std::memory_order_acquire);
      if (Entry* e = find_pinned(s, h, key); e != nullptr) return Handle(this, e);
      // No eviction moved table slots while we probed: the miss is real. (If the probe
      // saw a slot an eviction moved or cleared, its acquire load synchronised with
      // that release store, which the odd `seq` store precedes: we read seq != seq.)
      if ((seq & 1) == 0 && s.seq.load(std::memory_order_acquire) == seq) return Handle();
    }
    std::lock_guard lock(s.mu);
    Entry* e = find_pinned(s, h, key);
    return e != nullptr ? Handle(this, e) : Handle();
  }

  // get(key) and the breaker's try_acquire() in one step: the Call keeps the entry
  // alive until the call is resolved. No allocation or lock when the key exists.
  template <class K>
  Expected<Call, Rejection> try_acquire(const K& key) {
    return acquire_on(get(key));
  }

  // Removes the key now, whatever its breaker's state, unless a Handle or Call for it
  // is alive. Returns true if it was removed. Its counters are folded into the
  // registry's totals. (Resilience4j's registry.remove(name).) Needs a registry whose
  // entries count references (idle_ttl or `removable`); returns false otherwise.
  template <class K>
  bool remove(const K& key) {
    if (!counted_) return false;  // see RegistryOptions::removable
    const std::uint64_t h = hash_of(key);
    Shard& s = shard_for(h);
    std::vector<Evicted> gone;
    bool removed = false;
    {
      std::lock_guard lock(s.mu);
      Table& t = *s.current;
      const std::uint32_t tag = static_cast<std::uint32_t>(h >> 32);
      for (std::size_t i = tag & t.mask, n = 0; n <= t.mask; ++n, i = (i + 1) & t.mask) {
        const std::uint64_t v = t.slots[i].load(std::memory_order_relaxed);
        if (v == 0) break;
        if (static_cast<std::uint32_t>(v >> 32) != tag) continue;
        Entry* e = entry_at(s, static_cast<std::uint32_t>(v) - 1);
        if (!key_equal(e->key(), key)) continue;
        std::uint64_t w = e->refs.load(std::memory_order_relaxed);
        if ((w >> kRefShift) != 0 ||
            !e->refs.compare_exchange_strong(w, w | kDead, std::memory_order_acquire))
          break;
        retire(s, t, i, static_cast<std::uint32_t>(v) - 1,
               now_units(coarse_now_ticks(clock_.get())), gone);
        removed = true;
        break;
      }
    }
    announce_evicted(gone);
    return removed;
  }

  // Runs eviction steps on every shard, examining about `max_slots` table slots in all
  // (split evenly, at least one per shard; 0: every slot once). Returns how many keys
  // were evicted. For callers that want memory back without waiting for traffic (say,
  // after a scrape). No-op without idle_ttl.
  std::size_t evict_idle(std::size_t max_slots = 0) {
    if (ttl_units_ == 0) return 0;
    const Ticks now = coarse_now_ticks(clock_.get());
    std::size_t evicted = 0;
    const std::size_t per_shard =
        max_slots == 0 ? 0 : std::max<std::size_t>(1, max_slots / (shard_mask_ + 1));
    for (std::uint32_t si = 0; si <= shard_mask_; ++si) {
      Shard& s = shards_[si];
      std::vector<Evicted> gone;
      {
        std::lock_guard lock(s.mu);
        const std::size_t budget = per_shard == 0 ? s.current->mask + 1 : per_shard;
        evicted += sweep(s, now, budget, gone);
      }
      announce_evicted(gone);
    }
    return evicted;
  }

  // Calls f(const EntryView&) for every live entry, each pinned (so it can't be
  // evicted) during its call; no lock is held while f runs. Entries created or
  // evicted during the walk may or may not be visited. Does not reset idle times.
  // Cost: one CAS and one atomic subtract per entry.
  template <class F>
  void for_each(F&& f) const {
    for (std::uint32_t si = 0; si <= shard_mask_; ++si) {
      Shard& s = shards_[si];
      const std::uint32_t n = s.allocated.load(std::memory_order_acquire);
      for (std::uint32_t i = 0; i < n; ++i) {
        Entry* e = entry_at(s, i);
        if (!pin(e, /*use=*/false)) continue;
        Extra* extra = nullptr;
        if constexpr (!std::is_same_v<Extra, NoExtra>) extra = &e->extra();
        f(EntryView{e->key(), e->breaker(), e->metrics, extra,
                    e->outage_since.load(std::memory_order_relaxed), e->incarnation});
        unpin(e);
      }
    }
  }

  // Walks every entry once, calling per_entry(view, breaker_reading) for each, and
  // returns the registry's totals: live entries plus the folded counters of evicted
  // ones. What a scrape uses. Each shard is walked under its mutex, and its evicted
  // totals are read in the same critical section: eviction folds and unlinks under that
  // mutex too, so no key is counted twice (live and evicted) or not at all, and the
  // totals of successive reads never decrease. Lookups go on meanwhile (they take no
  // lock); creation and eviction in the shard being walked wait for it. per_entry
  // therefore runs with a shard mutex held: it must not create, remove or evict keys of
  // this registry (reading the view's breaker, metrics and extra is what it is for).
  template <class F>
  RegistryReading collect(F&& per_entry) const {
    RegistryReading total;
    total.name = name_;
    total.has_detail = detailed_;
    const Ticks now = now_ticks(clock_.get());
    std::size_t key_heap = 0;
    for (std::uint32_t si = 0; si <= shard_mask_; ++si) {
      Shard& s = shards_[si];
      std::lock_guard lock(s.mu);
      const std::uint32_t n = s.allocated.load(std::memory_order_relaxed);
      for (std::uint32_t i = 0; i < n; ++i) {
        Entry* e = entry_at(s, i);
        // Under s.mu an entry is live exactly when it is not dead: publication and
        // eviction both happen under it. No pin needed (and none that would look like use).
        if ((e->refs.load(std::memory_order_acquire) & kDead) != 0) continue;
        Extra* extra = nullptr;
        if constexpr (!std::is_same_v<Extra, NoExtra>) extra = &e->extra();
        const EntryView v{e->key(),
                          e->breaker(),
                          e->metrics,
                          extra,
                          e->outage_since.load(std::memory_order_relaxed),
                          e->incarnation};
        const BreakerReading b = read_breaker(v.breaker);
        total.add(b);
        ++total.keys;
        total.breakers_by_state[static_cast<std::size_t>(b.state)] += 1;
        total.max_open_seconds =
            std::max(total.max_open_seconds, detail::outage_seconds(b, v.outage_since, now));
        if (v.metrics != nullptr) {
          total.latency.add(v.metrics->latency.read());
          v.metrics->components.read_into(total.components);
        }
        if constexpr (kExtraReports) {
          if (v.extra != nullptr) v.extra->read_metrics(total.components);
        }
        key_heap += key_heap_bytes(v.key);
        per_entry(v, b);
      }
      total.add(s.gone);
      total.latency.add(s.gone_latency);
      total.components.merge(s.gone_components);
      total.created += s.created.load(std::memory_order_relaxed);
      total.evicted += s.evicted.load(std::memory_order_relaxed);
    }
    total.transitions = transitions_.read();
    RegistryMemory m = memory_without_keys();
    m.key_heap = key_heap;
    total.memory_bytes = m.total();
    return total;
  }
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

  // What the registry occupies, by part (key heap memory needs a walk over the keys).
  RegistryMemory memory() const {
    RegistryMemory m = memory_without_keys();
    for_each([&](const EntryView& v) { m.key_heap += key_heap_bytes(v.key); });
    return m;
  }

  // Transitions, rejections, key creation and eviction of every breaker in the
  // registry, with the key. See observe.h.
  EventHub& events() noexcept { return events_; }

  const std::string& name() const noexcept { return name_; }
  clock_type clock() const noexcept requires std::is_empty_v<clock_type> { return clock_.get(); }
  const clock_type& clock() const noexcept requires(!std::is_empty_v<clock_type>) {
    return clock_.get();
  }
  bool detailed_metrics() const noexcept { return detailed_; }
  Nanos idle_ttl() const noexcept { return idle_ttl_; }

  // Bytes of one entry, for capacity planning (128 for std::string keys).
  static constexpr std::size_t kEntryBytes = sizeof(Entry);

 private:
  // The per-key Extra reports its components' counters (read_metrics).
  static constexpr bool kExtraReports = requires(Extra & x, ComponentReading& r) {
    x.read_metrics(r);
  };

  // ---- entries -----------------------------------------------------------------

  static constexpr std::size_t round8(std::size_t n) { return (n + 7) / 8 * 8; }

  struct NoStorage {};
  template <class T>
  struct alignas(alignof(T) > 8 ? alignof(T) : 8) Storage {
    unsigned char bytes[round8(sizeof(T))];
  };
  using ExtraStorage =
      std::conditional_t<std::is_same_v<Extra, NoExtra>, NoStorage, Storage<Extra>>;

  // refs: [ count : 23 | dead : 1 | used : 1 | idle since : 39 ]. `used` is set by every
  // lookup (in the CAS that pins) and cleared by eviction steps, which then restart
  // `idle since` (~1 ms units: ticks >> 20); see the header comment.
  static constexpr unsigned kUnitShift = 20;
  static constexpr unsigned kRefShift = 41;
  static constexpr std::uint64_t kTimeMask = (std::uint64_t{1} << 39) - 1;
  static constexpr std::uint64_t kUsed = std::uint64_t{1} << 39;
  static constexpr std::uint64_t kDead = std::uint64_t{1} << 40;
  // A lookup checks whether an eviction step is due once every this many lookups (per
  // thread): the clock is read there, not on every lookup.
  static constexpr std::uint32_t kLookupsPerStepCheck = 64;
  static constexpr std::uint64_t kOneRef = std::uint64_t{1} << kRefShift;
  static constexpr std::uint64_t kMaxRefs = (std::uint64_t{1} << (64 - kRefShift)) - 1;

  // The breaker comes first: its address is the entry's. The header (refs .. incarnation)
  // lives as long as the registry; the payload (breaker, key, extra) only while the
  // entry is live, and is poisoned for AddressSanitizer while it is not.
  struct alignas(64) Entry {
    alignas(Breaker) unsigned char breaker_bytes[sizeof(Breaker)];
    std::atomic<std::uint64_t> refs{kDead};
    std::atomic<Ticks> outage_since{detail::kNoOutage};
    BreakerMetrics* metrics = nullptr;
    std::uint64_t incarnation = 0;
    Storage<Key> key_bytes;
    [[no_unique_address]] ExtraStorage extra_bytes;

    Breaker& breaker() noexcept { return *std::launder(reinterpret_cast<Breaker*>(breaker_bytes)); }
    const Key& key() noexcept { return *std::launder(reinterpret_cast<Key*>(key_bytes.bytes)); }
    Extra& extra() noexcept requires(!std::is_same_v<Extra, NoExtra>) {
      return *std::launder(reinterpret_cast<Extra*>(extra_bytes.bytes));
    }
  };

  // ---- shards --------------------------------------------------------------------

  struct Table {
    explicit Table(std::size_t capacity)
        : mask(capacity - 1), slots(new std::atomic<std::uint64_t>[capacity]()) {}
    std::size_t mask;
    std::unique_ptr<std::atomic<std::uint64_t>[]> slots;  // 0: empty; else tag << 32 | (index + 1)
  };

  static constexpr std::size_t kFirstSegmentBits = 3;  // segment k holds 8 << k entries
  static constexpr std::size_t kMaxSegments = 29;      // 8 * (2^29 - 1) > 2^32 entries
  static constexpr std::size_t kInitialSlots = 8;
  static constexpr std::size_t segment_size(std::size_t k) {
    return std::size_t{1} << (k + kFirstSegmentBits);
  }
  static constexpr std::size_t segment_base(std::size_t k) {
    return ((std::size_t{1} << k) - 1) << kFirstSegmentBits;
  }

  struct Evicted {
    std::string name;
    std::string key;
    Nanos idle;
  };

  struct alignas(64) Shard {
    // Read by every lookup; written only when the table grows or a segment is added.
    std::atomic<Table*> table{nullptr};
    std::array<std::atomic<Entry*>, kMaxSegments> segments{};
    // BreakerMetrics blocks (detailed_metrics), in segments parallel to the entries':
    // no allocation (and no allocator overhead) per key. Written under mu.
    std::array<BreakerMetrics*, kMaxSegments> metric_segments{};
    std::atomic<Ticks> next_sweep{kTicksMin};
    std::atomic<std::uint64_t> seq{0};  // odd while an eviction moves slots (find())

    // Written under mu (atomics where readers look without it).
    alignas(64) mutable std::mutex mu;
    std::atomic<std::uint32_t> allocated{0};  // entries handed out: for_each's bound
    std::atomic<std::uint64_t> live{0};
    std::atomic<std::uint64_t> created{0};
    std::atomic<std::uint64_t> evicted{0};
    std::unique_ptr<Table> current;
    std::vector<std::unique_ptr<Table>> retired;  // replaced tables a reader may still probe
    std::size_t retired_slots = 0;
    std::size_t used = 0;    // occupied slots of `current`
    std::size_t cursor = 0;  // where the next eviction step looks
    std::vector<std::uint32_t> free;
    std::size_t metrics_blocks = 0;
    // Counters of evicted entries, so registry totals never go down.
    BreakerReading gone;
    HistogramReading gone_latency;
    ComponentReading gone_components;
  };

  // Forwards the breakers' transitions to the registry while it lives. Listeners hold
  // it by shared_ptr: a policy copied out of the registry (breaker.policy()) may
  // outlive it, and its listener then finds nullptr here.
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
        idle_ttl_(o.idle_ttl),
        ttl_units_(o.idle_ttl > Nanos::zero() ? (static_cast<std::uint64_t>(o.idle_ttl.count()) +
                                                 (1u << kUnitShift) - 1) >>
                                                    kUnitShift
                                              : 0),
        sweep_interval_(std::max<Ticks>(o.idle_ttl.count() / 8, Ticks{1} << kUnitShift)),
        evict_batch_(o.evict_batch),
        detailed_(o.detailed_metrics),
        counted_(o.idle_ttl > Nanos::zero() || o.removable) {
    router_->target.store(this, std::memory_order_release);
    shared_listener_ = hook(shared_policy_);
    for (std::uint32_t si = 0; si <= shard_mask_; ++si) {
      Shard& s = shards_[si];
      s.current = std::make_unique<Table>(kInitialSlots);
      s.table.store(s.current.get(), std::memory_order_release);
    }
  }

  static std::string checked(const Options& o) {
    if (auto ok = validate(o); !ok) detail::raise_config_error(std::move(ok).error());
    return o.name;
  }

  Policy make_policy(typename Breaker::Config config) const {
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
    // fmix64 (MurmurHash3's finaliser): std::hash is the identity for integers, and
    // the shard, the slot and the tag all need well-mixed bits.
    std::uint64_t h = static_cast<std::uint64_t>(hash_(key));
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
  }
  Shard& shard_for(std::uint64_t h) const noexcept { return shards_[h & shard_mask_]; }

  static Entry* entry_at(const Shard& s, std::uint32_t index) noexcept {
    const std::size_t k = static_cast<std::size_t>(std::bit_width(
                              (static_cast<std::size_t>(index) >> kFirstSegmentBits) + 1)) -
                          1;
    return s.segments[k].load(std::memory_order_acquire) + (index - segment_base(k));
  }

  static std::uint64_t now_units(Ticks t) noexcept {
    return (static_cast<std::uint64_t>(t) >> kUnitShift) & kTimeMask;
  }

  // ---- pinning ---------------------------------------------------------------------

  // Takes a reference unless the entry is dead (being evicted, free, or not yet made).
  // Without reference counting, entries only die before they are published (a lost
  // creation race), so a live-looking entry is simply used.
  // `use` marks the entry used (a lookup); walks (for_each, scrapes) don't.
  bool pin(Entry* e, bool use = true) const noexcept {
    if (!counted_) return (e->refs.load(std::memory_order_acquire) & kDead) == 0;
    std::uint64_t w = e->refs.load(std::memory_order_relaxed);
    for (;;) {
      if ((w & kDead) != 0) return false;
      if ((w >> kRefShift) == kMaxRefs) overflow();
      if (e->refs.compare_exchange_weak(w, (w + kOneRef) | (use ? kUsed : 0),
                                        std::memory_order_acquire, std::memory_order_relaxed)) {
        return true;
      }
    }
  }
  [[noreturn]] static void overflow() noexcept {
    // 8 million live handles to one key is a leak, not a workload.
    std::abort();
  }
  void retain(Entry* e) const noexcept {
    if (counted_) e->refs.fetch_add(kOneRef, std::memory_order_relaxed);
  }
  void unpin(Entry* e) const noexcept {
    if (counted_) e->refs.fetch_sub(kOneRef, std::memory_order_release);
  }

  // ---- lookup ----------------------------------------------------------------------

  template <class K>
  Entry* find_pinned(const Shard& s, std::uint64_t h, const K& key) const noexcept {
    const Table* t = s.table.load(std::memory_order_acquire);
    const std::uint32_t tag = static_cast<std::uint32_t>(h >> 32);
    std::size_t i = tag & t->mask;
    for (std::size_t n = 0; n <= t->mask; ++n, i = (i + 1) & t->mask) {
      const std::uint64_t v = t->slots[i].load(std::memory_order_acquire);
      if (v == 0) return nullptr;
      if (static_cast<std::uint32_t>(v >> 32) != tag) continue;
      Entry* e = entry_at(s, static_cast<std::uint32_t>(v) - 1);
      // The breaker's line is needed next: fetch it while the key is compared.
      __builtin_prefetch(e->breaker_bytes);
      if (!counted_) {
        // Entries never die once published: the slot's acquire load made it visible.
        if (key_equal(e->key(), key)) return e;
        continue;
      }
      if (!pin(e)) continue;  // being evicted, or a stale slot of a reused entry
      if (key_equal(e->key(), key)) return e;
      unpin(e);
    }
    return nullptr;
  }

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

  Expected<Call, Rejection> acquire_on(Handle h) {
    auto permit = h.breaker().try_acquire();
    if (!permit) {
      if (events_.wants(EventKind::rejection)) emit_rejection(h, permit.error());
      return Unexpected(permit.error());
    }
    return Call(std::move(h), std::move(*permit));
  }

  // ---- creation --------------------------------------------------------------------

  template <class K>
  Entry* create(Shard& s, std::uint64_t h, const K& key) {
    Key owned(key);
    // User code first, with no lock held: it may even call back into the registry.
    std::optional<Policy> own_policy;
    if (config_for_) {
      if (std::optional<typename Breaker::Config> cfg = config_for_(owned); cfg.has_value()) {
        if (auto ok = detail::validate_for<Breaker>(*cfg); !ok) {
          detail::raise_config_error(std::move(ok).error());
        }
        own_policy.emplace(make_policy(std::move(*cfg)));
        hook(*own_policy);
      }
    }
    std::uint32_t index = 0;
    Entry* e = nullptr;
    {
      std::lock_guard lock(s.mu);
      if (Entry* found = find_pinned(s, h, owned); found != nullptr) {
        return found;
      }
      index = allocate(s);
      e = entry_at(s, index);
    }
    construct_payload(s, e, std::move(owned), own_policy.has_value() ? *own_policy : shared_policy_,
                      index);
    // Read after the user's callbacks ran, so a slow config_for can't make the key look
    // idle from birth; also the time of its key_created event.
    const bool announced = events_.wants(EventKind::key_created);
    const Ticks now = ttl_units_ != 0 || announced ? coarse_now_ticks(clock_.get()) : 0;
    std::vector<Evicted> gone;
    Entry* result = e;
    {
      std::lock_guard lock(s.mu);
      if (Entry* found = find_pinned(s, h, key); found != nullptr) {
        // Another thread created the key while we built ours: theirs wins.
        destroy_payload(e);
        s.free.push_back(index);
        result = found;
      } else {
        e->incarnation =
            (s.created.fetch_add(1, std::memory_order_relaxed) + 1) * (shard_mask_ + 1) +
            static_cast<std::uint64_t>(&s - &shards_[0]);
        // Published with one reference (the caller's): the payload above is visible to
        // any thread whose pin reads this value.
        e->refs.store((counted_ ? kOneRef : 0) | now_units(now), std::memory_order_release);
        insert(s, static_cast<std::uint32_t>(h >> 32), index);
        s.live.fetch_add(1, std::memory_order_relaxed);
        if (ttl_units_ != 0) sweep(s, now, evict_batch_, gone);
      }
    }
    announce_evicted(gone);
    if (result == e && announced) emit_key(EventKind::key_created, e, now, Nanos::zero());
    return result;
  }

  // An entry to fill (dead, not in the table). Under s.mu.
  std::uint32_t allocate(Shard& s) {
    if (!s.free.empty()) {
      const std::uint32_t index = s.free.back();
      s.free.pop_back();
      return index;
    }
    const std::uint32_t index = s.allocated.load(std::memory_order_relaxed);
    if (index == std::numeric_limits<std::uint32_t>::max() - 1) throw_length();
    const std::size_t k = static_cast<std::size_t>(std::bit_width(
                              (static_cast<std::size_t>(index) >> kFirstSegmentBits) + 1)) -
                          1;
    if (s.segments[k].load(std::memory_order_relaxed) == nullptr) {
      void* raw =
          ::operator new (segment_size(k) * sizeof(Entry), std::align_val_t{alignof(Entry)});
      s.segments[k].store(static_cast<Entry*>(raw), std::memory_order_release);
    }
    Entry* e = entry_at(s, index);
    ::new (static_cast<void*>(e)) Entry;
#if defined(BULWARK_REGISTRY_ASAN)
    poison(e);
#endif
    if (detailed_) {
      if (s.metric_segments[k] == nullptr) {
        s.metric_segments[k] = static_cast<BreakerMetrics*>(::operator new (
            segment_size(k) * sizeof(BreakerMetrics), std::align_val_t{alignof(BreakerMetrics)}));
      }
      e->metrics = ::new (static_cast<void*>(s.metric_segments[k] + (index - segment_base(k))))
          BreakerMetrics;
      ++s.metrics_blocks;
    }
    s.allocated.store(index + 1, std::memory_order_release);
    return index;
  }
  [[noreturn]] static void throw_length() {
#if defined(__cpp_exceptions)
    throw std::length_error("bulwark registry: more than 2^32 - 2 keys in one shard");
#else
    std::abort();
#endif
  }

  // Builds the entry's payload (breaker, key, extra: the extra runs user code, and a
  // breaker may refuse its policy). If anything throws, what was built is destroyed
  // and the entry goes back to the free list.
  void construct_payload(Shard& s, Entry* e, Key&& key, const Policy& policy, std::uint32_t index) {
#if defined(BULWARK_REGISTRY_ASAN)
    unpoison(e);
#endif
    int built = 0;  // breaker, key
#if defined(__cpp_exceptions)
    try {
#endif
      ::new (static_cast<void*>(e->breaker_bytes)) Breaker(policy);
      built = 1;
      ::new (static_cast<void*>(e->key_bytes.bytes)) Key(std::move(key));
      built = 2;
      if constexpr (!std::is_same_v<Extra, NoExtra>) {
        if (extra_for_) {
          ::new (static_cast<void*>(e->extra_bytes.bytes)) Extra(extra_for_(e->key()));
        } else if constexpr (std::is_constructible_v<Extra, const Key&>) {
          ::new (static_cast<void*>(e->extra_bytes.bytes)) Extra(e->key());
        } else if constexpr (std::is_default_constructible_v<Extra>) {
          ::new (static_cast<void*>(e->extra_bytes.bytes)) Extra();
        }
        attach_bulkheads(e);
      }
#if defined(__cpp_exceptions)
    } catch (...) {
      if (built == 2) std::destroy_at(&e->key());
      if (built >= 1) e->breaker().~Breaker();
#if defined(BULWARK_REGISTRY_ASAN)
      poison(e);
#endif
      std::lock_guard lock(s.mu);
      s.free.push_back(index);
      throw;
    }
#endif
    e->outage_since.store(detail::kNoOutage, std::memory_order_relaxed);
    if (e->metrics != nullptr) e->metrics->reset();
    (void)s;
    (void)index;
    (void)built;
  }

  void destroy_payload(Entry* e) noexcept {
    if constexpr (!std::is_same_v<Extra, NoExtra>) std::destroy_at(&e->extra());
    std::destroy_at(&e->key());
    e->breaker().~Breaker();
#if defined(BULWARK_REGISTRY_ASAN)
    poison(e);
#endif
  }

#if defined(BULWARK_REGISTRY_ASAN)
  // A Handle that outlived its reference would touch a dead payload: make that an
  // AddressSanitizer report instead of a silent read of a reused entry.
  static void poison(Entry* e) noexcept {
    ASAN_POISON_MEMORY_REGION(e->breaker_bytes, sizeof(e->breaker_bytes));
    ASAN_POISON_MEMORY_REGION(&e->key_bytes, sizeof(e->key_bytes));
    if constexpr (!std::is_same_v<Extra, NoExtra>)
      ASAN_POISON_MEMORY_REGION(&e->extra_bytes, sizeof(e->extra_bytes));
  }
  static void unpoison(Entry* e) noexcept {
    ASAN_UNPOISON_MEMORY_REGION(e->breaker_bytes, sizeof(e->breaker_bytes));
    ASAN_UNPOISON_MEMORY_REGION(&e->key_bytes, sizeof(e->key_bytes));
    if constexpr (!std::is_same_v<Extra, NoExtra>)
      ASAN_UNPOISON_MEMORY_REGION(&e->extra_bytes, sizeof(e->extra_bytes));
  }
#endif

  // ---- the table (under s.mu) --------------------------------------------------------

  void insert(Shard& s, std::uint32_t tag, std::uint32_t index) {
    if ((s.used + 1) * 4 > (s.current->mask + 1) * 3) grow(s);
    Table& t = *s.current;
    std::size_t i = tag & t.mask;
    while (t.slots[i].load(std::memory_order_relaxed) != 0) i = (i + 1) & t.mask;
    t.slots[i].store((std::uint64_t{tag} << 32) | (std::uint64_t{index} + 1),
                     std::memory_order_release);
    ++s.used;
  }

  void grow(Shard& s) {
    auto next = std::make_unique<Table>((s.current->mask + 1) * 2);
    const Table& old = *s.current;
    for (std::size_t j = 0; j <= old.mask; ++j) {
      const std::uint64_t v = old.slots[j].load(std::memory_order_relaxed);
      if (v == 0) continue;
      std::size_t i = (v >> 32) & next->mask;
      while (next->slots[i].load(std::memory_order_relaxed) != 0) i = (i + 1) & next->mask;
      next->slots[i].store(v, std::memory_order_relaxed);
    }
    // Readers that load the new table see every slot written above.
    s.table.store(next.get(), std::memory_order_release);
    s.retired_slots += s.current->mask + 1;
    s.retired.push_back(std::move(s.current));
    s.current = std::move(next);
  }

  // Empties slot i, moving later members of its cluster back (linear probing needs no
  // tombstones this way). A concurrent reader may miss a moved key for an instant:
  // get() then creates under the mutex (and finds it there); find() retries (seq).
  static void erase_slot(Table& t, std::size_t i) noexcept {
    std::size_t hole = i;
    for (std::size_t j = (i + 1) & t.mask;; j = (j + 1) & t.mask) {
      const std::uint64_t v = t.slots[j].load(std::memory_order_relaxed);
      if (v == 0) break;
      const std::size_t home = (v >> 32) & t.mask;
      const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (!stays) {
        t.slots[hole].store(v, std::memory_order_release);
        hole = j;
      }
    }
    t.slots[hole].store(0, std::memory_order_release);
  }

  // ---- eviction ----------------------------------------------------------------------

  // On the lookup path: every kLookupsPerStepCheck lookups of this thread, read the
  // clock and, if this shard's next step is due and nobody is at it, take one.
  void maybe_sweep(Shard& s) {
    if (ttl_units_ == 0) return;
    static thread_local std::uint32_t lookups = 0;
    if (++lookups % kLookupsPerStepCheck != 0) return;
    const Ticks now = coarse_now_ticks(clock_.get());
    if (now < s.next_sweep.load(std::memory_order_relaxed)) return;
    std::vector<Evicted> gone;
    {
      std::unique_lock lock(s.mu, std::try_to_lock);
      if (!lock.owns_lock()) return;  // someone else is at it: never wait on the request path
      s.next_sweep.store(saturating_add(now, sweep_interval_), std::memory_order_relaxed);
      sweep(s, now, evict_batch_, gone);
    }
    announce_evicted(gone);
  }

  // One bounded eviction step: moves the shard's cursor over up to `budget` slots and
  // evicts at most `budget` entries, so a step costs at most 2 x budget slot visits.
  // Under s.mu.
  std::size_t sweep(Shard& s, Ticks now, std::size_t budget, std::vector<Evicted>& gone) {
    Table& t = *s.current;
    const std::uint64_t u = now_units(now);
    std::size_t evicted = 0;
    for (std::size_t advanced = 0; advanced < budget && s.used > 0;) {
      const std::size_t i = s.cursor & t.mask;
      const std::uint64_t v = t.slots[i].load(std::memory_order_relaxed);
      if (v != 0 && evicted < budget) {
        const std::uint32_t index = static_cast<std::uint32_t>(v) - 1;
        if (try_mark_evicted(entry_at(s, index), u)) {
          retire(s, t, i, index, u, gone);
          ++evicted;
          continue;  // slot i may now hold a moved entry: look at it again
        }
      }
      s.cursor = i + 1;
      ++advanced;
    }
    return evicted;
  }

  // Marks an idle, unreferenced, CLOSED entry dead so no lookup can pin it again. An
  // entry used since the last step, or referenced now, is not idle: its idle time
  // starts again now (the second chance of the CLOCK algorithm).
  bool try_mark_evicted(Entry* e, std::uint64_t now_u) noexcept {
    std::uint64_t w = e->refs.load(std::memory_order_relaxed);
    if ((w & kDead) != 0) return false;
    if ((w & kUsed) != 0 || (w >> kRefShift) != 0) {
      // If the CAS loses to a lookup, the entry was just used anyway: next step.
      e->refs.compare_exchange_strong(w, (w & ~(kUsed | kTimeMask)) | now_u,
                                      std::memory_order_relaxed);
      return false;
    }
    // Idle units since then (mod 2^39, ~17 years). "+1" because both ends are rounded
    // down to a unit: we never evict a key idle for less than idle_ttl.
    const std::uint64_t idle = (now_u - (w & kTimeMask)) & kTimeMask;
    if (idle < ttl_units_ + 1) return false;
    if (e->breaker().state() != State::closed) return false;
    if (!e->refs.compare_exchange_strong(w, w | kDead, std::memory_order_acquire,
                                         std::memory_order_relaxed)) {
      return false;  // someone pinned it just now
    }
    // Nobody holds it, so nobody can change its state now; look once more in case a
    // holder changed it just before letting go.
    if (e->breaker().state() != State::closed) {
      e->refs.store(w, std::memory_order_release);
      return false;
    }
    return true;
  }

  // Takes a dead entry out of slot i, folds its counters into the shard's totals,
  // destroys its payload and frees it for reuse. Under s.mu.
  void retire(Shard& s, Table& t, std::size_t i, std::uint32_t index, std::uint64_t now_u,
              std::vector<Evicted>& gone) {
    Entry* e = entry_at(s, index);
    const std::uint64_t seq = s.seq.load(std::memory_order_relaxed);
    s.seq.store(seq + 1, std::memory_order_relaxed);  // ordered by erase_slot's release stores
    erase_slot(t, i);
    s.seq.store(seq + 2, std::memory_order_release);
    --s.used;

    // Every counter a scrape reads from a live entry goes to the shard's totals, in this
    // critical section: collect() reads those under the same mutex.
    fold(s.gone, read_breaker(e->breaker()));
    if (e->metrics != nullptr) {
      s.gone_latency.add(e->metrics->latency.read());
      ComponentReading c;
      e->metrics->components.read_into(c);
      s.gone_components.merge_counters(c);
    }
    if constexpr (kExtraReports) {
      ComponentReading c;
      e->extra().read_metrics(c);
      s.gone_components.merge_counters(c);
    }
    if (events_.wants(EventKind::key_evicted)) {
      const std::uint64_t last = e->refs.load(std::memory_order_relaxed) & kTimeMask;
      Evicted ev{std::string(e->breaker().name()), std::string(),
                 Nanos(static_cast<Ticks>(((now_u - last) & kTimeMask) << kUnitShift))};
      append_key_text(ev.key, e->key());
      gone.push_back(std::move(ev));
    }
    destroy_payload(e);
    s.free.push_back(index);
    s.live.fetch_sub(1, std::memory_order_relaxed);
    s.evicted.fetch_add(1, std::memory_order_relaxed);
  }

  // ---- events ------------------------------------------------------------------------

  // The entry a breaker address belongs to, or nullptr for a breaker that is not one
  // of ours (a policy copied out of the registry may be shared with other breakers).
  Entry* owner_of(const void* breaker) const noexcept {
    const auto addr = reinterpret_cast<std::uintptr_t>(breaker);
    for (std::uint32_t si = 0; si <= shard_mask_; ++si) {
      const Shard& s = shards_[si];
      for (std::size_t k = 0; k < kMaxSegments; ++k) {
        Entry* seg = s.segments[k].load(std::memory_order_acquire);
        if (seg == nullptr) break;
        const auto lo = reinterpret_cast<std::uintptr_t>(seg);
        const auto hi = lo + segment_size(k) * sizeof(Entry);
        if (addr >= lo && addr < hi && (addr - lo) % sizeof(Entry) == 0)
          return seg + (addr - lo) / sizeof(Entry);
      }
    }
    return nullptr;
  }

  // Runs on the thread that made the transition, which holds a reference to the entry
  // (every path to a breaker goes through a Handle or a Call).
  void on_transition(const TransitionEvent& ev) {
    Entry* e = owner_of(ev.breaker);
    if (e == nullptr) return;
    detail::note_outage(e->outage_since, ev.from, ev.to, ev.at);
    if (e->metrics != nullptr) e->metrics->transitions.count(ev.from, ev.to);
    transitions_.count(ev.from, ev.to);
    if (events_.wants(EventKind::transition) || events_.wants(EventKind::flapping)) {
      const Nanos period = detail::flapping_period(e->breaker());
      with_key_text(e->key(), [&](std::string_view key) {
        detail::emit_transition(events_, ev, key, period);
      });
    }
  }

  template <class F>
  static void with_key_text(const Key& key, F&& f) {
    if constexpr (std::is_convertible_v<const Key&, std::string_view> &&
                  !requires(std::string & out) { bulwark_key_text(key, out); }) {
      f(std::string_view(key));
    } else {
      std::string text;
      append_key_text(text, key);
      f(std::string_view(text));
    }
  }

  void emit_rejection(const Handle& h, const Rejection& r) {
    const Ticks at = now_ticks(clock_.get());
    with_key_text(h.key(), [&](std::string_view key) {
      events_.emit(Event{EventKind::rejection, h.breaker().name(), key, &h.breaker(), at,
                         RejectionInfo{r.reason, r.retry_after}});
    });
  }

  // Routes the rejections of the bulkheads in a new entry's Extra to events() (see
  // "Per-key components and events" above). Before the entry is published, so the
  // bulkhead is not shared yet.
  void attach_bulkheads(Entry* e) noexcept {
    const BulkheadObserver observer(&BasicRegistry::bulkhead_rejected, e, this);
    if constexpr (requires(Extra & x) { x.observe_rejections(observer); }) {
      e->extra().observe_rejections(observer);
    } else if constexpr (requires(Extra & x) { x.bulkhead.observe_rejections(observer); }) {
      e->extra().bulkhead.observe_rejections(observer);
    } else {
      (void)observer;
    }
  }

  // A per-key bulkhead refused a call. Its caller reached the bulkhead through a Handle,
  // which keeps the entry alive.
  static void bulkhead_rejected(void* entry, void* registry,
                                const BulkheadRejectionEvent& ev) noexcept {
    auto* self = static_cast<BasicRegistry*>(registry);
    if (!self->events_.wants(EventKind::rejection)) return;
    Entry* e = static_cast<Entry*>(entry);
    const Ticks at = now_ticks(self->clock_.get());
    with_key_text(e->key(), [&](std::string_view key) {
      self->events_.emit(Event{EventKind::rejection, ev.name, key, ev.bulkhead, at,
                               BulkheadRejectionInfo{ev.reason}});
    });
  }

  // A fallback stage observed through a Handle answered (Handle::on_fallback).
  void fallback_answered(Entry* e, bool rejected, Reason reason) noexcept {
    const FallbackKind kind = rejected ? FallbackKind::rejected : FallbackKind::failed;
    if (e->metrics != nullptr) e->metrics->components.record_fallback(kind);
    if (!events_.wants(EventKind::fallback)) return;
    const Ticks at = now_ticks(clock_.get());
    with_key_text(e->key(), [&](std::string_view key) {
      events_.emit(Event{EventKind::fallback, e->breaker().name(), key, &e->breaker(), at,
                         FallbackInfo{kind, to_string(reason)}});
    });
  }

  void emit_key(EventKind kind, Entry* e, Ticks at, Nanos idle) {
    with_key_text(e->key(), [&](std::string_view key) {
      events_.emit(Event{kind, e->breaker().name(), key, &e->breaker(), at, KeyInfo{idle}});
    });
  }

  void announce_evicted(const std::vector<Evicted>& gone) {
    if (gone.empty()) return;
    const Ticks at = now_ticks(clock_.get());
    for (const Evicted& ev : gone) {
      events_.emit(Event{EventKind::key_evicted, ev.name, ev.key, nullptr, at, KeyInfo{ev.idle}});
    }
  }

  static void fold(BreakerReading& into, const BreakerReading& b) noexcept {
    into.successes += b.successes;
    into.failures += b.failures;
    into.ignored += b.ignored;
    into.cancelled += b.cancelled;
    into.rejected += b.rejected;
    into.opens += b.opens;
    into.has_slow = into.has_slow || b.has_slow;
    into.slow_successes += b.slow_successes;
    into.slow_failures += b.slow_failures;
  }

  // ---- memory ------------------------------------------------------------------------

  static std::size_t key_heap_bytes(const Key& key) noexcept {
    if constexpr (requires {
                    key.capacity();
                    key.data();
                  }) {
      // Heap memory of a string-like key: none while it fits its inline buffer.
      const auto* data = reinterpret_cast<const unsigned char*>(key.data());
      const auto* self = reinterpret_cast<const unsigned char*>(&key);
      const bool inline_buffer = data >= self && data < self + sizeof(Key);
      return inline_buffer ? 0 : (key.capacity() + 1) * sizeof(*key.data());
    } else {
      return 0;
    }
  }

  RegistryMemory memory_without_keys() const {
    RegistryMemory m;
    m.bookkeeping = sizeof(*this) + (shard_mask_ + 1) * sizeof(Shard);
    for (std::uint32_t si = 0; si <= shard_mask_; ++si) {
      const Shard& s = shards_[si];
      std::lock_guard lock(s.mu);
      m.entries += s.allocated.load(std::memory_order_relaxed) * sizeof(Entry);
      m.index += (s.current->mask + 1 + s.retired_slots) * sizeof(std::uint64_t);
      m.metrics += s.metrics_blocks * sizeof(BreakerMetrics);
      m.bookkeeping +=
          s.free.capacity() * sizeof(std::uint32_t) + s.retired.capacity() * sizeof(void*);
    }
    return m;
  }

  const detail::ClockRef<clock_type> clock_;
  const std::string name_;
  const std::function<std::optional<typename Breaker::Config>(const Key&)> config_for_;
  const std::function<Extra(const Key&)> extra_for_;
  Policy shared_policy_;
  std::shared_ptr<Router> router_;
  ListenerId shared_listener_ = 0;
  std::unique_ptr<Shard[]> shards_;
  const std::uint32_t shard_mask_;
  const Nanos idle_ttl_;
  const std::uint64_t ttl_units_;
  const Ticks sweep_interval_;
  const std::uint32_t evict_batch_;
  const bool detailed_;
  const bool counted_;  // entries count their handles (they can be evicted or removed)
  [[no_unique_address]] Hash hash_;
  [[no_unique_address]] Eq eq_;
  EventHub events_;
  TransitionCounts transitions_;  // every breaker's, evicted or not
};

// A registry of the default breaker type, keyed by Key.
template <class Key, class Extra = NoExtra>
using Registry = BasicRegistry<Key, CircuitBreaker, Extra>;

}  // namespace bulwark

#endif  // BULWARK_REGISTRY_H_
