// A client's request checked against what this daemon can run (docs/architecture.md §11: every
// field before use): the collective, data type and reduce op it names, its count against the
// shared-memory region it hands over, its root and wire type; its algorithm from the group's table
// unless the request, or the worker, forces one.
#pragma once

#include <optional>

#include "collective/group_plan.h"
#include "collective/host_layout.h"
#include "collective/subgroup.h"
#include "daemon/client_server.h"
#include "engine/executor.h"
#include "gradsync.pb.h"
#include "net/op_queue.h"

namespace gradsync::daemon {

// An op from a client's queue (net/op_queue.h) as a request on the socket would be. Its name
// shows in log lines: bytes outside printable ASCII show as '?'.
proto::SubmitOp submit_op_from(const net::QueuedOp& queued);

// Why `pending`'s region cannot hold the `bytes` its request needs (none: the daemon does not
// have it; too small); OK when it can, or when it needs none.
Status check_region(const PendingOp& pending, std::uint64_t bytes);

// Fills `options` (the op's descriptor and deadline; its op key set) and `shape` for `pending`, the
// op of rank `rank` in a group of `layout`'s ranks: the whole group's, or `subgroup`'s (null: the
// whole group); `forced`
// is the worker's --algorithm, for ops that ask for auto. The algorithm is the one for the op
// between hosts (host_op.h): the table's, or for a subgroup the model's over its hosts' links.
// `table_bytes` receives the bytes the table chose it by, 0 where it did not choose.
Status prepare_op(const PendingOp& pending, int rank, const HostLayout& layout,
                  const GroupPlan& plan, const Subgroup* subgroup, std::optional<Algorithm> forced,
                  engine::ExecuteOptions& options, OpShape& shape, std::uint64_t& table_bytes);

}  // namespace gradsync::daemon
