#include "engine/abort_signal.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

namespace gradsync::engine {

AbortSignal::AbortSignal() : event_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

void AbortSignal::raise(Status reason) {
  std::lock_guard lock(mutex_);
  if (!reason_.ok()) return;
  reason_ = std::move(reason);
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t written = ::write(event_.get(), &one, sizeof one);
}

bool AbortSignal::raised() const {
  std::lock_guard lock(mutex_);
  return !reason_.ok();
}

void AbortSignal::reset() {
  std::lock_guard lock(mutex_);
  reason_ = Status();
  std::uint64_t count = 0;
  [[maybe_unused]] const ssize_t drained = ::read(event_.get(), &count, sizeof count);
}

Status AbortSignal::reason() const {
  std::lock_guard lock(mutex_);
  return reason_;
}

Status AbortSignal::interruption() const { return reason(); }

}  // namespace gradsync::engine
