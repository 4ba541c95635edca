#include "bulwark/version.h"

namespace bulwark {

const char* version() noexcept { return BULWARK_VERSION_STRING; }

}  // namespace bulwark
