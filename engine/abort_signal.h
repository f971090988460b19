// Tells a running op, from another thread, that its group is gone (the coordinator reported a lost
// worker): an eventfd the op's poll loop watches, and the reason.
#pragma once

#include <mutex>

#include "collective/status.h"
#include "net/unique_fd.h"

namespace gradsync::engine {

class AbortSignal {
 public:
  AbortSignal();

  int fd() const { return event_.get(); }
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
