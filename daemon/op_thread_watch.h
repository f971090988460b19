// Whether a worker's op thread makes progress (docs/architecture.md §10: no progress is a loss,
// like silence). A rank whose op thread is stuck while its control thread still beats would hold
// its rank forever: the others' ops would wait out their deadlines, one after another. The op
// thread marks when each op begins (with its deadline) and ends, and between ops answers the pings
// the control thread posts at every heartbeat; the control thread asks whether it is past what it
// may take.
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <string>

namespace gradsync::daemon {

class OpThreadWatch {
 public:
  using Clock = std::chrono::steady_clock;

  // The op thread may be `slack` past an op's deadline, or past its last answer between ops.
  explicit OpThreadWatch(std::chrono::milliseconds slack) : slack_(slack) { alive(); }

  // On the op thread.
  void op_began(Clock::time_point deadline);
  void op_ended() { alive(); }
  void alive();
  // On any thread: the process was stopped for `paused` (not only its op thread), which the op
  // thread gets back.
  void excuse(Clock::duration paused);

  // On any thread: what the op thread has been doing past its allowance; nullopt while it keeps
  // up.
  std::optional<std::string> stuck(Clock::time_point now) const;

 private:
  static std::int64_t ticks(Clock::time_point at) { return at.time_since_epoch().count(); }

  const std::chrono::milliseconds slack_;
  std::atomic<std::int64_t> last_answer_{0};
  std::atomic<std::int64_t> op_deadline_{0};  // of the op in progress; 0 between ops
};

}  // namespace gradsync::daemon
