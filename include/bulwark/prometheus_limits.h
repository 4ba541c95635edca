// bulwark/prometheus_limits.h — rate limiters and throttles in the Prometheus text format.
//
//   bulwark::prometheus::Exposition scrape;          // breakers, registries (prometheus.h)
//   scrape.add(hosts);
//   scrape.write(out);
//   bulwark::prometheus::Writer w(out);               // then the limit families, same stream
//   bulwark::prometheus::write_rate_limiters(w, {search_limiter.snapshot()});
//   bulwark::prometheus::write_rate_limiters(w, tenants.snapshots());   // a keyed registry
//   bulwark::prometheus::write_throttles(w, {search_throttle.snapshot()});
//
// A family may appear only once in an exposition: gather every limiter's snapshot
// into one call. Families (labels: name, and key for a registry's limiters):
//   <p>_rate_limiter_refused_total          counter: try_acquire() refusals
//   <p>_rate_limiter_delayed_total          counter: permits reserved with a wait
//   <p>_rate_limiter_permits_per_second     gauge: the configured rate
//   <p>_rate_limiter_burst                  gauge: permits admitted back to back at most
//   <p>_throttle_requests                   gauge: requests in the window (local rejections too)
//   <p>_throttle_accepts                    gauge: requests the dependency accepted, in the window
//   <p>_throttle_reject_probability         gauge: 0..1, the SRE rule's p now
//   <p>_throttle_rejected_total             counter: requests rejected locally
// Cost: formats into the Writer's buffer; allocates the label text.
// Thread-safety: a Writer is used by one thread; snapshots are values.

#ifndef BULWARK_PROMETHEUS_LIMITS_H_
#define BULWARK_PROMETHEUS_LIMITS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bulwark/prometheus.h"
#include "bulwark/rate_limiter.h"
#include "bulwark/throttle.h"

namespace bulwark::prometheus {

namespace detail {
inline std::string limit_labels(const std::string& name, const std::string& key) {
  std::string l = "name=\"";
  append_label_value(l, name);
  l += '"';
  if (!key.empty()) {
    l += ",key=\"";
    append_label_value(l, key);
    l += '"';
  }
  return l;
}
}  // namespace detail

inline void write_rate_limiters(Writer& w, const std::vector<RateLimiterSnapshot>& limiters,
                                std::string_view prefix = "bulwark") {
  if (limiters.empty()) return;
  std::vector<std::string> labels;
  labels.reserve(limiters.size());
  for (const auto& s : limiters) labels.push_back(detail::limit_labels(s.name, s.key));
  const std::string p(prefix);
  auto counter = [&](const char* family, const char* help, auto field) {
    const std::string name = p + family;
    w.family(name, "counter", help);
    for (std::size_t i = 0; i < limiters.size(); ++i) {
      w.sample(name, "", labels[i], "", field(limiters[i]));
    }
  };
  counter("_rate_limiter_refused_total", "Requests the rate limiter refused.",
          [](const RateLimiterSnapshot& s) { return s.refused; });
  counter("_rate_limiter_delayed_total", "Permits reserved with a wait.",
          [](const RateLimiterSnapshot& s) { return s.delayed; });
  const std::string rate = p + "_rate_limiter_permits_per_second";
  w.family(rate, "gauge", "The rate limiter's configured rate.");
  for (std::size_t i = 0; i < limiters.size(); ++i) {
    w.sample(rate, "", labels[i], "", limiters[i].permits_per_second);
  }
  const std::string burst = p + "_rate_limiter_burst";
  w.family(burst, "gauge", "Permits the rate limiter admits back to back at most.");
  for (std::size_t i = 0; i < limiters.size(); ++i) {
    w.sample(burst, "", labels[i], "", limiters[i].burst);
  }
}

inline void write_throttles(Writer& w, const std::vector<ThrottleSnapshot>& throttles,
                            std::string_view prefix = "bulwark") {
  if (throttles.empty()) return;
  std::vector<std::string> labels;
  labels.reserve(throttles.size());
  for (const auto& s : throttles) labels.push_back(detail::limit_labels(s.name, {}));
  const std::string p(prefix);
  auto family = [&](const char* suffix, const char* type, const char* help, auto field) {
    const std::string name = p + suffix;
    w.family(name, type, help);
    for (std::size_t i = 0; i < throttles.size(); ++i) {
      w.sample(name, "", labels[i], "", field(throttles[i]));
    }
  };
  family("_throttle_requests", "gauge", "Requests in the throttle's window, local rejections too.",
         [](const ThrottleSnapshot& s) { return s.requests; });
  family("_throttle_accepts", "gauge", "Requests the dependency accepted, in the window.",
         [](const ThrottleSnapshot& s) { return s.accepts; });
  family("_throttle_reject_probability", "gauge", "Probability of a local rejection now.",
         [](const ThrottleSnapshot& s) { return s.reject_probability; });
  family("_throttle_rejected_total", "counter", "Requests the throttle rejected locally.",
         [](const ThrottleSnapshot& s) { return s.throttled; });
}

}  // namespace bulwark::prometheus

#endif  // BULWARK_PROMETHEUS_LIMITS_H_
