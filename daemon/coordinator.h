// The coordinator (docs/architecture.md §7): admits workers, assigns ranks, publishes the peer
// table, collects the workers' link measurements and publishes the plan built from them
// (docs/architecture.md §9), and watches heartbeats. When a worker is lost it tells every other
// worker, so their ops in flight fail at once rather than at their deadline. It never sees tensor
// bytes. The logic is Membership's; this is its network shell.
#pragma once

#include <string>

#include "daemon/membership.h"
#include "net/socket.h"

namespace gradsync::daemon {

struct CoordinatorConfig {
  net::HostPort listen;
  std::string ready_file;  // if set, receives "HOST:PORT\n" once listening
  MembershipConfig membership;
};

// Runs until SIGINT or SIGTERM (then returns 0); returns non-zero if it cannot start.
int run_coordinator(const CoordinatorConfig& config);

}  // namespace gradsync::daemon
