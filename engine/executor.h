// Runs one rank's Schedule over its PeerMesh (docs/architecture.md §4). Every transfer is cut into
// segments; within a round all sends and receives progress together in one loop that waits on every
// channel, payloads land straight in their destination (or in one scratch segment per peer, to be
// reduced), and every frame's header is checked against what this rank expects before any byte of
// it is used.
//
// On failure (a mismatched peer, a lost peer, a bad frame, the deadline, an abort from the
// coordinator) this rank finishes any half-written frame, tells every peer why with an abort
// frame, and returns the error; peers still in the op fail with the same reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collective/schedule.h"
#include "collective/status.h"
#include "config/knobs.h"
#include "engine/abort_signal.h"
#include "engine/frame.h"
#include "engine/peer_mesh.h"
#include "net/deadline.h"

namespace gradsync::engine {

// How much of its workspace a mesh keeps from op to op, per buffer, in segments (OpWorkspace).
inline constexpr std::size_t kKeptWorkspaceSegments = 4;

struct OpBuffers {
  std::byte* data = nullptr;
  std::byte* output = nullptr;  // all-to-all only
};

struct ExecuteOptions {
  OpDescriptor descriptor;
  OpKey op;
  // The mesh's count of the ops it has started (PeerMesh::next_op_id), this one included: where a
  // new algorithm table takes effect. Frames carry it, and a rank that has counted fewer ops than
  // a peer of this op catches up once it is over.
  std::uint64_t op_count = 0;
  std::size_t segment_bytes = knobs::kSegmentBytes.default_value;
  net::Deadline deadline =
      net::Deadline::after(std::chrono::milliseconds(knobs::kOpTimeoutMs.default_value));
  const OpInterrupt* interrupt = nullptr;  // watched while the op runs, if given
  std::chrono::microseconds spin{0};       // busy-polling before each blocking wait
  // A peer whose frame this rank is reading and that sends no byte of it for this long is lost:
  // its stream can no longer be trusted, and waiting for the op's deadline would hold every rank.
  std::chrono::milliseconds stall_timeout{knobs::kStallTimeoutMs.default_value};
  // The ranks an average is over; 0: the schedule's. More where each rank of the schedule carries
  // the sum of several (a host's local ranks).
  int average_over = 0;
  // A subgroup's op (docs/architecture.md §6.5): the mesh rank of each of the schedule's ranks, in
  // the schedule's order. Only these ranks take part: no other rank's channel is read or told
  // anything. Empty: the schedule's rank r is the mesh's rank r.
  std::vector<int> members;
};

Status execute(const Schedule& schedule, const OpBuffers& buffers, PeerMesh& mesh,
               const ExecuteOptions& options);

// For an op this rank cannot even start (its client's request is invalid): tells every peer of the
// op (every rank, or options.members) why,
// so that they fail the op at once instead of at their deadline.
void announce_failure(PeerMesh& mesh, const ExecuteOptions& options, const Status& reason);

// This rank's client of stream `stream` (its job and stream) has left after submitting the op at
// stream.place: tells every peer, so that a later op of the stream that waits for this rank's
// data fails at once.
void announce_stream_end(PeerMesh& mesh, const OpKey& stream, const std::string& reason);

}  // namespace gradsync::engine
