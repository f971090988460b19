// Measures, when a group forms, what the cost model needs from this rank (docs/architecture.md §9):
// the latency α and time per byte β of its link to every peer, and γ, the time its reduce kernel
// takes per byte. The coordinator combines every rank's report into the group's network model.
#pragma once

#include <cstdint>

#include "collective/status.h"
#include "daemon/timed_op.h"
#include "gradsync.pb.h"

namespace gradsync::daemon {

struct ProbeSettings {
  int round_trip_ops = 9;  // per link; α is the median over them
  int round_trips_per_op = 4;
  std::uint64_t small_bytes = 8;          // per round trip message
  std::uint64_t bulk_bytes = 2ull << 20;  // per direction, for β
  OwnOpSettings ops;
};

// Every rank of the mesh must call this at the same point of its op sequence: the probes are ops
// like any other, pairing the ranks in a round-robin tournament (collective/link_probe.h).
Status probe_links(engine::PeerMesh& mesh, const engine::AbortSignal& abort,
                   const ProbeSettings& settings, proto::ProbeReport& report);

}  // namespace gradsync::daemon
