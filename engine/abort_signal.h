// What ends a running op from outside it (OpInterrupt), and the one every op watches: the signal,
// from another thread, that its group is gone (the coordinator reported a lost worker).
#pragma once

#include <mutex>

#include "collective/status.h"
#include "net/unique_fd.h"

namespace gradsync::engine {

// An fd that the op's wait watches besides its channels, and once it is readable, whether the op
// must end and why.
class OpInterrupt {
 public:
  virtual ~OpInterrupt() = default;
  virtual int fd() const = 0;
  // OK while the op may go on.
  virtual Status interruption() const = 0;
};

// An eventfd the op's poll loop watches, and the reason.
class AbortSignal final : public OpInterrupt {
 public:
  AbortSignal();

  int fd() const override { return event_.get(); }
  Status interruption() const override;
  // The first reason wins; later calls change nothing.
  void raise(Status reason);
  bool raised() const;
  Status reason() const;
  // Lowers it again, for the group's next generation.
  void reset();

 private:
  net::UniqueFd event_;
  mutable std::mutex mutex_;
  Status reason_;
};

}  // namespace gradsync::engine
