#include "bulwark/prometheus.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <ostream>
#include <sstream>

namespace bulwark::prometheus {
namespace {

bool valid_metric_name(std::string_view n) {
  if (n.empty()) return false;
  for (std::size_t i = 0; i < n.size(); ++i) {
    const char c = n[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    const bool digit = c >= '0' && c <= '9';
    if (!alpha && !(digit && i > 0)) return false;
  }
  return true;
}

// Length of the valid UTF-8 sequence at s[i], or 0 if it is not valid (Unicode 15,
// table 3-7: no overlong forms, no surrogates, nothing above U+10FFFF).
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const auto cont = [&](std::size_t k, unsigned lo = 0x80, unsigned hi = 0xBF) {
    return i + k < s.size() && b(k) >= lo && b(k) <= hi;
  };
  const unsigned c = b(0);
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c == 0xE0) return cont(1, 0xA0) && cont(2) ? 3 : 0;
  if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return cont(1) && cont(2) ? 3 : 0;
  if (c == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
  if (c == 0xF0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (c >= 0xF1 && c <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (c == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

void append_help(std::string& out, std::string_view help) {
  for (char c : help) {
    if (c == '\\') {
      out.append("\\\\");
    } else if (c == '\n') {
      out.append("\\n");
    } else {
      out.push_back(c);
    }
  }
}

// The transitions that happen on their own: always shown (from 0), so that rate()
// sees their first increment. Manual ones appear once they happened.
bool automatic(std::size_t pair) {
  const State f = transition_from(pair), t = transition_to(pair);
  return (f == State::closed && t == State::open) || (f == State::open && t == State::half_open) ||
         (f == State::half_open && t == State::closed) ||
         (f == State::half_open && t == State::open);
}

double seconds(std::uint64_t nanos) { return static_cast<double>(nanos) / 1e9; }
double seconds(Nanos d) { return static_cast<double>(d.count()) / 1e9; }

// True if any of the 8 bytes in v is a byte a label value can't hold as is: '\\',
// '"', '\n', or one of a multi-byte UTF-8 sequence (>= 0x80) that must be checked.
constexpr bool needs_attention(std::uint64_t v) noexcept {
  constexpr std::uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
  const auto has_zero = [](std::uint64_t x) { return (x - ones) & ~x & highs; };
  return ((v & highs) | has_zero(v ^ (ones * '\\')) | has_zero(v ^ (ones * '"')) |
          has_zero(v ^ (ones * '\n'))) != 0;
}

}  // namespace

Expected<void, ConfigError> validate(const ExpositionOptions& o) {
  if (!valid_metric_name(o.prefix)) {
    return Unexpected(ConfigError{"prometheus exposition", "prefix",
                                  "must match [a-zA-Z_:][a-zA-Z0-9_:]* (got '" + o.prefix + "')"});
  }
  return {};
}

// ---------------------------------------------------------------------------
// Writer
// ---------------------------------------------------------------------------

Writer::Writer(std::ostream& out)
    : out_(out), buf_(new char[kCapacity]), pos_(buf_.get()), end_(buf_.get() + kCapacity) {}
Writer::~Writer() { flush(); }

void Writer::flush() {
  if (pos_ != buf_.get()) out_.write(buf_.get(), static_cast<std::streamsize>(pos_ - buf_.get()));
  pos_ = buf_.get();
}

void Writer::family(std::string_view name, std::string_view type, std::string_view help) {
  std::string line;
  line.append("# HELP ").append(name).push_back(' ');
  append_help(line, help);
  line.append("\n# TYPE ").append(name).push_back(' ');
  line.append(type).push_back('\n');
  if (room(line.size())) {
    put(line);
  } else {
    out_.write(line.data(), static_cast<std::streamsize>(line.size()));
  }
}

void Writer::long_line(std::string_view head, std::string_view labels, std::string_view tail,
                       std::uint64_t value) {
  std::string line;
  line.append(head).append(labels).append(tail);
  append_value(line, value);
  line.push_back('\n');
  out_.write(line.data(), static_cast<std::streamsize>(line.size()));
}

void Writer::long_line(std::string_view head, std::string_view labels, std::string_view tail,
                       double value) {
  std::string line;
  line.append(head).append(labels).append(tail);
  append_value(line, value);
  line.push_back('\n');
  out_.write(line.data(), static_cast<std::streamsize>(line.size()));
}

template <class V>
void Writer::write_sample(std::string_view name, std::string_view suffix, std::string_view labels,
                          std::string_view extra, V value) {
  std::string head(name);
  head.append(suffix);
  std::string open, tail;
  if (labels.empty() && extra.empty()) {
    tail = " ";
  } else {
    open.push_back('{');
    open.append(labels);
    if (!labels.empty() && !extra.empty()) tail.push_back(',');
    tail.append(extra).append("} ");
  }
  write_line(head, open, tail, value);
}

void Writer::sample(std::string_view name, std::string_view suffix, std::string_view labels,
                    std::string_view extra, std::uint64_t value) {
  write_sample(name, suffix, labels, extra, value);
}

void Writer::sample(std::string_view name, std::string_view suffix, std::string_view labels,
                    std::string_view extra, double value) {
  write_sample(name, suffix, labels, extra, value);
}

void append_value(std::string& out, std::uint64_t value) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, value);
  out.append(buf, r.ptr);
}

void append_value(std::string& out, double value) {
  if (std::isnan(value)) {
    out.append("NaN");
  } else if (std::isinf(value)) {
    out.append(value > 0 ? "+Inf" : "-Inf");
  } else {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, value);
    out.append(buf, r.ptr);
  }
}

void append_label_value(std::string& out, std::string_view v) {
  std::size_t i = 0;
  while (i < v.size()) {
    // Copy the longest run that needs nothing, in one append; 8 bytes at a time.
    std::size_t j = i;
    while (j + 8 <= v.size()) {
      std::uint64_t w;
      std::memcpy(&w, v.data() + j, 8);
      if (needs_attention(w)) break;
      j += 8;
    }
    while (j < v.size()) {
      const auto c = static_cast<unsigned char>(v[j]);
      if (c >= 0x80 || c == '\\' || c == '"' || c == '\n') break;
      ++j;
    }
    out.append(v.substr(i, j - i));
    if (j == v.size()) return;
    const auto c = static_cast<unsigned char>(v[j]);
    if (c == '\\') {
      out.append("\\\\");
      i = j + 1;
    } else if (c == '"') {
      out.append("\\\"");
      i = j + 1;
    } else if (c == '\n') {
      out.append("\\n");
      i = j + 1;
    } else if (const std::size_t len = utf8_sequence(v, j); len != 0) {
      out.append(v.substr(j, len));
      i = j + len;
    } else {
      // A byte that is not part of valid UTF-8 becomes the text \xHH, its backslash
      // escaped as the format requires (\\xHH on the wire): distinct keys stay distinct
      // series, and the label value names the byte.
      static constexpr char kHex[] = "0123456789abcdef";
      const char escaped[] = {'\\', '\\', 'x', kHex[c >> 4], kHex[c & 0xf]};
      out.append(escaped, sizeof escaped);
      i = j + 1;
    }
  }
}

// ---------------------------------------------------------------------------
// Exposition
// ---------------------------------------------------------------------------

Exposition::Exposition(ExpositionOptions options) : options_(std::move(options)) {
  if (auto ok = validate(options_); !ok) bulwark::detail::raise_config_error(std::move(ok).error());
}

Exposition::Row& Exposition::new_row(std::string_view name, std::string_view key, bool keyed,
                                     const BreakerReading& reading, double open_seconds) {
  // Every key of a registry shares its breaker name: escape it once.
  if (name != last_name_) {
    last_name_.assign(name);
    last_name_label_.assign("{name=\"");
    append_label_value(last_name_label_, name);
    last_name_label_.push_back('"');
  }
  const std::size_t begin = labels_.size();
  labels_.append(last_name_label_);
  if (keyed) {
    labels_.append(",key=\"");
    append_label_value(labels_, key);
    labels_.push_back('"');
  }
  Row& row = rows_.emplace_back();
  row.labels_begin = static_cast<std::uint32_t>(begin);
  row.labels_size = static_cast<std::uint32_t>(labels_.size() - begin);
  row.open_seconds = open_seconds;
  row.state = reading.state;
  row.successes = reading.successes;
  row.failures = reading.failures;
  row.ignored = reading.ignored;
  row.cancelled = reading.cancelled;
  row.rejected = reading.rejected;
  row.opens = reading.opens;
  row.time_in_state_nanos = reading.time_in_state.count();
  row.flapping = reading.has_flapping ? (reading.flapping ? 1 : 0) : kNoFlapping;
  if (reading.has_slow || reading.has_rates || reading.has_window) {
    row.more = static_cast<std::uint32_t>(more_.size());
    More& m = more_.emplace_back();
    m.has_slow = reading.has_slow;
    m.has_rates = reading.has_rates;
    m.has_window = reading.has_window;
    m.slow_successes = reading.slow_successes;
    m.slow_failures = reading.slow_failures;
    m.failure_rate = reading.failure_rate;
    m.slow_call_rate = reading.slow_call_rate;
    m.window_calls = reading.window_calls;
    m.window_failures = reading.window_failures;
    m.window_slow_successes = reading.window_slow_successes;
    m.window_slow_failures = reading.window_slow_failures;
  }
  return row;
}

void Exposition::add_detail(Row& row, const DetailReading& d) {
  row.detail = static_cast<std::uint32_t>(details_.size());
  details_.push_back(Detail{d.latency, d.transitions});
}

void Exposition::add_components(Row& row, const ComponentReading& c) {
  if (!c.has_fallback && !c.has_retry && !c.has_budget && !c.has_bulkhead) return;
  row.components = static_cast<std::uint32_t>(components_.size());
  components_.push_back(c);
}

void Exposition::add_registry(RegistryReading reading, std::string_view name) {
  Registry r;
  r.name.assign(name);
  r.labels_begin = static_cast<std::uint32_t>(labels_.size());
  labels_.append("{registry=\"");
  append_label_value(labels_, name);
  labels_.push_back('"');
  r.labels_size = static_cast<std::uint32_t>(labels_.size() - r.labels_begin);
  r.reading = std::move(reading);
  r.reading.name = std::string_view();  // the registry's own string may not outlive us
  registries_.push_back(std::move(r));
}

std::string Exposition::str() const {
  std::ostringstream out;
  write(out);
  return std::move(out).str();
}

namespace {

// The label tails of a scrape, rendered once: `,kind="failed"} ` and the like. Every
// sample line is then <name><labels of its row><tail><value>.
struct Tails {
  std::string close = "} ";
  std::array<std::string, kStateCount> state;
  std::array<std::string, kTransitionPairs> transition;
  std::array<std::string, LatencyBuckets::kCount> le;
  std::string successful, failed, ignored, cancelled, rejected, not_permitted;
  std::array<std::string, 4> retry;

  static std::string tail(std::string_view label, std::string_view value) {
    std::string t = ",";
    t.append(label).append("=\"").append(value).append("\"} ");
    return t;
  }

  Tails() {
    for (std::size_t s = 0; s < kStateCount; ++s)
      state[s] = tail("state", to_string(static_cast<State>(s)));
    for (std::size_t i = 0; i < kTransitionPairs; ++i) {
      transition[i] = ",from=\"";
      transition[i].append(to_string(transition_from(i))).append("\",to=\"");
      transition[i].append(to_string(transition_to(i))).append("\"} ");
    }
    for (std::size_t b = 0; b < LatencyBuckets::kCount; ++b)
      le[b] = tail("le", LatencyBuckets::kLabels[b]);
    successful = tail("kind", "successful");
    failed = tail("kind", "failed");
    ignored = tail("kind", "ignored");
    cancelled = tail("kind", "cancelled");
    rejected = tail("kind", "rejected");
    not_permitted = tail("kind", "not_permitted");
    for (std::size_t k = 0; k < retry.size(); ++k)
      retry[k] = tail("kind", to_string(static_cast<RetryCallKind>(k)));
  }
};

}  // namespace

void Exposition::write(std::ostream& out) const {
  Writer w(out);
  const Tails t;
  const std::string& p = options_.prefix;
  std::string name, suffixed;
  auto named = [&](std::string_view rest) -> const std::string& {
    name.assign(p);
    name.push_back('_');
    name.append(rest);
    return name;
  };
  auto labels_of = [&](const auto& it) {
    return std::string_view(labels_.data() + it.labels_begin,
                            it.labels_size);  // in range by construction
  };

  // Writes one family: its header, then f(name, labels, item) for the items that pass
  // `has`. A family with no sample is left out entirely.
  auto family = [&](const auto& items, std::string_view rest, std::string_view type,
                    std::string_view help, auto has, auto f) {
    bool any = false;
    for (const auto& it : items) {
      if (has(it)) {
        any = true;
        break;
      }
    }
    if (!any) return;
    const std::string& n = named(rest);
    w.family(n, type, help);
    for (const auto& it : items) {
      if (has(it)) f(n, labels_of(it), it);
    }
  };
  const auto all = [](const auto&) { return true; };

  auto latency_family = [&](const auto& items, std::string_view rest, std::string_view help,
                            auto latency_of) {
    family(
        items, rest, "histogram", help, [&](const auto& it) { return latency_of(it) != nullptr; },
        [&](const std::string& n, std::string_view labels, const auto& it) {
          const HistogramReading& h = *latency_of(it);
          suffixed.assign(n).append("_bucket");
          std::uint64_t cumulative = 0;
          for (std::size_t b = 0; b < LatencyBuckets::kCount; ++b) {
            cumulative += h.buckets[b];
            w.line(suffixed, labels, t.le[b], cumulative);
          }
          suffixed.assign(n).append("_sum");
          w.line(suffixed, labels, t.close, seconds(h.sum_nanos));
          suffixed.assign(n).append("_count");
          w.line(suffixed, labels, t.close, cumulative);
        });
  };
  auto transitions_family = [&](const auto& items, std::string_view rest, auto transitions_of) {
    family(
        items, rest, "counter", "State transitions, by from and to state.",
        [&](const auto& it) { return transitions_of(it) != nullptr; },
        [&](const std::string& n, std::string_view labels, const auto& it) {
          const TransitionReading& tr = *transitions_of(it);
          for (std::size_t i = 0; i < kTransitionPairs; ++i) {
            if (tr[i] != 0 || automatic(i)) w.line(n, labels, t.transition[i], tr[i]);
          }
        });
  };
  auto component_families = [&](const auto& items, std::string_view scope, auto components_of) {
    // scope: "" for per-breaker families, "registry_" for registry totals.
    const std::string s(scope);
    family(
        items, s + "fallback_calls_total", "counter",
        "Calls answered by a fallback, by kind: rejected (no attempt reached the dependency) or "
        "failed.",
        [&](const auto& it) {
          return components_of(it) != nullptr && components_of(it)->has_fallback;
        },
        [&](const std::string& n, std::string_view labels, const auto& it) {
          const ComponentReading& c = *components_of(it);
          w.line(n, labels, t.rejected, c.fallbacks[0]);
          w.line(n, labels, t.failed, c.fallbacks[1]);
        });
    auto has_retry = [&](const auto& it) {
      return components_of(it) != nullptr && components_of(it)->has_retry;
    };
    family(items, s + "retry_calls_total", "counter",
           "Calls through a retry, by how they ended (Resilience4j's kinds).", has_retry,
           [&](const std::string& n, std::string_view labels, const auto& it) {
             const ComponentReading& c = *components_of(it);
             for (std::size_t k = 0; k < c.retry_calls.size(); ++k) {
               w.line(n, labels, t.retry[k], c.retry_calls[k]);
             }
           });
    family(items, s + "retry_retries_total", "counter",
           "Retries started (attempts after the first).", has_retry,
           [&](const std::string& n, std::string_view labels, const auto& it) {
             w.line(n, labels, t.close, components_of(it)->retries);
           });
    family(items, s + "retry_budget_exhausted_total", "counter",
           "Retries refused because the retry budget was spent.", has_retry,
           [&](const std::string& n, std::string_view labels, const auto& it) {
             w.line(n, labels, t.close, components_of(it)->retry_budget_exhausted);
           });
    family(
        items, s + "retry_budget_tokens", "gauge", "Retries the retry budget would allow now.",
        [&](const auto& it) {
          return components_of(it) != nullptr && components_of(it)->has_budget;
        },
        [&](const std::string& n, std::string_view labels, const auto& it) {
          w.line(n, labels, t.close, components_of(it)->budget_tokens);
        });
    auto has_bulkhead = [&](const auto& it) {
      return components_of(it) != nullptr && components_of(it)->has_bulkhead;
    };
    auto bulkhead_max = [&](const auto& it) {
      return has_bulkhead(it) && components_of(it)->bulkhead_max > 0;
    };
    family(items, s + "bulkhead_concurrent_calls", "gauge", "Calls holding a bulkhead slot now.",
           has_bulkhead, [&](const std::string& n, std::string_view labels, const auto& it) {
             w.line(n, labels, t.close, components_of(it)->bulkhead_in_use);
           });
    family(items, s + "bulkhead_available_concurrent_calls", "gauge",
           "Free bulkhead slots (Resilience4j's name).", bulkhead_max,
           [&](const std::string& n, std::string_view labels, const auto& it) {
             const ComponentReading& c = *components_of(it);
             w.line(n, labels, t.close,
                    c.bulkhead_max > c.bulkhead_in_use ? c.bulkhead_max - c.bulkhead_in_use : 0);
           });
    family(items, s + "bulkhead_max_allowed_concurrent_calls", "gauge",
           "The bulkhead's limit on concurrent calls (Resilience4j's name).", bulkhead_max,
           [&](const std::string& n, std::string_view labels, const auto& it) {
             w.line(n, labels, t.close, components_of(it)->bulkhead_max);
           });
    family(items, s + "bulkhead_rejected_calls_total", "counter",
           "Calls refused because the bulkhead was full.", has_bulkhead,
           [&](const std::string& n, std::string_view labels, const auto& it) {
             w.line(n, labels, t.close, components_of(it)->bulkhead_rejected);
           });
  };
  // Calls by outcome: the same four kinds per breaker and per registry.
  auto calls = [&](const std::string& n, std::string_view labels, const auto& r) {
    w.line(n, labels, t.successful, r.successes);
    w.line(n, labels, t.failed, r.failures);
    w.line(n, labels, t.ignored, r.ignored);
    w.line(n, labels, t.cancelled, r.cancelled);
  };

  // ---- per breaker ----
  if (!rows_.empty()) {
    family(rows_, "circuitbreaker_state", "gauge",
           "1 if the circuit breaker is in this state, else 0.", all,
           [&](const std::string& n, std::string_view labels, const Row& r) {
             const auto current = static_cast<std::size_t>(r.state);
             for (std::size_t s = 0; s < kStateCount; ++s) {
               w.line(n, labels, t.state[s], std::uint64_t{s == current ? 1u : 0u});
             }
           });
    family(rows_, "circuitbreaker_time_in_state_seconds", "gauge",
           "Seconds since the current state began.", all,
           [&](const std::string& n, std::string_view labels, const Row& r) {
             w.line(n, labels, t.close, seconds(Nanos(r.time_in_state_nanos)));
           });
    family(rows_, "circuitbreaker_open_seconds", "gauge",
           "Seconds since the breaker left CLOSED (open, half-open and reopenings count as one "
           "outage); 0 when closed.",
           all, [&](const std::string& n, std::string_view labels, const Row& r) {
             w.line(n, labels, t.close, r.open_seconds);
           });
    family(rows_, "circuitbreaker_calls_total", "counter",
           "Calls the breaker admitted, by outcome: successful, failed, ignored, or cancelled (no "
           "outcome reported).",
           all, [&](const std::string& n, std::string_view labels, const Row& r) {
             calls(n, labels, r);
           });
    family(
        rows_, "circuitbreaker_slow_calls_total", "counter",
        "Calls slower than slow_call_duration, by outcome (also counted in calls_total).",
        [&](const Row& r) { return r.more != kNone && more_[r.more].has_slow; },
        [&](const std::string& n, std::string_view labels, const Row& r) {
          w.line(n, labels, t.successful, more_[r.more].slow_successes);
          w.line(n, labels, t.failed, more_[r.more].slow_failures);
        });
    // kind="not_permitted" as Resilience4j's Micrometer binder has it, so its queries
    // and panels match the series label for label.
    family(rows_, "circuitbreaker_not_permitted_calls_total", "counter",
           "Calls the breaker rejected.", all,
           [&](const std::string& n, std::string_view labels, const Row& r) {
             w.line(n, labels, t.not_permitted, r.rejected);
           });
    family(rows_, "circuitbreaker_opens_total", "counter", "Transitions into OPEN or FORCED_OPEN.",
           all, [&](const std::string& n, std::string_view labels, const Row& r) {
             w.line(n, labels, t.close, r.opens);
           });
    family(
        rows_, "circuitbreaker_failure_ratio", "gauge",
        "Failure rate over the breaker's window, 0 to 1; NaN while it holds fewer than "
        "minimum_calls.",
        [&](const Row& r) { return r.more != kNone && more_[r.more].has_rates; },
        [&](const std::string& n, std::string_view labels, const Row& r) {
          w.line(n, labels, t.close, more_[r.more].failure_rate);
        });
    family(
        rows_, "circuitbreaker_slow_call_ratio", "gauge",
        "Slow-call rate over the breaker's window, 0 to 1; NaN while it holds fewer than "
        "minimum_calls.",
        [&](const Row& r) { return r.more != kNone && more_[r.more].has_rates; },
        [&](const std::string& n, std::string_view labels, const Row& r) {
          w.line(n, labels, t.close, more_[r.more].slow_call_rate);
        });
    family(
        rows_, "circuitbreaker_buffered_calls", "gauge",
        "Calls in the breaker's sliding window now, by outcome (Resilience4j's name).",
        [&](const Row& r) { return r.more != kNone && more_[r.more].has_window; },
        [&](const std::string& n, std::string_view labels, const Row& r) {
          const More& m = more_[r.more];
          w.line(n, labels, t.successful,
                 m.window_calls - std::min(m.window_calls, m.window_failures));
          w.line(n, labels, t.failed, m.window_failures);
        });
    family(
        rows_, "circuitbreaker_slow_calls", "gauge",
        "Calls slower than slow_call_duration in the breaker's sliding window now, by outcome "
        "(Resilience4j's name).",
        [&](const Row& r) { return r.more != kNone && more_[r.more].has_window; },
        [&](const std::string& n, std::string_view labels, const Row& r) {
          w.line(n, labels, t.successful, more_[r.more].window_slow_successes);
          w.line(n, labels, t.failed, more_[r.more].window_slow_failures);
        });
    family(
        rows_, "circuitbreaker_flapping", "gauge",
        "1 while the breaker is flapping (reopening again and again).",
        [](const Row& r) { return r.flapping != kNoFlapping; },
        [&](const std::string& n, std::string_view labels, const Row& r) {
          w.line(n, labels, t.close, std::uint64_t{r.flapping});
        });
    transitions_family(rows_, "circuitbreaker_transitions_total", [&](const Row& r) {
      return r.detail == kNone ? nullptr : &details_[r.detail].transitions;
    });
    latency_family(
        rows_, "circuitbreaker_call_duration_seconds",
        "Duration of the calls the breaker admitted that reported one.",
        [&](const Row& r) { return r.detail == kNone ? nullptr : &details_[r.detail].latency; });
    component_families(rows_, "", [&](const Row& r) {
      return r.components == kNone ? nullptr : &components_[r.components];
    });
  }

  // ---- per registry ----
  if (!registries_.empty()) {
    family(registries_, "registry_keys", "gauge", "Keys (breakers) the registry holds now.", all,
           [&](const std::string& n, std::string_view labels, const Registry& r) {
             w.line(n, labels, t.close, r.reading.keys);
           });
    family(registries_, "registry_keys_created_total", "counter", "Keys the registry created.", all,
           [&](const std::string& n, std::string_view labels, const Registry& r) {
             w.line(n, labels, t.close, r.reading.created);
           });
    family(registries_, "registry_keys_evicted_total", "counter", "Keys evicted (idle) or removed.",
           all, [&](const std::string& n, std::string_view labels, const Registry& r) {
             w.line(n, labels, t.close, r.reading.evicted);
           });
    family(registries_, "registry_memory_bytes", "gauge",
           "Memory the registry occupies: entries, index, metrics blocks and key storage.", all,
           [&](const std::string& n, std::string_view labels, const Registry& r) {
             w.line(n, labels, t.close, r.reading.memory_bytes);
           });
    family(registries_, "registry_breakers", "gauge", "Breakers in each state.", all,
           [&](const std::string& n, std::string_view labels, const Registry& r) {
             for (std::size_t s = 0; s < kStateCount; ++s) {
               w.line(n, labels, t.state[s], r.reading.breakers_by_state[s]);
             }
           });
    family(registries_, "registry_max_open_seconds", "gauge",
           "The longest current outage among the registry's breakers, in seconds (see "
           "circuitbreaker_open_seconds).",
           all, [&](const std::string& n, std::string_view labels, const Registry& r) {
             w.line(n, labels, t.close, r.reading.max_open_seconds);
           });
    family(registries_, "registry_calls_total", "counter",
           "Calls admitted by the registry's breakers (evicted ones included), by outcome.", all,
           [&](const std::string& n, std::string_view labels, const Registry& r) {
             calls(n, labels, r.reading);
           });
    family(
        registries_, "registry_slow_calls_total", "counter",
        "Slow calls of the registry's breakers, by outcome.",
        [](const Registry& r) { return r.reading.has_slow; },
        [&](const std::string& n, std::string_view labels, const Registry& r) {
          w.line(n, labels, t.successful, r.reading.slow_successes);
          w.line(n, labels, t.failed, r.reading.slow_failures);
        });
    family(registries_, "registry_not_permitted_calls_total", "counter",
           "Calls the registry's breakers rejected.", all,
           [&](const std::string& n, std::string_view labels, const Registry& r) {
             w.line(n, labels, t.close, r.reading.rejected);
           });
    family(registries_, "registry_opens_total", "counter", "Openings of the registry's breakers.",
           all, [&](const std::string& n, std::string_view labels, const Registry& r) {
             w.line(n, labels, t.close, r.reading.opens);
           });
    transitions_family(registries_, "registry_transitions_total",
                       [](const Registry& r) { return &r.reading.transitions; });
    latency_family(
        registries_, "registry_call_duration_seconds",
        "Duration of the calls the registry's breakers admitted that reported one.",
        [](const Registry& r) { return r.reading.has_detail ? &r.reading.latency : nullptr; });
    component_families(registries_, "registry_", [](const Registry& r) {
      const ComponentReading& c = r.reading.components;
      return c.has_fallback || c.has_retry || c.has_budget || c.has_bulkhead ? &c : nullptr;
    });
  }
}

}  // namespace bulwark::prometheus
