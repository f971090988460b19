// A new table version's messages from the coordinator (a proposal, then a switch) taken by this
// rank's TableGate (table_gate.h), as a pure function: the message in, the answer to send out. The
// control thread calls it as each message comes.
#pragma once

#include <optional>

#include "collective/status.h"
#include "daemon/table_gate.h"
#include "gradsync.pb.h"

namespace gradsync::daemon {

// Takes `message` (a table_proposal or a table_switch) for a generation of `world_size` ranks;
// `reply` receives what to send the coordinator (the TableReady that answers a proposal). An
// error means that the rank must leave its generation: the ranks could otherwise disagree on an
// op's algorithm.
Status take_table_message(TableGate& gate, int world_size, const proto::CoordinatorToWorker& message,
                          std::optional<proto::WorkerToCoordinator>& reply);

}  // namespace gradsync::daemon
