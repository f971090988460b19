// Measures, when a group forms, what the cost model needs from this rank (DESIGN.md §5): the
// latency α and time per byte β of its link to every peer, and γ, the time its reduce kernel takes
// per byte. The coordinator combines every rank's report into the group's plan.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "collective/status.h"
#include "engine/abort_signal.h"
#include "engine/peer_mesh.h"
#include "gradsync.pb.h"

namespace gradsync::daemon {

struct ProbeSettings {
  int round_trips = 16;                   // per link, for α
  std::uint64_t small_bytes = 8;          // per round trip message
  std::uint64_t bulk_bytes = 4ull << 20;  // per direction, for β
  std::size_t segment_bytes = 1 << 20;
  std::chrono::milliseconds op_timeout{10'000};  // each probe op's deadline
};

// Every rank of the mesh must call this at the same point of its op sequence: the probes are ops
// like any other, pairing the ranks in a round-robin tournament (collective/link_probe.h).
Status probe_links(engine::PeerMesh& mesh, const engine::AbortSignal& abort,
                   const ProbeSettings& settings, proto::ProbeReport& report);

}  // namespace gradsync::daemon
