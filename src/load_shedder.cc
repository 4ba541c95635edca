#include "bulwark/load_shedder.h"

#include <string>

#include "bulwark/prometheus.h"

namespace bulwark {

Expected<void, ConfigError> validate(const LoadShedderConfig& c) {
  auto fail = [&](std::string field, std::string message) {
    return Unexpected(
        ConfigError{"load shedder '" + c.name + "'", std::move(field), std::move(message)});
  };
  auto share_ok = [](double s) { return s > 0.0 && s <= 1.0; };
  if (c.name.empty()) return fail("name", "must not be empty");
  if (!share_ok(c.normal_share))
    return fail("normal_share", "must be in (0, 1] (got " + std::to_string(c.normal_share) + ")");
  if (!share_ok(c.sheddable_share) || c.sheddable_share > c.normal_share) {
    return fail("sheddable_share",
                "must be in (0, normal_share] (got " + std::to_string(c.sheddable_share) + ")");
  }
  if (c.target_delay <= Nanos::zero()) {
    return fail("target_delay",
                "must be positive (got " + detail::format_duration(c.target_delay) + ")");
  }
  if (c.interval < c.target_delay) {
    return fail("interval",
                "must be at least target_delay (got " + detail::format_duration(c.interval) + ")");
  }
  if (c.initial_service_time < Nanos::zero()) {
    return fail("initial_service_time", "must not be negative (got " +
                                            detail::format_duration(c.initial_service_time) + ")");
  }
  if (!(c.service_time_weight > 0.0 && c.service_time_weight <= 1.0)) {
    return fail("service_time_weight",
                "must be in (0, 1] (got " + std::to_string(c.service_time_weight) + ")");
  }
  if (c.min_retry_after <= Nanos::zero()) {
    return fail("min_retry_after",
                "must be positive (got " + detail::format_duration(c.min_retry_after) + ")");
  }
  if (c.max_retry_after < c.min_retry_after) {
    return fail("max_retry_after", "must be at least min_retry_after (got " +
                                       detail::format_duration(c.max_retry_after) + ")");
  }
  if (c.http_status != 503 && c.http_status != 429) {
    return fail("http_status", "must be 503 or 429 (got " + std::to_string(c.http_status) + ")");
  }
  return {};
}

namespace prometheus {

void write_load_shedders(std::ostream& out, const LoadShedderSeries* series, std::size_t count,
                         std::string_view prefix) {
  Writer w(out);
  const std::string p = std::string(prefix) + "_load_shedder_";
  std::vector<std::string> labels(count);
  for (std::size_t i = 0; i < count; ++i) {
    labels[i] = "name=\"";
    append_label_value(labels[i], series[i].name);
    labels[i] += '"';
  }
  auto each = [&](const std::string& name, const char* type, const char* help, auto&& value) {
    w.family(name, type, help);
    for (std::size_t i = 0; i < count; ++i) value(name, labels[i], series[i].snapshot);
  };
  const auto plain = [&](auto get) {
    return [&w, get](const std::string& n, const std::string& l, const LoadShedderSnapshot& s) {
      w.sample(n, "", l, "", get(s));
    };
  };
  each(p + "admitted_total", "counter", "Requests admitted, by priority class.",
       [&](const std::string& n, const std::string& l, const LoadShedderSnapshot& s) {
         for (std::size_t c = 0; c < kPriorityCount; ++c) {
           const std::string extra =
               "priority=\"" + std::string(to_string(static_cast<Priority>(c))) + "\"";
           w.sample(n, "", l, extra, s.admitted[c]);
         }
       });
  each(p + "refused_total", "counter", "Requests refused, by reason.",
       [&](const std::string& n, const std::string& l, const LoadShedderSnapshot& s) {
         for (std::size_t r = 0; r < kShedReasonCount; ++r) {
           const std::string extra =
               "reason=\"" + std::string(to_string(static_cast<ShedReason>(r))) + "\"";
           w.sample(n, "", l, extra, s.refused[r]);
         }
       });
  each(p + "queued_total", "counter", "Requests that waited in the queue.",
       plain([](const LoadShedderSnapshot& s) { return s.queued_total; }));
  each(p + "in_flight", "gauge", "Requests being served now.",
       plain([](const LoadShedderSnapshot& s) { return std::uint64_t{s.in_flight}; }));
  each(p + "queue_length", "gauge", "Requests waiting now.",
       plain([](const LoadShedderSnapshot& s) { return std::uint64_t{s.queued}; }));
  each(p + "limit", "gauge", "The concurrency limit now.",
       plain([](const LoadShedderSnapshot& s) { return std::uint64_t{s.limit}; }));
  each(p + "overloaded", "gauge", "1 while the queue is standing (served LIFO), else 0.",
       plain([](const LoadShedderSnapshot& s) { return std::uint64_t{s.overloaded ? 1u : 0u}; }));
  each(p + "service_time_seconds", "gauge", "The expected service time (EWMA).",
       plain([](const LoadShedderSnapshot& s) {
         return std::chrono::duration<double>(s.service_time).count();
       }));
}

}  // namespace prometheus
}  // namespace bulwark
