// A worker's connection to its coordinator, for the worker's whole life: heartbeats go out from the
// channel's own thread, an abort is raised on the worker's signal at once, and the messages that
// form the group (the assignment, a calibration request, the plan) are handed to the worker in the
// order they came.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "collective/status.h"
#include "engine/abort_signal.h"
#include "gradsync.pb.h"
#include "net/unique_fd.h"

namespace gradsync::daemon {

class ControlChannel : public std::enable_shared_from_this<ControlChannel> {
 public:
  ControlChannel(net::UniqueFd socket, std::chrono::milliseconds heartbeat_interval,
                 engine::AbortSignal& abort);

  // Starts the reader and heartbeat thread, which keeps the channel alive as long as it runs.
  void start();
  // Safe beside the heartbeats: one writer at a time.
  Status send(const proto::WorkerToCoordinator& message);
  // The next group-forming message, waiting up to `timeout` for `what` (for the error); fails at
  // once when the coordinator is lost or aborts the group.
  Status next(std::chrono::milliseconds timeout, const std::string& what,
              proto::CoordinatorToWorker& message);

 private:
  void run();
  void lose(const Status& reason);

  net::UniqueFd socket_;
  std::chrono::milliseconds interval_;
  engine::AbortSignal& abort_;
  std::mutex write_mutex_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::deque<proto::CoordinatorToWorker> forming_;
  Status lost_;  // set once the coordinator is gone or has aborted the group
};

}  // namespace gradsync::daemon
