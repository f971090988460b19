// A client's request checked against what this daemon can run (DESIGN.md §6: every field before
// use): the collective, data type and reduce op it names, its count against the shared-memory
// region it hands over, its root and wire type; its algorithm from the group's table unless the
// request, or the worker, forces one.
#pragma once

#include <optional>

#include "collective/algorithm_table.h"
#include "daemon/client_server.h"
#include "engine/executor.h"

namespace gradsync::daemon {

// Fills `options` (the op's descriptor and deadline) and `shape` for `pending` in a group of
// `world_size`; `forced` is the worker's --algorithm, for ops that ask for auto.
Status prepare_op(const PendingOp& pending, int world_size, const AlgorithmTable& table,
                  std::optional<Algorithm> forced, engine::ExecuteOptions& options, OpShape& shape);

}  // namespace gradsync::daemon
