// The fleet (fleet.h) in a build without bulwark::redis: every run is refused, clearly.

#include "bulwark/lab/fleet.h"
#include "bulwark/lab/input_error.h"

namespace bulwark::lab {

bool fleet_supported() noexcept { return false; }

FleetSimulationResult simulate_fleet(const Scenario& scenario) {
  throw InputError({scenario.source}, "fleet",
                   "this build of bulwark has no fleet support: configure with "
                   "-DBULWARK_REDIS=ON");
}

}  // namespace bulwark::lab
