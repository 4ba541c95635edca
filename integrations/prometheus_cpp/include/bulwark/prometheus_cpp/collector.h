// bulwark/prometheus_cpp/collector.h — bulwark's metrics through an application's own
// prometheus-cpp Registry and Exposer (Debian: prometheus-cpp-dev).
//
//   auto collector = std::make_shared<bulwark::prometheus_cpp::Collector>();
//   collector->add(hosts);                       // a registry: anything prometheus::write takes
//   collector->add(http_client);                 // anything with write_metrics(std::ostream&)
//   collector->add([&](std::ostream& out) { fleet_metrics(out); });   // any text writer
//   exposer.RegisterCollectable(collector);      // prometheus::Exposer, or a Registry's
//
// Nothing is copied into prometheus-cpp metric objects ahead of time: at each scrape,
// Collect() asks every source for bulwark's own text exposition and turns it into
// prometheus::MetricFamily values, so a registry of a million keys costs no metric
// object per key between scrapes, and the names, labels and values are exactly those of
// bulwark's text writer (bulwark/prometheus.h, docs/observability.md). A family written
// by several sources (two registries) is served once, with the series of all of them.
//
// Cost: per scrape, what the sources' writers cost plus parsing their text (linear in
// its size). Thread-safety: any member may be called from any thread; one mutex is held
// for a whole scrape, so scrapes run one at a time and remove() waits for a scrape in
// progress. The sources may be in use by any number of threads meanwhile.
// Lifetime: add(T&) keeps a reference: the source must outlive its registration
// (remove() it first).
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "bulwark/prometheus.h"

namespace bulwark::prometheus_cpp {

// Writes a source's metrics in bulwark's text exposition format.
using Source = std::function<void(std::ostream&)>;

// Identifies a registered source, for remove().
enum class SourceId : std::size_t {};

class Collector final : public ::prometheus::Collectable {
 public:
  // Registers a text writer.
  SourceId add(Source writer);

  // Registers an object by reference: one with a `write_metrics(std::ostream&)` member
  // (the HTTP clients, the fleet), or one that `bulwark::prometheus::write(out, source)`
  // accepts (a registry).
  template <class T>
  requires(!std::is_convertible_v<T&, Source>) SourceId add(T& source) {
    if constexpr (requires(std::ostream & out) { source.write_metrics(out); }) {
      return add(Source([&source](std::ostream& out) { source.write_metrics(out); }));
    } else {
      return add(Source([&source](std::ostream& out) { bulwark::prometheus::write(out, source); }));
    }
  }

  // Unregisters a source; false if it was not registered. A scrape already reading it
  // finishes first.
  bool remove(SourceId id);

  // prometheus::Collectable: every source's families, merged by name, and
  // bulwark_prometheus_cpp_parse_errors_total, the scrapes in which a source's text
  // could not be read to its end (what was read before the problem is served).
  std::vector<::prometheus::MetricFamily> Collect() const override;

  // The last such problem: the source, the line and what was wrong; empty if none.
  std::string last_error() const;

 private:
  struct Entry {
    SourceId id;
    Source writer;
  };
  mutable std::mutex mutex_;
  std::vector<Entry> sources_;
  std::size_t next_id_ = 0;
  mutable std::uint64_t errors_ = 0;
  mutable std::string last_error_;
};

// Parses text in the Prometheus text exposition format (0.0.4) as bulwark writes it —
// HELP and TYPE lines, counters, gauges, untyped samples, histograms and summaries —
// into families, in the order of their first line, appending to `families` and merging
// into a family of the same name already there. Returns an empty string on success, or
// the first problem (its line number and what is wrong); families parsed before it stay.
std::string parse_exposition(std::string_view text,
                             std::vector<::prometheus::MetricFamily>& families);

}  // namespace bulwark::prometheus_cpp
