// A worker daemon (docs/architecture.md §6): joins the coordinator, forms the data mesh with its
// peers, serves local clients, and runs their ops one at a time, in the order they were submitted.
// worker.cc starts its threads: the op thread (op_thread.h), the thread that forms generations
// (generation_former.h) and the control thread (watchdog.h, the coordinator's channel), around
// the one state they share (coordinator_link.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

#include "collective/types.h"
#include "config/knobs.h"
#include "net/group_secret.h"
#include "net/socket.h"

namespace gradsync::daemon {

struct WorkerConfig {
  net::HostPort coordinator;
  net::HostPort listen;
  std::string advertise_host;  // empty: the local address of the connection to the coordinator
  std::string socket_path;
  int requested_rank = -1;
  int local_ranks = knobs::kLocalRanks.default_value;  // clients' ranks this daemon serves
  std::optional<Algorithm> algorithm;                  // forced for every op that asks for auto
  std::size_t segment_bytes = knobs::kSegmentBytes.default_value;
  std::chrono::microseconds spin{knobs::kSpinUs.default_value};
  std::chrono::milliseconds stall_timeout{knobs::kStallTimeoutMs.default_value};
  // Served besides the daemon's own user and root.
  net::ClientAccess clients{knobs::kClientUid.default_value, knobs::kClientGid.default_value};
  std::chrono::milliseconds join_timeout{knobs::kJoinTimeoutMs.default_value};
  std::chrono::milliseconds coordinator_timeout{knobs::kCoordinatorTimeoutMs.default_value};
  bool rejoin = true;  // false: a worker whose generation ends exits instead of joining the next
  std::chrono::milliseconds heartbeat_interval{500};
  net::GroupSecret secret;  // empty: none (see MembershipConfig::secret)
};

// Runs until the process is stopped; returns non-zero if the worker cannot join its group.
int run_worker(const WorkerConfig& config);

}  // namespace gradsync::daemon
