#include "daemon/op_thread_watch.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>

namespace gradsync::daemon {

void OpThreadWatch::op_began(Clock::time_point deadline) {
  last_answer_ = ticks(Clock::now());
  op_deadline_ = ticks(deadline);
}

void OpThreadWatch::alive() {
  op_deadline_ = 0;
  last_answer_ = ticks(Clock::now());
}

void OpThreadWatch::excuse(Clock::duration paused) {
  last_answer_ += paused.count();
  std::int64_t deadline = op_deadline_;
  while (deadline != 0 &&
         !op_deadline_.compare_exchange_weak(deadline, deadline + paused.count())) {
  }
}

std::optional<std::string> OpThreadWatch::stuck(Clock::time_point now) const {
  const std::int64_t deadline = op_deadline_;
  const std::int64_t allowed = std::max<std::int64_t>(last_answer_, deadline) +
                               std::chrono::duration_cast<Clock::duration>(slack_).count();
  if (ticks(now) <= allowed) return std::nullopt;
  const auto seconds = [](std::int64_t duration) {
    return fmt::format("{:.1f} s",
                       std::chrono::duration<double>(Clock::duration(duration)).count());
  };
  if (deadline != 0) {
    return "its op thread is still in an op " + seconds(ticks(now) - deadline) +
           " past the op's deadline";
  }
  return "its op thread has answered nothing for " + seconds(ticks(now) - last_answer_);
}

}  // namespace gradsync::daemon
