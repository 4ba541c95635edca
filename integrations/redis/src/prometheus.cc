#include "bulwark/redis/prometheus.h"

#include <iterator>
#include <string>

#include "bulwark/prometheus.h"

namespace bulwark::redis {

void write_prometheus(std::ostream& out, const FleetReading& r) {
  using prometheus::append_label_value;
  prometheus::Writer w(out);
  std::string inst = "instance=\"";
  append_label_value(inst, r.instance);
  inst += '"';

  auto counter = [&](const char* name, const char* help, std::uint64_t v) {
    w.family(name, "counter", help);
    w.sample(name, "", inst, "", v);
  };
  counter("bulwark_fleet_syncs_total", "Fleet syncs.", r.syncs);
  counter("bulwark_fleet_sync_errors_total", "Fleet syncs whose exchange with the store failed.",
          r.sync_errors);
  counter("bulwark_fleet_malformed_values_total", "Values read from the store and rejected.",
          r.malformed_values);
  counter("bulwark_fleet_window_trips_total",
          "Breakers opened here because the fleet's window reached a rate threshold.",
          r.window_trips);
  counter("bulwark_fleet_refused_opens_total",
          "Opens read from the store that would last longer than the breaker's longest open "
          "period: not adopted.",
          r.refused_opens);
  counter("bulwark_fleet_store_repairs_total",
          "Corrupt values the store found in its own keys and replaced or removed.",
          r.store_repairs);
  counter("bulwark_fleet_dropped_transitions_total",
          "Local transitions dropped by a full queue (each forces a re-read).",
          r.dropped_transitions);
  w.family("bulwark_fleet_adopted_total", "counter", "Breakers moved by the fleet's decisions.");
  w.sample("bulwark_fleet_adopted_total", "", inst, "kind=\"open\"", r.adopted_opens);
  w.sample("bulwark_fleet_adopted_total", "", inst, "kind=\"close\"", r.adopted_closes);

  w.family("bulwark_fleet_connected", "gauge", "1 if the last exchange with the store succeeded.");
  w.sample("bulwark_fleet_connected", "", inst, "", std::uint64_t{r.connected ? 1u : 0u});
  if (r.since_last_success.count() >= 0) {
    w.family("bulwark_fleet_last_sync_age_seconds", "gauge",
             "Seconds since the last successful sync.");
    w.sample("bulwark_fleet_last_sync_age_seconds", "", inst, "",
             static_cast<double>(r.since_last_success.count()) / 1000.0);
  }

  w.family("bulwark_fleet_unattached_records", "gauge",
           "Open decisions kept for keys this instance has not attached.");
  w.sample("bulwark_fleet_unattached_records", "", inst, "", r.unattached_records);
  w.family("bulwark_fleet_store_clock_offset_seconds", "gauge",
           "The store's clock minus this instance's wall clock, as of the last sync.");
  w.sample("bulwark_fleet_store_clock_offset_seconds", "", inst, "",
           static_cast<double>(r.store_clock_offset_ms) / 1000.0);

  w.family("bulwark_fleet_rtt_seconds", "histogram", "Round-trip time of successful exchanges.");
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < r.rtt_counts.size(); ++i) {
    cumulative += r.rtt_counts[i];
    std::string le = "le=\"";
    if (i < std::size(FleetReading::kRttBucketsMs)) {
      prometheus::append_value(le, FleetReading::kRttBucketsMs[i] / 1000.0);
    } else {
      le += "+Inf";
    }
    le += '"';
    w.sample("bulwark_fleet_rtt_seconds", "_bucket", inst, le, cumulative);
  }
  w.sample("bulwark_fleet_rtt_seconds", "_sum", inst, "", r.rtt_sum_ms / 1000.0);
  w.sample("bulwark_fleet_rtt_seconds", "_count", inst, "", cumulative);

  std::vector<std::string> labels;
  labels.reserve(r.keys.size());
  for (const FleetKeyReading& k : r.keys) {
    std::string l = inst + ",key=\"";
    append_label_value(l, k.key);
    l += '"';
    labels.push_back(std::move(l));
  }
  // A gauge family of one 0/1 sample per key.
  const auto flags = [&](const char* name, const char* help, bool FleetKeyReading::*flag) {
    w.family(name, "gauge", help);
    for (std::size_t i = 0; i < r.keys.size(); ++i)
      w.sample(name, "", labels[i], "", std::uint64_t{r.keys[i].*flag ? 1u : 0u});
  };
  flags("bulwark_fleet_key_shared_open", "1 while the fleet holds the key open.",
        &FleetKeyReading::shared_open);
  flags("bulwark_fleet_key_lease_holder", "1 while this instance holds the key's half-open lease.",
        &FleetKeyReading::lease_holder);
  w.family("bulwark_fleet_key_window_calls", "gauge",
           "Fleet-wide calls for the key over the count window (counting on).");
  for (std::size_t i = 0; i < r.keys.size(); ++i) {
    w.sample("bulwark_fleet_key_window_calls", "", labels[i], "outcome=\"success\"",
             r.keys[i].fleet_successes);
    w.sample("bulwark_fleet_key_window_calls", "", labels[i], "outcome=\"failure\"",
             r.keys[i].fleet_failures);
  }
  w.family("bulwark_fleet_key_fleet_window_calls", "gauge",
           "The fleet's window for the key as of the last sync (fleet_window keys).");
  for (std::size_t i = 0; i < r.keys.size(); ++i) {
    const FleetKeyReading& k = r.keys[i];
    if (!k.fleet_window) continue;
    w.sample("bulwark_fleet_key_fleet_window_calls", "", labels[i], "kind=\"all\"", k.window_calls);
    w.sample("bulwark_fleet_key_fleet_window_calls", "", labels[i], "kind=\"failure\"",
             k.window_failures);
    w.sample("bulwark_fleet_key_fleet_window_calls", "", labels[i], "kind=\"slow\"", k.window_slow);
  }
  flags("bulwark_fleet_key_fleet_window_decision",
        "1 while the key's last decision is an open by the fleet's window.",
        &FleetKeyReading::fleet_window_decision);
  w.family("bulwark_fleet_key_decision", "gauge",
           "The key's last decision: shared (the fleet's) or local (this instance's alone).");
  for (std::size_t i = 0; i < r.keys.size(); ++i) {
    const FleetKeyReading& k = r.keys[i];
    std::string extra = "decision=\"";
    extra += to_string(k.decision);
    extra += "\",decided_by=\"";
    append_label_value(extra, k.decided_by);
    extra += "\",reason=\"";
    extra += to_string(k.reason);
    extra += '"';
    w.sample("bulwark_fleet_key_decision", "", labels[i], extra, std::uint64_t{1});
  }
}

}  // namespace bulwark::redis
