#include "daemon/watchdog.h"

#include <asio/io_context.hpp>

namespace gradsync::daemon {

Watchdog::Watchdog(asio::io_context& control_io, std::chrono::milliseconds interval,
                   OpThreadWatch& watch, CoordinatorLink& link, OpTimes& op_times, Ping ping)
    : timer_(control_io),
      interval_(interval),
      watch_(watch),
      link_(link),
      op_times_(op_times),
      ping_(std::move(ping)) {
  beat();
}

void Watchdog::beat() {
  timer_.expires_after(interval_);
  timer_.async_wait([this](const asio::error_code& error) {
    if (error) return;
    const auto now = OpThreadWatch::Clock::now();
    // Late by more than a beat: the whole process was stopped (SIGSTOP, a swapped-out host), not
    // only the op thread, which gets the time back.
    if (const auto late = now - timer_.expiry(); late > interval_) watch_.excuse(late);
    ping_();
    link_.report_op_times(op_times_);
    if (const auto stuck = watch_.stuck(now)) link_.leave_served_generation(*stuck);
    beat();
  });
}

}  // namespace gradsync::daemon
