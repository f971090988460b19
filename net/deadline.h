// A point in time by which a network wait must end (docs/architecture.md §10: nothing waits
// forever).
#pragma once

#include <algorithm>
#include <chrono>

namespace gradsync::net {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  explicit Deadline(Clock::time_point when) : when_(when) {}
  static Deadline after(std::chrono::milliseconds timeout) {
    return Deadline(Clock::now() + timeout);
  }

  Clock::time_point when() const { return when_; }
  bool expired() const { return Clock::now() >= when_; }
  // Milliseconds left, rounded up, for poll(); 0 once expired.
  int poll_timeout_ms() const {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(when_ - Clock::now()).count();
    return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
  }

 private:
  Clock::time_point when_;
};

}  // namespace gradsync::net
