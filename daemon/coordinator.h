// The coordinator (DESIGN.md §1): admits workers, assigns ranks, publishes the peer table, collects
// the workers' link measurements and publishes the plan built from them (DESIGN.md §5), and watches
// heartbeats. When a worker is lost it tells every other worker, so
// their ops in flight fail at once rather than at their deadline. It never sees tensor bytes.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "collective/cost_model.h"
#include "net/socket.h"

namespace gradsync::daemon {

struct CoordinatorConfig {
  net::HostPort listen;
  int world_size = 1;
  std::string ready_file;  // if set, receives "HOST:PORT\n" once listening
  // Given: the algorithm table is built from it. Empty: the workers probe their links and the
  // table is built from what they measured.
  std::optional<NetworkModel> network;
  std::chrono::milliseconds heartbeat_timeout{3000};
  // How long, by the measured model, calibrating all-reduce may take once the links are probed;
  // 0: no calibration, the table comes from the α-β-γ model alone.
  std::chrono::milliseconds calibration_budget{750};
};

// Runs until the process is stopped; returns non-zero only if it cannot start.
int run_coordinator(const CoordinatorConfig& config);

}  // namespace gradsync::daemon
