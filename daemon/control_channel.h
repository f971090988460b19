// A worker's connection to its coordinator, for the worker's whole life, on the worker's control
// event loop: heartbeats go out on a timer, an abort is raised on the worker's signal at once, and
// the messages that form the group (the assignment, a calibration request, the plan) are handed to
// the worker in the order they came. Until the coordinator has proven itself on the connection
// (its assignment's proof, join_handshake.h), an abort or a new table version's message is handed
// over too, for the join to check, instead of being acted on: a stranger that took the
// coordinator's address could otherwise end, or change the table of, the generation a worker asks
// it to take back.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "collective/status.h"
#include "engine/abort_signal.h"
#include "gradsync.pb.h"
#include "net/unique_fd.h"

namespace asio {
class io_context;
}

namespace gradsync::daemon {

class ControlChannel {
 public:
  // What losing the coordinator's connection does to the worker's generation: one that is still
  // forming cannot go on without it; one that runs keeps its data mesh and goes on while the
  // worker finds the coordinator again. A generation the coordinator ends is always over.
  enum class OnLoss { end_generation, keep_generation };

  // Starts reading and beating on `io` at once; `io` must outlive the channel's use. When the
  // coordinator ends the generation, or is lost under OnLoss::end_generation, `abort` is raised;
  // either way `lost` is called, once, on `io`'s thread. A new table version's messages (a
  // proposal, a switch) go to `table`, on `io`'s thread, as they come.
  using TableHandler = std::function<void(const proto::CoordinatorToWorker& message)>;
  ControlChannel(asio::io_context& io, net::UniqueFd socket,
                 std::chrono::milliseconds heartbeat_interval, engine::AbortSignal& abort,
                 std::function<void()> lost, OnLoss on_loss, TableHandler table);
  ~ControlChannel();

  // From any thread: the generation runs from now on (OnLoss::keep_generation).
  void keep_generation_when_lost();
  // From the thread that joins: the coordinator has proven itself (its assignment has been
  // checked); from now on the channel acts on its aborts and table messages as they come, first
  // on those that came since the assignment.
  void proven();
  // Ends every wait in next() with `reason`, from any thread (the worker is stopping).
  void interrupt(const Status& reason);
  // Tells the coordinator that this rank leaves its generation, for `reason`, and beats no more;
  // the coordinator's abort follows.
  void leave(const Status& reason);
  // Queues a message; a failure to deliver it loses the channel (and raises the abort).
  void send(const proto::WorkerToCoordinator& message);
  // The next group-forming message, waiting up to `timeout` for `what` (for the error); fails at
  // once when the coordinator is lost or aborts the group.
  Status next(std::chrono::milliseconds timeout, const std::string& what,
              proto::CoordinatorToWorker& message);
  // OK while the coordinator is there, else why not; `heartbeat_age` receives the time since the
  // coordinator's socket last took a message (a heartbeat, most often).
  Status state(std::chrono::steady_clock::duration& heartbeat_age) const;

 private:
  struct Loop;  // the part that lives on the event loop

  std::shared_ptr<Loop> loop_;
};

}  // namespace gradsync::daemon
