// bulwark/redis/prometheus.h — a Fleet's reading in the Prometheus text format.
//
//   bulwark::redis::write_prometheus(out, fleet.reading());
//
// Families (label `instance` on all, `key` on the per-key ones):
//   bulwark_fleet_syncs_total, bulwark_fleet_sync_errors_total,
//   bulwark_fleet_malformed_values_total, bulwark_fleet_dropped_transitions_total,
//   bulwark_fleet_adopted_total{kind="open"|"close"}           counters
//   bulwark_fleet_connected, bulwark_fleet_last_sync_age_seconds gauges (the age is
//     absent until the first successful sync)
//   bulwark_fleet_rtt_seconds                                   histogram of round trips
//   bulwark_fleet_key_shared_open, bulwark_fleet_key_lease_holder gauges, 0 or 1
//   bulwark_fleet_key_window_calls{outcome="success"|"failure"}  fleet-wide, counting on
//   bulwark_fleet_key_decision{decision,decided_by,reason}       1 for the current one
// Cost: one pass over the reading's keys; allocates the text. Thread-safe (reads a copy).

#ifndef BULWARK_REDIS_PROMETHEUS_H_
#define BULWARK_REDIS_PROMETHEUS_H_

#include <ostream>

#include "bulwark/redis/fleet.h"

namespace bulwark::redis {

void write_prometheus(std::ostream& out, const FleetReading& reading);

}  // namespace bulwark::redis

#endif  // BULWARK_REDIS_PROMETHEUS_H_
