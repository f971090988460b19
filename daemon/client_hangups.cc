#include "daemon/client_hangups.h"

#include <sys/epoll.h>

#include <algorithm>

#include "daemon/client_session.h"

namespace gradsync::daemon {

namespace {

// An epoll entry's data: the socket, and the low half of its client's id (the abort: all ones).
constexpr std::uint64_t kAbortEntry = ~std::uint64_t{0};

std::uint64_t entry_of(int fd, ClientId client) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(client)) << 32) |
         static_cast<std::uint32_t>(fd);
}

}  // namespace

ClientHangups::ClientHangups(const engine::AbortSignal& abort)
    : abort_(abort), epoll_(::epoll_create1(EPOLL_CLOEXEC)) {
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kAbortEntry;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, abort_.fd(), &event);
}

void ClientHangups::watch(const LocalOps& ops, int first_rank) {
  running_.clear();
  for (const PendingOp& op : ops.ops) {
    ClientSession& session = *op.session;
    running_.push_back(
        {static_cast<std::uint32_t>(session.id()), session.pid(), first_rank + op.local_rank});
    if (session.hangup_watched()) continue;
    const int fd = session.socket().native_handle();
    epoll_event event{};
    event.events = EPOLLRDHUP | EPOLLHUP;
    event.data.u64 = entry_of(fd, session.id());
    // A closed socket leaves the epoll by itself: nothing needs removing when the session ends.
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &event) == 0) session.set_hangup_watched();
  }
}

Status ClientHangups::interruption() const {
  if (Status aborted = abort_.interruption(); !aborted.ok()) return aborted;
  epoll_event events[8];
  const int ready = ::epoll_wait(epoll_.get(), events, 8, 0);
  for (int index = 0; index < ready; ++index) {
    const std::uint64_t entry = events[index].data.u64;
    if (entry == kAbortEntry) continue;
    const auto client = static_cast<std::uint32_t>(entry >> 32);
    const auto running = std::find_if(running_.begin(), running_.end(),
                                      [&](const Watched& watched) { return watched.client == client; });
    if (running != running_.end()) {
      return Status(ErrorCode::aborted, "rank " + std::to_string(running->rank) +
                                            "'s client (pid " + std::to_string(running->pid) +
                                            ") left while its op ran");
    }
    // Another client's end: the server reads it once the op is over.
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, static_cast<int>(entry & 0xffffffffu), nullptr);
  }
  return {};
}

}  // namespace gradsync::daemon
