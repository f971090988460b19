// One op of the worker's own (a link probe, a calibration all-reduce) run over the mesh and timed,
// with the same deadline and abort handling as a client's op.
#pragma once

#include <chrono>
#include <cstddef>

#include "collective/schedule.h"
#include "collective/status.h"
#include "config/knobs.h"
#include "engine/abort_signal.h"
#include "engine/frame.h"
#include "engine/peer_mesh.h"

namespace gradsync::daemon {

// The conditions client ops run in (segment, spin), so that what is measured is what they get.
struct OwnOpSettings {
  std::size_t segment_bytes = knobs::kSegmentBytes.default_value;
  std::chrono::microseconds spin{knobs::kSpinUs.default_value};
  std::chrono::milliseconds stall_timeout{knobs::kStallTimeoutMs.default_value};
  std::chrono::milliseconds timeout{10'000};
};

// Every rank must run the same sequence of these, like any other op. `data` holds the schedule's
// data buffer; `elapsed_us` receives this rank's time for the op.
Status run_timed_op(engine::PeerMesh& mesh, const engine::AbortSignal& abort,
                    const OwnOpSettings& settings, const Schedule& schedule,
                    const engine::OpDescriptor& descriptor, std::byte* data, double& elapsed_us);

}  // namespace gradsync::daemon
