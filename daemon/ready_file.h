// Publishes the address a daemon really listens on (port 0 picks one), for the process that
// started it: written to a temporary name and renamed, so a reader never sees half a line.
#pragma once

#include <string>

#include "collective/status.h"

namespace gradsync::daemon {

Status write_ready_file(const std::string& path, const std::string& line);

}  // namespace gradsync::daemon
