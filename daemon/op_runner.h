// Runs the clients' ops of the generation the op thread serves: the op at one place of every local
// rank's stream (stream_pairing.h) as one op between hosts (host_op.h), with the algorithm of the
// table version in force at that op (table_gate.h), timed for the table's refinement (op_times.h);
// and hands their point-to-point messages to the generation's point-to-point thread.
// Between generations, ops fail at once, naming what ended the last one, instead of waiting for
// the group. Only the op thread holds it (OpThread).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "collective/group_plan.h"
#include "collective/host_layout.h"
#include "collective/status.h"
#include "collective/subgroup.h"
#include "daemon/client_hangups.h"
#include "daemon/generation_former.h"
#include "daemon/op_thread_watch.h"
#include "daemon/op_times.h"
#include "daemon/point_to_point_thread.h"
#include "daemon/stream_pairing.h"
#include "daemon/table_gate.h"
#include "daemon/worker.h"
#include "engine/abort_signal.h"
#include "engine/executor.h"
#include "gradsync.pb.h"

namespace gradsync::daemon {

class OpRunner {
 public:
  // A new table version is in force: its plan, for the clients that ask.
  using NewPlan = std::function<void(proto::GroupPlan plan)>;
  // The ops' times make a report to the coordinator due.
  using ReportDue = std::function<void()>;

  OpRunner(const WorkerConfig& config, engine::AbortSignal& abort, OpThreadWatch& watch,
           TableGate& table_gate, OpTimes& op_times, NewPlan new_plan, ReportDue report_due,
           PointToPointThread::Done messages_done);

  // `formed` is the generation whose ops run from now on.
  void install(Generation& formed);
  // The generation ended, for `why`: ops fail at once until the next is installed.
  void end(const Status& why);

  // Runs one op of every local rank; returns their replies, by local rank. With local_ops.missing
  // set, fails them on every rank at once.
  std::vector<proto::DaemonToClient> run(const LocalOps& local_ops);
  // A client of `stream` left this host (`why`): the other hosts are told.
  void stream_ended(const engine::OpKey& stream, const Status& why);

  // Posts a point-to-point message of a local client, to be answered through `messages_done`;
  // between generations it fails at once.
  void post_message(engine::PostedMessage message);
  // The client of global rank `rank` in `stream` (its job and stream) left: the messages its peers
  // post to it or wait for from it fail.
  void client_left(const engine::OpKey& stream, int rank, const std::string& why);

  // Of the generation served, or, between generations, of the one that ended.
  const proto::Assignment& assignment() const { return assignment_; }
  const HostLayout& layout() const { return layout_; }
  int rank() const { return assignment_.rank(); }
  // The counts of `gradsync status`.
  std::uint64_t ops_served() const { return ops_served_; }
  std::uint64_t ops_failed() const { return ops_failed_; }

 private:
  // The ranks an op runs over: the group's, or a subgroup's (collective/subgroup.h).
  struct OpGroup {
    const HostLayout* layout = nullptr;
    int host = 0;                        // this host's place among the layout's hosts
    const Subgroup* subgroup = nullptr;  // null: the whole group
  };

  // Checks every local rank's op and that they are the same op; fills the op's options, its
  // shape (of every rank of `group`) and the bytes the table chose its algorithm by.
  Status prepare_local_ops(const LocalOps& local_ops, const OpGroup& group,
                           engine::ExecuteOptions& options, OpShape& shape,
                           std::uint64_t& table_bytes) const;
  // Runs the prepared op between hosts, in the local ranks' regions.
  Status run_between_hosts(const LocalOps& local_ops, const OpGroup& group,
                           const engine::ExecuteOptions& options, const OpShape& shape,
                           std::uint64_t table_bytes);
  // Why an op or a message fails between generations.
  Status between_generations() const;
  // `plan`, a new table version, runs from op `op_id` on.
  void take_table_version(GroupPlan plan, std::uint64_t op_id);

  const WorkerConfig& config_;
  engine::AbortSignal& abort_;
  ClientHangups hangups_;
  OpThreadWatch& watch_;
  TableGate& table_gate_;
  OpTimes& op_times_;
  const NewPlan new_plan_;
  const ReportDue report_due_;
  proto::Assignment assignment_;
  const PointToPointThread::Done messages_done_;
  std::unique_ptr<engine::PeerMesh> mesh_;              // null between generations
  std::unique_ptr<PointToPointThread> point_to_point_;  // null between generations
  GroupPlan plan_;
  HostLayout layout_;
  Status generation_end_;           // why the last generation ended
  std::vector<std::byte> staging_;  // for ops between hosts that cannot run in a client's region
  std::uint64_t ops_served_ = 0;
  std::uint64_t ops_failed_ = 0;
  std::uint64_t ops_served_before_ = 0;  // ops_served_ when the generation began
};

}  // namespace gradsync::daemon
