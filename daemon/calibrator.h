// Runs the coordinator's calibration request on this rank (docs/architecture.md §9): the requested
// all-reduce algorithms at every requested size, a few times each, taking turns, timed; every
// repetition's time goes back.
#pragma once

#include "collective/status.h"
#include "daemon/timed_op.h"
#include "gradsync.pb.h"

namespace gradsync::daemon {

// Every rank of the mesh runs the same request at the same point of its op sequence.
Status calibrate(engine::PeerMesh& mesh, const engine::AbortSignal& abort,
                 const OwnOpSettings& settings, const proto::CalibrationRequest& request,
                 proto::CalibrationReport& report);

}  // namespace gradsync::daemon
