#include "daemon/timed_op.h"

#include "engine/executor.h"

namespace gradsync::daemon {

Status run_timed_op(engine::PeerMesh& mesh, const engine::AbortSignal& abort,
                    const OwnOpSettings& settings, const Schedule& schedule,
                    const engine::OpDescriptor& descriptor, std::byte* data, double& elapsed_us) {
  engine::ExecuteOptions options;
  options.op_count = mesh.next_op_id();
  options.op.place = options.op_count;
  options.segment_bytes = settings.segment_bytes;
  options.deadline = net::Deadline::after(settings.timeout);
  options.interrupt = &abort;
  options.spin = settings.spin;
  options.stall_timeout = settings.stall_timeout;
  options.descriptor = descriptor;
  const auto start = net::Clock::now();
  const Status status = engine::execute(schedule, {data, nullptr}, mesh, options);
  elapsed_us = std::chrono::duration<double, std::micro>(net::Clock::now() - start).count();
  return status;
}

}  // namespace gradsync::daemon
