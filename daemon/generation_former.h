// Forms a worker's generations, on the thread that forms them: the main thread forms the first,
// before it becomes the op thread; every later one is formed on a thread of its own beside the op
// thread, which goes on answering clients meanwhile. Forming is a join (join_handshake.h) over a
// new control channel, the data mesh, the measurements the coordinator asks for and its plan; a
// generation that ends while it forms is followed by the next. Also beside the op thread: finding a
// lost coordinator again while the generation runs on (reattaching).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "collective/group_plan.h"
#include "collective/host_layout.h"
#include "collective/status.h"
#include "daemon/coordinator_link.h"
#include "daemon/data_mesh.h"
#include "daemon/join_handshake.h"
#include "daemon/worker.h"
#include "engine/abort_signal.h"
#include "engine/peer_mesh.h"
#include "gradsync.pb.h"
#include "net/deadline.h"

namespace gradsync::daemon {

// What forming a generation of the group yields.
struct Generation {
  proto::Assignment assignment;
  std::unique_ptr<engine::PeerMesh> mesh;
  std::unique_ptr<net::DataChannels> point_to_point;  // the point-to-point lane (data_mesh.h)
  proto::GroupPlan plan_message;
  GroupPlan plan;
  HostLayout layout;
  std::uint64_t channel = 0;  // which control channel's loss ends it
};

class GenerationFormer {
 public:
  // Called on the forming thread with what forming the next generation came to.
  using Formed = std::function<void(const Status& status, std::shared_ptr<Generation> formed)>;
  // Called on the forming thread with the new channel of a generation taken back; nullopt when no
  // coordinator took it back (the abort then says why).
  using Reattached = std::function<void(std::optional<std::uint64_t> channel)>;

  // Joins as `config` says, with this worker's data port at `data_port_number`.
  GenerationFormer(const WorkerConfig& config, CoordinatorLink& link, DataPort& data_port,
                   std::uint16_t data_port_number, engine::AbortSignal& abort);
  // Waits for the forming thread.
  ~GenerationFormer();

  // On the calling thread: forms the next generation, as the rank held in the one before
  // (`previous_rank`, -1 for none). A join that is refused is not retried.
  Status form(int previous_rank, Generation& formed);

  // The op thread's: forms the next generation on the forming thread, once the last work there
  // has ended, after closing the channel of the one that ended.
  void form_beside(int previous_rank, Formed done);
  // The op thread's: while generation `running` runs on without its coordinator, joins the
  // coordinator again on the forming thread, asking it to take `running` back, until it does,
  // refuses (it runs another generation) or `deadline` passes.
  void reattach_beside(proto::Assignment running, net::Deadline deadline, Reattached done);
  // The op thread's, at the end: waits until the work on the forming thread has ended.
  void wait();

 private:
  // Joins, takes the assignment, connects the data mesh and takes the plan; `assigned` says
  // whether the assignment came.
  Status form_generation(int previous_rank, Generation& formed, bool& assigned);
  // Connects to the coordinator and sends the join `handshake` makes.
  Status connect(JoinHandshake& handshake, net::Deadline deadline, net::UniqueFd& control);
  // Waits on `channel` for what `handshake` awaits.
  Status next(JoinHandshake& handshake, ControlChannel& channel,
              proto::CoordinatorToWorker& message);
  // Measures what the coordinator asks for (the links, then all-reduce itself) and takes the
  // group's plan, which decides what auto runs.
  Status prepare_plan(JoinHandshake& handshake, Generation& formed, ControlChannel& channel);
  void reattach(const proto::Assignment& running, net::Deadline deadline, const Reattached& done);
  // One attempt of reattach(): `channel` receives the new channel's number.
  Status take_back(const proto::Assignment& running, net::Deadline deadline,
                   std::uint64_t& channel);
  // Runs `work` on the forming thread, once the last work there has ended.
  void beside(std::function<void()> work);

  const WorkerConfig& config_;
  const JoinSettings join_settings_;
  CoordinatorLink& link_;
  DataPort& data_port_;
  const std::uint16_t data_port_number_;
  engine::AbortSignal& abort_;
  std::thread thread_;
};

}  // namespace gradsync::daemon
