#include "daemon/op_request.h"

#include <cstring>
#include <limits>
#include <string>

#include "collective/algorithms.h"
#include "collective/plan_choice.h"
#include "collective/wire_type.h"
#include "config/knobs.h"
#include "daemon/host_op.h"
#include "proto/convert.h"

namespace gradsync::daemon {

namespace {

Status invalid(const std::string& message) { return Status(ErrorCode::invalid_argument, message); }

}  // namespace

proto::SubmitOp submit_op_from(const net::QueuedOp& queued) {
  proto::SubmitOp op;
  op.set_request_id(queued.request_id);
  op.set_region_id(queued.region_id);
  op.set_collective(static_cast<proto::Collective>(queued.collective));
  op.set_dtype(static_cast<proto::DataType>(queued.dtype));
  op.set_op(static_cast<proto::ReduceOp>(queued.op));
  op.set_algorithm(static_cast<proto::Algorithm>(queued.algorithm));
  op.set_count(queued.count);
  op.set_process_order(queued.process_order);
  op.set_root(queued.root);
  op.set_timeout_ms(queued.timeout_ms);
  op.set_wire(static_cast<proto::DataType>(queued.wire));
  op.set_transfer(static_cast<proto::Transfer>(queued.transfer));
  op.set_peer(queued.peer);
  op.set_tag(queued.tag);
  std::string name(queued.name);
  for (char& c : name) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  op.set_name(std::move(name));
  return op;
}

namespace {

// alltoallv: its splits, world_size² u64 at the start of its region, copied into `shape`.
Status read_splits(const PendingOp& pending, std::uint64_t most, OpShape& shape) {
  const std::uint64_t bytes = splits_bytes(shape);
  if (!pending.region || pending.region->size() < bytes) {
    return invalid("an alltoallv of " + std::to_string(shape.world_size) +
                   " ranks needs its region to start with its " +
                   std::to_string(bytes / sizeof(std::uint64_t)) + " splits (" +
                   std::to_string(bytes) + " bytes); region " +
                   std::to_string(pending.op.region_id()) +
                   (pending.region ? " has " + std::to_string(pending.region->size())
                                   : std::string(" is not this daemon's")));
  }
  std::vector<std::uint64_t> splits(bytes / sizeof(std::uint64_t));
  std::memcpy(splits.data(), pending.region->data(), bytes);
  for (std::size_t index = 0; index < splits.size(); ++index) {
    if (splits[index] > most) {
      const auto p = static_cast<std::size_t>(shape.world_size);
      return invalid("alltoallv split from rank " + std::to_string(index / p) + " to rank " +
                     std::to_string(index % p) + " is " + std::to_string(splits[index]) +
                     " elements, more than any region holds");
    }
  }
  shape = alltoallv_shape(shape.world_size, std::move(splits), shape.element_size);
  return {};
}

}  // namespace

Status check_region(const PendingOp& pending, std::uint64_t bytes) {
  if (bytes > 0 && !pending.region) {
    return invalid("the op names shared-memory region " + std::to_string(pending.op.region_id()) +
                   ", which this daemon does not have");
  }
  if (bytes > 0 && pending.region->size() < bytes) {
    return invalid("the op needs " + std::to_string(bytes) + " bytes, its region has " +
                   std::to_string(pending.region->size()));
  }
  return {};
}

Status prepare_op(const PendingOp& pending, int rank, const HostLayout& layout,
                  const GroupPlan& plan, const Subgroup* subgroup, std::optional<Algorithm> forced,
                  engine::ExecuteOptions& options, OpShape& shape, std::uint64_t& table_bytes) {
  table_bytes = 0;
  const int world_size = layout.world_size();
  const proto::SubmitOp& op = pending.op;
  const auto collective = from_proto(op.collective());
  const auto dtype = from_proto(op.dtype());
  const auto reduce_op = from_proto(op.op());
  if (!collective || !dtype || !reduce_op) {
    return invalid("unknown collective, dtype or reduce op in request " +
                   std::to_string(op.request_id()));
  }
  shape = {*collective, world_size, *collective == Collective::barrier ? 0 : op.count(),
           *collective == Collective::barrier ? 1 : element_size(*dtype), op.root()};
  // Every byte count of the op (data, output, all-to-all's p blocks) must fit in 64 bits, or a
  // wrapped product would pass the region's size check.
  const std::uint64_t most = std::numeric_limits<std::uint64_t>::max() / 2 /
                             static_cast<std::uint64_t>(world_size) / shape.element_size;
  if (shape.count > most) {
    return invalid("a count of " + std::to_string(shape.count) + " " + std::string(name(*dtype)) +
                   " is more bytes than any region holds");
  }
  if (*collective == Collective::alltoallv) {
    if (Status status = read_splits(pending, most, shape); !status.ok()) return status;
  }
  // The collectives that only move data take every type, whatever operator the request names.
  if (reduces(*collective)) {
    if (const std::string_view why = why_op_cannot_reduce(*dtype, *reduce_op); !why.empty()) {
      return invalid(std::string(name(*reduce_op)) + " cannot reduce " + std::string(name(*dtype)) +
                     " values: " + std::string(why));
    }
  }
  DataType wire = *dtype;
  if (op.wire() != proto::DATA_TYPE_UNSPECIFIED) {
    const auto requested = from_proto(op.wire());
    if (!requested) {
      return invalid("unknown wire type in request " + std::to_string(op.request_id()));
    }
    if (Status status = check_wire_type(*collective, *dtype, *reduce_op, *requested);
        !status.ok()) {
      return status;
    }
    wire = *requested;
  }
  if (op.root() < 0 || op.root() >= world_size) {
    return invalid("root " + std::to_string(op.root()) + " is not a rank of a group of " +
                   std::to_string(world_size));
  }
  const std::uint64_t bytes =
      splits_bytes(shape) + data_bytes(shape, rank) + output_bytes(shape, rank);
  if (Status status = check_region(pending, bytes); !status.ok()) return status;
  // The table is of ops between hosts, indexed by the bytes that cross the network.
  const OpShape between = shape_between_hosts(shape, layout);
  const std::uint64_t wire_bytes =
      data_bytes(between, layout.host_of(rank)) / between.element_size * element_size(wire);
  // Every rank of the op's stream has the same key, so every rank picks the same trials.
  const engine::OpKey& key = options.op;
  Algorithm algorithm =
      subgroup ? choose_algorithm(table_shape(*collective, between.world_size, wire_bytes),
                                  subgroup_network(plan.network, subgroup->host_ranks))
               : algorithm_for_op(plan, *collective, wire_bytes,
                                  key.place ^ (key.job * 31 + key.stream));
  if (const auto requested = from_proto(op.algorithm())) {
    algorithm = *requested;
  } else if (forced && supports(*collective, *forced)) {
    algorithm = *forced;
  } else if (!subgroup) {
    table_bytes = wire_bytes;
  }
  if (!supports(*collective, algorithm)) {
    return invalid(std::string(name(algorithm)) + " cannot run " + std::string(name(*collective)));
  }
  options.descriptor = {*collective,
                        *dtype,
                        *reduce_op,
                        algorithm,
                        static_cast<std::uint32_t>(op.root()),
                        *collective == Collective::alltoallv ? splits_digest(shape) : shape.count};
  if (wire != *dtype) options.descriptor.wire = wire;
  options.average_over = world_size;
  options.deadline = net::Deadline::after(std::chrono::milliseconds(
      op.timeout_ms() > 0 ? op.timeout_ms() : knobs::kOpTimeoutMs.default_value));
  return {};
}

}  // namespace gradsync::daemon
