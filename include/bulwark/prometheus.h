// bulwark/prometheus.h — breakers and registries in the Prometheus text format (0.0.4).
//
// The core writes the exposition to a std::ostream; serving it over HTTP (/metrics)
// is the CLI's or an integration's job.
//
//   // one registry:
//   bulwark::prometheus::write(out, hosts);
//
//   // several sources in one exposition (a metric family may appear only once, so
//   // they are gathered first and written together):
//   bulwark::prometheus::Exposition scrape;
//   scrape.add(hosts);                      // a registry: one series set per key
//   scrape.add(payments_breaker, &payments_metrics);   // a standalone breaker
//   scrape.write(out);
//
// Names follow Prometheus conventions (base units, counters end in _total) and reuse
// Resilience4j's Micrometer names where the meaning matches, so dashboards feel
// familiar; with `.prefix = "resilience4j"` those families get exactly Resilience4j's
// names. Per breaker (labels: name, key):
//   <p>_circuitbreaker_state{state}                 gauge 1/0 per state (as Resilience4j)
//   <p>_circuitbreaker_time_in_state_seconds        gauge
//   <p>_circuitbreaker_open_seconds                 gauge: seconds since it left CLOSED
//                                                   (0 when closed) — "open too long" alerts
//   <p>_circuitbreaker_calls_total{kind}            successful|failed|ignored|cancelled
//   <p>_circuitbreaker_slow_calls_total{kind}       successful|failed (when the breaker keeps
//                                                   totals)
//   <p>_circuitbreaker_not_permitted_calls_total{kind="not_permitted"}   rejections
//                                                   (Resilience4j's name and label)
//   <p>_circuitbreaker_opens_total                  transitions into OPEN / FORCED_OPEN
//   <p>_circuitbreaker_failure_ratio, _slow_call_ratio   0..1, NaN = not enough calls
//   <p>_circuitbreaker_buffered_calls{kind}         calls in the window now (Resilience4j)
//   <p>_circuitbreaker_slow_calls{kind}             slow calls in the window now (Resilience4j)
//   <p>_circuitbreaker_flapping                     gauge 1/0
//   <p>_circuitbreaker_transitions_total{from,to}   (detailed metrics)
//   <p>_circuitbreaker_call_duration_seconds        histogram (detailed metrics)
//   <p>_fallback_calls_total{kind}, <p>_retry_calls_total{kind}, <p>_retry_retries_total,
//   <p>_retry_budget_exhausted_total, <p>_retry_budget_tokens, <p>_bulkhead_concurrent_calls,
//   <p>_bulkhead_available_concurrent_calls, <p>_bulkhead_max_allowed_concurrent_calls,
//   <p>_bulkhead_rejected_calls_total               when those components report
// Per registry (label: registry): <p>_registry_keys, _keys_created_total,
// _keys_evicted_total, _memory_bytes, _breakers{state}, _max_open_seconds, and the sums
// of the breaker counters above (evicted keys included). docs/observability.md lists
// them all with their Resilience4j equivalents and the alert rules.
//
// Label values: `\`, `"` and newline are escaped; a byte that is not part of valid
// UTF-8 (Prometheus requires UTF-8) is written as the text \xHH (`\\xHH` on the wire),
// so keys that differ only in such bytes stay distinct series. A key that contains
// that text literally looks the same as one with the byte.
//
// Cost. Gathering reads each breaker once (a snapshot: relaxed loads and a clock
// read) and copies the numbers; writing formats them into a 64 KiB buffer flushed to
// the stream. Allocates (rows, label text, the buffer); takes no breaker lock (there
// are none). A registry is read one shard at a time under that shard's mutex, so that
// its totals are consistent (registry.h, collect()): lookups go on, creation and
// eviction of keys in that shard wait for the shard's rows to be gathered.
// Thread-safety: an Exposition is used by one thread; the sources it reads may be in
// use by any number of threads meanwhile.

#ifndef BULWARK_PROMETHEUS_H_
#define BULWARK_PROMETHEUS_H_

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iosfwd>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "bulwark/config_error.h"
#include "bulwark/expected.h"
#include "bulwark/metrics.h"
#include "bulwark/registry.h"

namespace bulwark::prometheus {

struct ExpositionOptions {
  // Prefix of every metric name: [a-zA-Z_:][a-zA-Z0-9_:]*. "resilience4j" gives
  // Resilience4j's exact names where the families match.
  std::string prefix = "bulwark";
  // One series set per breaker (per key). Turn off for registries of a million keys:
  // the registry totals (and max_open_seconds for the alert) remain.
  bool per_breaker = true;
  // The <prefix>_registry_* families.
  bool registry_totals = true;
};

// Checks every field; the error names the first one that is wrong.
Expected<void, ConfigError> validate(const ExpositionOptions& options);

// ---------------------------------------------------------------------------
// The low-level writer (for integrations adding families of their own)
// ---------------------------------------------------------------------------

// Writes the text format to a stream through a buffer. Call family() once per metric
// family, then sample() for each of its samples. Label sets are passed pre-rendered
// (`name="a",key="b"`); render values with append_label_value().
class Writer {
 public:
  explicit Writer(std::ostream& out);
  ~Writer();  // flushes
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // "# HELP <name> <help>\n# TYPE <name> <type>\n", HELP escaped.
  void family(std::string_view name, std::string_view type, std::string_view help);
  // "<name><suffix>{<labels>[,<extra>]} <value>\n". `labels` and `extra` may be empty.
  void sample(std::string_view name, std::string_view suffix, std::string_view labels,
              std::string_view extra, std::uint64_t value);
  void sample(std::string_view name, std::string_view suffix, std::string_view labels,
              std::string_view extra, double value);
  // "<head><labels><tail><value>\n", verbatim: the fast form for writers that render
  // their label sets once, e.g. head "x_total", labels `{name="a"`, tail `,kind="b"} `
  // (or labels "" and tail " " for no labels). Inline: it is a scrape's inner loop,
  // one capacity check and a few straight copies per line.
  void line(std::string_view head, std::string_view labels, std::string_view tail,
            std::uint64_t value) {
    write_line(head, labels, tail, value);
  }
  void line(std::string_view head, std::string_view labels, std::string_view tail, double value) {
    write_line(head, labels, tail, value);
  }
  // Writes the buffer to the stream.
  void flush();

 private:
  static constexpr std::size_t kCapacity = 64 * 1024;
  static constexpr std::size_t kValueRoom = 32;  // the longest value append_value writes

  // Makes room for n bytes; false if even an empty buffer can't hold them.
  bool room(std::size_t n) {
    if (static_cast<std::size_t>(end_ - pos_) >= n) return true;
    flush();
    return n <= kCapacity;
  }
  // A line longer than the whole buffer, written on its own (a huge label set).
  void long_line(std::string_view head, std::string_view labels, std::string_view tail,
                 std::uint64_t value);
  void long_line(std::string_view head, std::string_view labels, std::string_view tail,
                 double value);
  // Copies without a call to memcpy for the short pieces a line is made of (names,
  // label sets): fixed-size overlapping moves the compiler turns into a few vector
  // loads and stores. The scrape's cost is mostly here.
  void put(std::string_view s) noexcept {
    const char* src = s.data();
    const std::size_t n = s.size();
    char* dst = pos_;
    pos_ += n;
    if (n <= 16) {
      if (n >= 8) {
        overlap<8>(dst, src, n);
      } else {
        for (std::size_t i = 0; i < n; ++i) dst[i] = src[i];
      }
    } else if (n <= 32) {
      overlap<16>(dst, src, n);
    } else if (n <= 64) {
      overlap<32>(dst, src, n);
    } else {
      std::memcpy(dst, src, n);
    }
  }
  // Copies n bytes, N <= n <= 2N, as two N-byte moves that may overlap. Both loads come
  // before both stores, so the compiler keeps the bytes in registers.
  template <std::size_t N>
  static void overlap(char* dst, const char* src, std::size_t n) noexcept {
    char head[N], tail[N];
    std::memcpy(head, src, N);
    std::memcpy(tail, src + n - N, N);
    std::memcpy(dst, head, N);
    std::memcpy(dst + n - N, tail, N);
  }
  void put_value(std::uint64_t value) noexcept {
    if (value < 10) {  // most samples: the one-hot states, small counters
      *pos_++ = static_cast<char>('0' + value);
    } else {
      pos_ = std::to_chars(pos_, pos_ + kValueRoom, value).ptr;
    }
  }
  void put_value(double value) noexcept {
    if (std::isnan(value)) {
      put("NaN");
    } else if (std::isinf(value)) {
      put(value > 0 ? "+Inf" : "-Inf");
    } else {
      pos_ = std::to_chars(pos_, pos_ + kValueRoom, value).ptr;
    }
  }
  template <class V>
  void write_line(std::string_view head, std::string_view labels, std::string_view tail, V value) {
    if (!room(head.size() + labels.size() + tail.size() + kValueRoom + 1)) {
      long_line(head, labels, tail, value);
      return;
    }
    put(head);
    put(labels);
    put(tail);
    put_value(value);
    *pos_++ = '\n';
  }
  template <class V>
  void write_sample(std::string_view name, std::string_view suffix, std::string_view labels,
                    std::string_view extra, V value);

  std::ostream& out_;
  std::unique_ptr<char[]> buf_;
  char* pos_;
  char* end_;
};

// Appends `value` escaped as a label value: backslash, double quote and newline are
// escaped; each byte that is not part of valid UTF-8 (Prometheus requires UTF-8)
// becomes the text \xHH, written `\\xHH` (lower-case hex), so that two values that
// differ only in such bytes stay distinct.
void append_label_value(std::string& out, std::string_view value);
// Appends a sample value: integers exactly, doubles in their shortest round-trip form,
// NaN as "NaN", infinities as "+Inf" / "-Inf".
void append_value(std::string& out, double value);
void append_value(std::string& out, std::uint64_t value);

// ---------------------------------------------------------------------------
// Gathering and writing
// ---------------------------------------------------------------------------

// Readings of many sources, written as one exposition.
class Exposition {
 public:
  // Throws InvalidConfig naming the field if `options` is invalid.
  explicit Exposition(ExpositionOptions options = {});

  // A standalone breaker (labels: name). `metrics`, if given, adds its latency
  // histogram, transitions and component counters, and the outage start that
  // open_seconds needs (without it, open_seconds is the time in the current state).
  template <class Breaker>
  requires std::is_empty_v<typename Breaker::clock_type>
  void add(const Breaker& breaker, const BreakerMetrics* metrics = nullptr) {
    add(breaker, metrics, typename Breaker::clock_type{});
  }
  // The same for a breaker with a stateful clock (ManualClock): pass that clock.
  template <class Breaker>
  void add(const Breaker& breaker, const BreakerMetrics* metrics,
           const typename Breaker::clock_type& clock) {
    const BreakerReading r = read_breaker(breaker);
    const Ticks since = metrics != nullptr ? metrics->outage_since() : detail::kNoOutage;
    Row& row = new_row(breaker.name(), std::string_view(), false, r,
                       detail::outage_seconds(r, since, now_ticks(clock)));
    if (metrics != nullptr) {
      const DetailReading d = metrics->read();
      add_detail(row, d);
      add_components(row, d.components);
    }
  }

  // A registry: one row per key (if per_breaker) and its totals (if registry_totals).
  template <class Key, class Breaker, class Extra, class Hash, class Eq>
  void add(const BasicRegistry<Key, Breaker, Extra, Hash, Eq>& registry) {
    using Reg = BasicRegistry<Key, Breaker, Extra, Hash, Eq>;
    const Ticks now = now_ticks(registry.clock());
    if (options_.per_breaker) {
      // One allocation each instead of a doubling series (a scrape of 10,000 keys would
      // otherwise spend a good part of its time in page faults).
      const std::size_t n = registry.size() + 16;
      rows_.reserve(rows_.size() + n);
      labels_.reserve(labels_.size() + n * 48);
      if (registry.detailed_metrics()) details_.reserve(details_.size() + n);
    }
    std::string key_text;
    RegistryReading totals =
        registry.collect([&](const typename Reg::EntryView& v, const BreakerReading& r) {
          if (!options_.per_breaker) return;
          std::string_view key;
          if constexpr (std::is_convertible_v<const Key&, std::string_view> &&
                        !requires(std::string & out) { bulwark_key_text(v.key, out); }) {
            key = std::string_view(v.key);  // no copy for string keys
          } else {
            key_text.clear();
            append_key_text(key_text, v.key);
            key = key_text;
          }
          Row& row = new_row(v.breaker.name(), key, true, r,
                             detail::outage_seconds(r, v.outage_since, now));
          constexpr bool extra_reports = requires(Extra & x, ComponentReading & c) {
            x.read_metrics(c);
          };
          if (v.metrics == nullptr && !extra_reports) return;
          ComponentReading components;
          if (v.metrics != nullptr) {
            const DetailReading d = v.metrics->read();
            components = d.components;
            add_detail(row, d);
          }
          if constexpr (extra_reports) {
            if (v.extra != nullptr) v.extra->read_metrics(components);
          }
          add_components(row, components);
        });
    if (options_.registry_totals) add_registry(std::move(totals), registry.name());
  }

  // Writes everything gathered so far as one exposition. Can be called again.
  void write(std::ostream& out) const;
  std::string str() const;

  const ExpositionOptions& options() const noexcept { return options_; }
  std::size_t rows() const noexcept { return rows_.size(); }

 private:
  static constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

  // One breaker, as compact as the families need (every family walks all rows, so row
  // size is scrape time). Rarer readings live in side tables, by index.
  struct Row {
    std::uint32_t labels_begin;  // `{name="..",key=".."` in labels_ (the brace included)
    std::uint32_t labels_size;
    std::uint32_t detail = kNone;      // index in details_
    std::uint32_t components = kNone;  // index in components_
    std::uint32_t more = kNone;        // index in more_: slow-call totals, rates, window
    State state;
    std::uint8_t flapping;  // kNoFlapping if the breaker can't tell, else 0 / 1
    std::uint64_t successes, failures, ignored, cancelled, rejected, opens;
    std::int64_t time_in_state_nanos;
    double open_seconds;
  };
  static constexpr std::uint8_t kNoFlapping = 2;
  struct More {
    bool has_slow, has_rates, has_window;
    std::uint64_t slow_successes, slow_failures;
    double failure_rate, slow_call_rate;
    std::uint64_t window_calls, window_failures, window_slow_successes, window_slow_failures;
  };
  struct Registry {
    std::string name;
    std::uint32_t labels_begin;
    std::uint32_t labels_size;
    RegistryReading reading;
  };
  struct Detail {
    HistogramReading latency;
    TransitionReading transitions;
  };

  Row& new_row(std::string_view name, std::string_view key, bool keyed,
               const BreakerReading& reading, double open_seconds);
  void add_detail(Row& row, const DetailReading& detail);
  void add_components(Row& row, const ComponentReading& components);
  void add_registry(RegistryReading reading, std::string_view name);

  ExpositionOptions options_;
  std::string labels_;
  std::vector<Row> rows_;
  std::vector<Detail> details_;
  std::vector<More> more_;
  std::vector<ComponentReading> components_;
  std::vector<Registry> registries_;
  std::string last_name_;        // the breaker name last rendered...
  std::string last_name_label_;  // ...as `{name="<escaped>"`
};

// One registry's exposition, written to `out`.
template <class Key, class Breaker, class Extra, class Hash, class Eq>
void write(std::ostream& out, const BasicRegistry<Key, Breaker, Extra, Hash, Eq>& registry,
           const ExpositionOptions& options = {}) {
  Exposition e(options);
  e.add(registry);
  e.write(out);
}

}  // namespace bulwark::prometheus

#endif  // BULWARK_PROMETHEUS_H_
