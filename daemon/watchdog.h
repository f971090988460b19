// The worker's watchdog, on the control thread, at every heartbeat: pings the op thread, sends the
// coordinator the op times auto ran since the last beat, and leaves the generation once the op
// thread is past what it may take (op_thread_watch.h), so that the others go on without this rank.
#pragma once

#include <asio/steady_timer.hpp>
#include <chrono>
#include <functional>

#include "daemon/coordinator_link.h"
#include "daemon/op_thread_watch.h"
#include "daemon/op_times.h"

namespace gradsync::daemon {

class Watchdog {
 public:
  // Posts OpThreadWatch::alive() to the op thread.
  using Ping = std::function<void()>;

  // Beats every `interval` on `control_io` from now on, until destroyed (once the control
  // thread has ended).
  Watchdog(asio::io_context& control_io, std::chrono::milliseconds interval, OpThreadWatch& watch,
           CoordinatorLink& link, OpTimes& op_times, Ping ping);

 private:
  void beat();

  asio::steady_timer timer_;
  const std::chrono::milliseconds interval_;
  OpThreadWatch& watch_;
  CoordinatorLink& link_;
  OpTimes& op_times_;
  const Ping ping_;
};

}  // namespace gradsync::daemon
