#include "daemon/op_runner.h"

#include <spdlog/spdlog.h>

#include "collective/algorithms.h"
#include "daemon/host_op.h"
#include "daemon/op_request.h"
#include "net/deadline.h"
#include "proto/convert.h"

namespace gradsync::daemon {

namespace {

std::vector<proto::DaemonToClient> replies(const LocalOps& local_ops, const Status& status,
                                           Algorithm algorithm, net::Clock::time_point start) {
  const double elapsed_us =
      std::chrono::duration<double, std::micro>(net::Clock::now() - start).count();
  std::vector<proto::DaemonToClient> replies(local_ops.ops.size());
  for (std::size_t index = 0; index < replies.size(); ++index) {
    proto::OpResult& result = *replies[index].mutable_result();
    result.set_request_id(local_ops.ops[index].op.request_id());
    to_proto(status, *result.mutable_status());
    result.set_algorithm(to_proto(algorithm));
    result.set_elapsed_us(elapsed_us);
  }
  return replies;
}

}  // namespace

OpRunner::OpRunner(const WorkerConfig& config, engine::AbortSignal& abort, OpThreadWatch& watch,
                   TableGate& table_gate, OpTimes& op_times, NewPlan new_plan, ReportDue report_due,
                   PointToPointThread::Done messages_done)
    : config_(config),
      abort_(abort),
      hangups_(abort),
      watch_(watch),
      table_gate_(table_gate),
      op_times_(op_times),
      new_plan_(std::move(new_plan)),
      report_due_(std::move(report_due)),
      messages_done_(std::move(messages_done)) {}

void OpRunner::install(Generation& formed) {
  assignment_ = std::move(formed.assignment);
  mesh_ = std::move(formed.mesh);
  plan_ = std::move(formed.plan);
  layout_ = std::move(formed.layout);
  engine::PointToPointOptions messages;
  messages.host = rank();
  messages.generation = assignment_.generation();
  for (int global = 0; global < layout_.world_size(); ++global) {
    messages.host_of_rank.push_back(layout_.host_of(global));
  }
  messages.segment_bytes = config_.segment_bytes;
  messages.stall_timeout = config_.stall_timeout;
  point_to_point_ = std::make_unique<PointToPointThread>(
      std::move(messages), std::move(formed.point_to_point), messages_done_);
  table_gate_.reset(assignment_.generation());
  op_times_.clear();
  ops_served_before_ = ops_served_;
}

void OpRunner::end(const Status& why) {
  generation_end_ = why;
  mesh_.reset();
  if (point_to_point_) point_to_point_->stop(between_generations());
  point_to_point_.reset();
}

Status OpRunner::between_generations() const {
  return Status(generation_end_.code(), "host " + std::to_string(rank()) + ": generation " +
                                            std::to_string(assignment_.generation()) + " ended (" +
                                            generation_end_.message() +
                                            "); the group is forming the next");
}

void OpRunner::post_message(engine::PostedMessage message) {
  if (point_to_point_ == nullptr) {
    messages_done_({{message.id, between_generations()}});
    return;
  }
  point_to_point_->post(std::move(message));
}

void OpRunner::client_left(const engine::OpKey& stream, int rank, const std::string& why) {
  if (point_to_point_ != nullptr) {
    point_to_point_->stream_ended(stream.job, stream.stream, static_cast<std::uint32_t>(rank), why);
  }
}

std::vector<proto::DaemonToClient> OpRunner::run(const LocalOps& local_ops) {
  const auto start = net::Clock::now();
  if (mesh_ == nullptr) {
    // The group is between generations: the ops fail at once, saying why.
    return replies(local_ops, between_generations(), Algorithm::ring, start);
  }
  engine::PeerMesh& mesh = *mesh_;
  engine::ExecuteOptions options;
  options.op = local_ops.ops.front().key;
  options.segment_bytes = config_.segment_bytes;
  options.spin = config_.spin;
  options.stall_timeout = config_.stall_timeout;
  options.interrupt = &hangups_;
  OpGroup group{&layout_, rank(), nullptr};
  Subgroup subgroup;
  Status status;
  if (local_ops.members.empty()) {
    options.op_count = mesh.next_op_id();
  } else {
    // A subgroup's op leaves the count alone: the ranks outside it do not see it, and the next op
    // of every rank must have the same count on each (its table version depends on it).
    options.op_count = mesh.ops_started();
    status = plan_subgroup(layout_, local_ops.members, rank(), subgroup);
    group = {&subgroup.layout, subgroup.position, &subgroup};
    if (status.ok()) options.members = subgroup.host_ranks;
  }
  OpShape shape;
  std::uint64_t table_bytes = 0;
  std::optional<GroupPlan> switched;
  if (status.ok()) status = table_gate_.admit(options.op_count, switched);
  if (switched) take_table_version(std::move(*switched), options.op_count);
  if (status.ok()) status = local_ops.missing;
  if (status.ok()) status = prepare_local_ops(local_ops, group, options, shape, table_bytes);
  if (!status.ok()) {
    // An op whose subgroup is not one fails alike on every host that has a member, and is told to
    // none: a rank outside a subgroup would keep the news of its op unread for good.
    if (local_ops.members.empty() || !options.members.empty()) {
      engine::announce_failure(mesh, options, status);
    }
  } else if (abort_.raised()) {
    status = abort_.reason();
  } else {
    status = run_between_hosts(local_ops, group, options, shape, table_bytes);
  }
  ++ops_served_;
  if (!status.ok()) {
    ++ops_failed_;
    // An op refused before its request was read has no descriptor to show.
    spdlog::warn("host {}: {} '{}' ({}) failed: {}", rank(), options.op.to_string(),
                 local_ops.ops.front().op.name(),
                 local_ops.missing.ok() ? options.descriptor.to_string() : "not started here",
                 status.to_string());
  }
  return replies(local_ops, status, options.descriptor.algorithm, start);
}

Status OpRunner::run_between_hosts(const LocalOps& local_ops, const OpGroup& group,
                                   const engine::ExecuteOptions& options, const OpShape& shape,
                                   std::uint64_t table_bytes) {
  std::vector<std::byte*> regions;
  // An alltoallv's region starts with its splits, its tensor after them.
  for (const PendingOp& op : local_ops.ops) {
    regions.push_back(op.region ? op.region->data() + splits_bytes(shape) : nullptr);
  }
  HostOp host_op(shape, options.descriptor.dtype, options.descriptor.op, *group.layout, group.host,
                 std::move(regions), staging_);
  host_op.gather();
  watch_.op_began(options.deadline.when());
  hangups_.watch(local_ops, layout_.first_rank(rank()));
  const auto began = net::Clock::now();
  const Status status = engine::execute(
      build_schedule(host_op.between_hosts(), options.descriptor.algorithm, group.host),
      host_op.buffers(), *mesh_, options);
  const double between_hosts_us =
      std::chrono::duration<double, std::micro>(net::Clock::now() - began).count();
  watch_.op_ended();
  if (status.ok()) host_op.scatter();
  if (status.ok() && table_bytes > 0 && shape.collective == Collective::allreduce &&
      op_times_.record(table_bytes, options.descriptor.algorithm, between_hosts_us)) {
    report_due_();
  }
  return status;
}

Status OpRunner::prepare_local_ops(const LocalOps& local_ops, const OpGroup& group,
                                   engine::ExecuteOptions& options, OpShape& shape,
                                   std::uint64_t& table_bytes) const {
  const int first = layout_.first_rank(rank());
  for (std::size_t index = 0; index < local_ops.ops.size(); ++index) {
    const PendingOp& op = local_ops.ops[index];
    const std::string name = "rank " + std::to_string(first + op.local_rank);
    engine::ExecuteOptions mine = options;
    Status status = prepare_op(op, group.layout->first_rank(group.host) + static_cast<int>(index),
                               *group.layout, plan_, group.subgroup, config_.algorithm, mine, shape,
                               table_bytes);
    if (!status.ok()) return Status(status.code(), name + ": " + status.message());
    if (index == 0) {
      options = mine;
    } else if (mine.descriptor != options.descriptor) {
      return Status(ErrorCode::mismatch,
                    "rank " + std::to_string(first + local_ops.ops.front().local_rank) +
                        " submitted " + options.descriptor.to_string() + ", " + name +
                        " submitted " + mine.descriptor.to_string());
    }
  }
  return {};
}

void OpRunner::stream_ended(const engine::OpKey& stream, const Status& why) {
  if (mesh_ != nullptr) engine::announce_stream_end(*mesh_, stream, why.message());
}

void OpRunner::take_table_version(GroupPlan plan, std::uint64_t op_id) {
  plan_ = std::move(plan);
  proto::GroupPlan message;
  to_proto(plan_, message);
  new_plan_(std::move(message));
  spdlog::info("worker rank {}: table version {} from op {} (client op {} of the generation): {}",
               rank(), plan_.table_version, op_id, ops_served_ - ops_served_before_ + 1,
               plan_.history.empty() ? std::string() : plan_.history.back().why);
}

}  // namespace gradsync::daemon
