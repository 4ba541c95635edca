// Internal: the definitions of BasicRegistry's longer members (lookup, creation,
// removal, eviction, the walks). Not part of the public API; registry.h includes it at
// its end (templates need their definitions visible). The contract of each member is
// documented at its declaration in registry.h.

#ifndef BULWARK_DETAIL_REGISTRY_IMPL_H_
#define BULWARK_DETAIL_REGISTRY_IMPL_H_

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bulwark/registry.h"

namespace bulwark {

template <class Key, class Breaker, class Extra, class Hash, class Eq>
BasicRegistry<Key, Breaker, Extra, Hash, Eq>::~BasicRegistry() {
  router_->target.store(nullptr, std::memory_order_release);
  shared_policy_.remove_listener(shared_listener_);
  for (std::uint32_t si = 0; si <= shard_mask_; ++si) {
    Shard& s = shards_[si];
    const std::uint32_t n = s.allocated.load(std::memory_order_acquire);
    for (std::uint32_t i = 0; i < n; ++i) {
      Entry* e = s.entries.at(i);
      if (!e->ref.dead()) e->destroy();
      if (e->metrics != nullptr) std::destroy_at(e->metrics);
    }
  }
}

template <class Key, class Breaker, class Extra, class Hash, class Eq>
template <class K>
auto BasicRegistry<Key, Breaker, Extra, Hash, Eq>::get(const K& key) -> Handle {
  const std::uint64_t h = hash_of(key);
  Shard& s = shard_for(h);
  if (Entry* e = find_pinned(s, h, key); e != nullptr) {
    maybe_sweep(s);
    return Handle(this, e);
  }
  return Handle(this, create(s, h, key));
}

template <class Key, class Breaker, class Extra, class Hash, class Eq>
template <class K>
auto BasicRegistry<Key, Breaker, Extra, Hash, Eq>::find(const K& key) -> Handle {
  const std::uint64_t h = hash_of(key);
  Shard& s = shard_for(h);
  for (int attempt = 0; attempt < 2; ++attempt) {
    const std::uint64_t seq = s.table.seq();
    if (Entry* e = find_pinned(s, h, key); e != nullptr) return Handle(this, e);
    // No erase moved slots while we probed: the miss is real. (A probe that saw a slot
    // an erase moved or cleared synchronised with that release store, which the odd
    // `seq` store precedes: we then read seq != seq.)
    if ((seq & 1) == 0 && s.table.seq() == seq) return Handle();
  }
  std::lock_guard lock(s.mu);
  Entry* e = find_pinned(s, h, key);
  return e != nullptr ? Handle(this, e) : Handle();
}

template <class Key, class Breaker, class Extra, class Hash, class Eq>
template <class K>
bool BasicRegistry<Key, Breaker, Extra, Hash, Eq>::remove(const K& key) {
  if (!counted_) return false;  // see RegistryOptions::removable
  const std::uint64_t h = hash_of(key);
  Shard& s = shard_for(h);
  std::vector<Evicted> gone;
  bool removed = false;
  {
    std::lock_guard lock(s.mu);
    std::size_t pos = 0;
    const bool found = s.table.locate(
        tag_of(h), [&](std::uint32_t i) { return key_equal(s.entries.at(i)->key(), key); }, pos);
    if (found) {
      const std::uint32_t index = detail::SlotTable::index_of(s.table.at(pos));
      Entry* e = s.entries.at(index);
      const std::uint64_t w = e->ref.word.load(std::memory_order_relaxed);
      if (e->ref.kill(w)) {
        retire(s, pos, index, detail::RegistryRef::units(coarse_now_ticks(clock_.get())), gone);
        removed = true;
      }
    }
  }
  announce_evicted(gone);
  return removed;
}

template <class Key, class Breaker, class Extra, class Hash, class Eq>
std::size_t BasicRegistry<Key, Breaker, Extra, Hash, Eq>::evict_idle(std::size_t max_slots) {
  if (!idle_.enabled()) return 0;
  const Ticks now = coarse_now_ticks(clock_.get());
  std::size_t evicted = 0;
  const std::size_t per_shard =
      max_slots == 0 ? 0 : std::max<std::size_t>(1, max_slots / (shard_mask_ + 1));
  for (std::uint32_t si = 0; si <= shard_mask_; ++si) {
    Shard& s = shards_[si];
    std::vector<Evicted> gone;
    {
      std::lock_guard lock(s.mu);
      evicted += sweep(s, now, per_shard == 0 ? s.table.capacity() : per_shard, gone);
    }
    announce_evicted(gone);
  }
  return evicted;
}

template <class Key, class Breaker, class Extra, class Hash, class Eq>
template <class F>
void BasicRegistry<Key, Breaker, Extra, Hash, Eq>::for_each(F&& f) const {
  for (std::uint32_t si = 0; si <= shard_mask_; ++si) {
    Shard& s = shards_[si];
    const std::uint32_t n = s.allocated.load(std::memory_order_acquire);
    for (std::uint32_t i = 0; i < n; ++i) {
      Entry* e = s.entries.at(i);
      if (!pin(e, /*use=*/false)) continue;
      f(view_of(e));
      unpin(e);
    }
  }
}

template <class Key, class Breaker, class Extra, class Hash, class Eq>
template <class F>
RegistryReading BasicRegistry<Key, Breaker, Extra, Hash, Eq>::collect(F&& per_entry) const {
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
      Entry* e = s.entries.at(i);
      // Under s.mu an entry is live exactly when it is not dead: publication and
      // eviction both happen under it. No pin needed (and none that would look like use).
      if (e->ref.dead()) continue;
      const EntryView v = view_of(e);
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
      if constexpr (detail::kExtraReports<Extra>) {
        if (v.extra != nullptr) v.extra->read_metrics(total.components);
      }
      key_heap += detail::key_heap_bytes(v.key);
      per_entry(v, b);
    }
    total.add(s.gone.breaker);
    total.latency.add(s.gone.latency);
    total.components.merge(s.gone.components);
    total.created += s.created.load(std::memory_order_relaxed);
    total.evicted += s.evicted.load(std::memory_order_relaxed);
  }
  total.transitions = events_.transitions.read();
  RegistryMemory m = memory_without_keys();
  m.key_heap = key_heap;
  total.memory_bytes = m.total();
  return total;
}

template <class Key, class Breaker, class Extra, class Hash, class Eq>
RegistryMemory BasicRegistry<Key, Breaker, Extra, Hash, Eq>::memory() const {
  RegistryMemory m = memory_without_keys();
  for_each([&](const EntryView& v) { m.key_heap += detail::key_heap_bytes(v.key); });
  return m;
}

template <class Key, class Breaker, class Extra, class Hash, class Eq>
template <class K>
auto BasicRegistry<Key, Breaker, Extra, Hash, Eq>::find_pinned(const Shard& s, std::uint64_t h,
                                                               const K& key) const noexcept
    -> Entry* {
  Entry* found = nullptr;
  s.table.probe(tag_of(h), [&](std::uint32_t index) {
    Entry* e = s.entries.at(index);
    // The breaker's line is needed next: fetch it while the key is compared.
    __builtin_prefetch(e->breaker_bytes);
    if (!counted_) {
      // Entries never die once published: the slot's acquire load made it visible.
      if (!key_equal(e->key(), key)) return false;
    } else {
      if (!e->ref.pin(true)) return false;  // being evicted, or a stale slot of a reused entry
      if (!key_equal(e->key(), key)) {
        e->ref.release();
        return false;
      }
    }
    found = e;
    return true;
  });
  return found;
}

template <class Key, class Breaker, class Extra, class Hash, class Eq>
auto BasicRegistry<Key, Breaker, Extra, Hash, Eq>::acquire_on(Handle h)
    -> Expected<Call, Rejection> {
  auto permit = h.breaker().try_acquire();
  if (!permit) {
    events_.rejected(*h.entry_, permit.error(), clock_.get());
    return Unexpected(permit.error());
  }
  return Call(std::move(h), std::move(*permit));
}

template <class Key, class Breaker, class Extra, class Hash, class Eq>
template <class K>
auto BasicRegistry<Key, Breaker, Extra, Hash, Eq>::create(Shard& s, std::uint64_t h, const K& key)
    -> Entry* {
  Key owned(key);
  // User code first, with no lock held: it may even call back into the registry.
  std::optional<Policy> own_policy;
  if (config_for_) {
    if (std::optional<Config> cfg = config_for_(owned); cfg.has_value()) {
      if (auto ok = detail::validate_breaker_config<Breaker>(*cfg); !ok) {
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
    if (Entry* found = find_pinned(s, h, owned); found != nullptr) return found;
    index = allocate(s);
    e = s.entries.at(index);
  }
  construct_payload(s, e, std::move(owned), own_policy.has_value() ? *own_policy : shared_policy_,
                    index);
  // Read after the user's callbacks ran, so a slow config_for can't make the key look
  // idle from birth; also the time of its key_created event.
  const bool announced = events_.hub.wants(EventKind::key_created);
  const Ticks now = idle_.enabled() || announced ? coarse_now_ticks(clock_.get()) : 0;
  std::vector<Evicted> gone;
  Entry* result = e;
  {
    std::lock_guard lock(s.mu);
    if (Entry* found = find_pinned(s, h, key); found != nullptr) {
      // Another thread created the key while we built ours: theirs wins.
      e->destroy();
      s.free.push_back(index);
      result = found;
    } else {
      e->incarnation = (s.created.fetch_add(1, std::memory_order_relaxed) + 1) * (shard_mask_ + 1) +
                       static_cast<std::uint64_t>(&s - &shards_[0]);
      // Published with one reference (the caller's): the payload above is visible to
      // any thread whose pin reads this value.
      e->ref.publish(counted_ ? 1 : 0, Ref::units(now));
      s.table.insert(tag_of(h), index);
      s.live.fetch_add(1, std::memory_order_relaxed);
      if (idle_.enabled()) sweep(s, now, evict_batch_, gone);
    }
  }
  announce_evicted(gone);
  if (result == e && announced) events_.key_event(EventKind::key_created, *e, now, Nanos::zero());
  return result;
}

template <class Key, class Breaker, class Extra, class Hash, class Eq>
std::uint32_t BasicRegistry<Key, Breaker, Extra, Hash, Eq>::allocate(Shard& s) {
  if (!s.free.empty()) {
    const std::uint32_t index = s.free.back();
    s.free.pop_back();
    return index;
  }
  const std::uint32_t index = s.allocated.load(std::memory_order_relaxed);
  if (index == std::numeric_limits<std::uint32_t>::max() - 1) throw_length();
  Entry* e = s.entries.reserve(index, [&](void* base, std::size_t bytes, std::size_t k) {
    events_.directory.add(base, bytes, k);
  });
  ::new (static_cast<void*>(e)) Entry;
  e->poison();
  if (detailed_) {
    e->metrics = ::new (static_cast<void*>(s.metrics.reserve(index))) BreakerMetrics;
    ++s.metrics_blocks;
  }
  s.allocated.store(index + 1, std::memory_order_release);
  return index;
}

template <class Key, class Breaker, class Extra, class Hash, class Eq>
void BasicRegistry<Key, Breaker, Extra, Hash, Eq>::throw_length() {
#if defined(__cpp_exceptions)
  throw std::length_error("bulwark registry: more than 2^32 - 2 keys in one shard");
#else
  std::abort();
#endif
}

template <class Key, class Breaker, class Extra, class Hash, class Eq>
void BasicRegistry<Key, Breaker, Extra, Hash, Eq>::construct_payload(Shard& s, Entry* e, Key&& key,
                                                                     const Policy& policy,
                                                                     std::uint32_t index) {
#if defined(__cpp_exceptions)
  try {
#endif
    e->construct(policy, std::move(key), [this](const Key& k) { return make_extra(k); });
#if defined(__cpp_exceptions)
  } catch (...) {
    std::lock_guard lock(s.mu);
    s.free.push_back(index);
    throw;
  }
#endif
  (void)s;
  (void)index;
  if constexpr (Entry::kHasExtra) {
    // Before the entry is published, so the bulkhead is not shared yet.
    detail::observe_extra_bulkheads(e->extra(),
                                    BulkheadObserver(&BasicRegistry::bulkhead_rejected, e, this));
  }
}

template <class Key, class Breaker, class Extra, class Hash, class Eq>
Extra BasicRegistry<Key, Breaker, Extra, Hash, Eq>::make_extra(const Key& key) const {
  if constexpr (std::is_same_v<Extra, NoExtra>) {
    return Extra{};
  } else if constexpr (std::is_constructible_v<Extra, const Key&>) {
    if (extra_for_) return extra_for_(key);
    return Extra(key);
  } else if constexpr (std::is_default_constructible_v<Extra>) {
    if (extra_for_) return extra_for_(key);
    return Extra();
  } else {
    return extra_for_(key);  // validate() made sure it is set
  }
}

template <class Key, class Breaker, class Extra, class Hash, class Eq>
void BasicRegistry<Key, Breaker, Extra, Hash, Eq>::maybe_sweep(Shard& s) {
  if (!idle_.enabled() || !detail::IdlePolicy::check_now()) return;
  const Ticks now = coarse_now_ticks(clock_.get());
  if (!s.gate.due(now)) return;
  std::vector<Evicted> gone;
  {
    std::unique_lock lock(s.mu, std::try_to_lock);
    if (!lock.owns_lock()) return;  // someone else is at it: never wait on the request path
    s.gate.schedule(now, idle_.interval);
    sweep(s, now, evict_batch_, gone);
  }
  announce_evicted(gone);
}

template <class Key, class Breaker, class Extra, class Hash, class Eq>
std::size_t BasicRegistry<Key, Breaker, Extra, Hash, Eq>::sweep(Shard& s, Ticks now,
                                                                std::size_t budget,
                                                                std::vector<Evicted>& gone) {
  const std::uint64_t u = Ref::units(now);
  return detail::sweep_step(s.table, s.cursor, budget, [&](std::uint32_t index, std::size_t pos) {
    if (!try_mark_evicted(s.entries.at(index), u)) return false;
    retire(s, pos, index, u, gone);
    return true;
  });
}

template <class Key, class Breaker, class Extra, class Hash, class Eq>
bool BasicRegistry<Key, Breaker, Extra, Hash, Eq>::try_mark_evicted(Entry* e,
                                                                    std::uint64_t now_u) noexcept {
  std::uint64_t w = 0;
  if (e->ref.examine(now_u, idle_.ttl_units, w) != Ref::Verdict::idle) return false;
  if (e->breaker().state() != State::closed) return false;
  if (!e->ref.kill(w)) return false;  // someone pinned it just now
  // Nobody holds it, so nobody can change its state now; look once more in case a
  // holder changed it just before letting go.
  if (e->breaker().state() != State::closed) {
    e->ref.revive(w);
    return false;
  }
  return true;
}

template <class Key, class Breaker, class Extra, class Hash, class Eq>
void BasicRegistry<Key, Breaker, Extra, Hash, Eq>::retire(Shard& s, std::size_t pos,
                                                          std::uint32_t index, std::uint64_t now_u,
                                                          std::vector<Evicted>& gone) {
  Entry* e = s.entries.at(index);
  s.table.erase(pos);
  // Every counter a scrape reads from a live entry goes to the shard's totals, in this
  // critical section: collect() reads those under the same mutex.
  s.gone.absorb(*e);
  if (events_.hub.wants(EventKind::key_evicted)) {
    const std::uint64_t idle_units = Ref::elapsed(e->ref.idle_since(), now_u);
    Evicted ev{std::string(e->breaker().name()), std::string(),
               Nanos(static_cast<Ticks>(idle_units << Ref::kUnitShift))};
    append_key_text(ev.key, e->key());
    gone.push_back(std::move(ev));
  }
  e->destroy();
  s.free.push_back(index);
  s.live.fetch_sub(1, std::memory_order_relaxed);
  s.evicted.fetch_add(1, std::memory_order_relaxed);
}

template <class Key, class Breaker, class Extra, class Hash, class Eq>
RegistryMemory BasicRegistry<Key, Breaker, Extra, Hash, Eq>::memory_without_keys() const {
  RegistryMemory m;
  m.bookkeeping = sizeof(*this) + (shard_mask_ + 1) * sizeof(Shard) + events_.directory.bytes();
  for (std::uint32_t si = 0; si <= shard_mask_; ++si) {
    const Shard& s = shards_[si];
    std::lock_guard lock(s.mu);
    m.entries += s.allocated.load(std::memory_order_relaxed) * sizeof(Entry);
    m.index += s.table.bytes();
    m.metrics += s.metrics_blocks * sizeof(BreakerMetrics);
    m.bookkeeping += s.free.capacity() * sizeof(std::uint32_t) + s.table.bookkeeping_bytes();
  }
  return m;
}

}  // namespace bulwark

#endif  // BULWARK_DETAIL_REGISTRY_IMPL_H_
