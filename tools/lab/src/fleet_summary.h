// Internal to the lab: a fleet run's totals and the requirement's goals, from the
// instances' results (fleet.h). Shared by the runs and the tests' expectations.

#ifndef BULWARK_LAB_SRC_FLEET_SUMMARY_H_
#define BULWARK_LAB_SRC_FLEET_SUMMARY_H_

#include <string>
#include <vector>

#include "bulwark/lab/fleet.h"

namespace bulwark::lab::detail {

// Sums the instances' counts and orders their times to open. O(n log n).
FleetRun summarize_fleet_run(std::string name, const std::vector<ConfigurationResult>& instances);
FleetGoals fleet_goals(const FleetConfigurationResult& r, const FleetSpec& spec);

}  // namespace bulwark::lab::detail

#endif  // BULWARK_LAB_SRC_FLEET_SUMMARY_H_
