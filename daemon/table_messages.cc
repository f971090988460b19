#include "daemon/table_messages.h"

#include <string>

#include "proto/convert.h"

namespace gradsync::daemon {

Status take_table_message(TableGate& gate, int world_size, const proto::CoordinatorToWorker& message,
                          std::optional<proto::WorkerToCoordinator>& reply) {
  if (message.has_table_proposal()) {
    const proto::TableProposal& proposal = message.table_proposal();
    std::uint64_t next_op = 0;
    Status status = gate.propose(proposal.generation(), proposal.version(), next_op);
    if (!status.ok()) return status;
    proto::TableReady& ready = *reply.emplace().mutable_table_ready();
    ready.set_generation(proposal.generation());
    ready.set_version(proposal.version());
    ready.set_next_op(next_op);
    return {};
  }
  GroupPlan plan;
  Status status = from_proto(message.table_switch().plan(), plan);
  if (status.ok() && plan.world_size != world_size) {
    status = Status(ErrorCode::protocol_error,
                    "a table version for " + std::to_string(plan.world_size) + " ranks");
  }
  if (status.ok()) status = gate.decide(message.table_switch().from_op(), plan);
  return status;
}

}  // namespace gradsync::daemon
