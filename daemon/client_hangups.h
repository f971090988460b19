// What ends a client op between hosts early (engine::OpInterrupt): the worker's abort, or the end
// of a client whose op it is. A client whose process dies while its op waits for other hosts
// leaves nobody to take the result: the op fails at once on every rank, instead of holding the op
// thread, and every client's hello behind it, until its timeout.
//
// One epoll instance holds the abort's eventfd and the socket of every client that has run an op
// (watched from its first op on, so that an op costs no system call to set up); a hangup of a
// client whose op is not the one running only takes that client out of the watch.
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/stream_pairing.h"
#include "engine/abort_signal.h"
#include "net/unique_fd.h"

namespace gradsync::daemon {

class ClientHangups final : public engine::OpInterrupt {
 public:
  explicit ClientHangups(const engine::AbortSignal& abort);

  // The op about to run is `ops`'s, of the local ranks from rank `first_rank` on: their clients'
  // ends interrupt it.
  void watch(const LocalOps& ops, int first_rank);

  int fd() const override { return epoll_.get(); }
  Status interruption() const override;

 private:
  struct Watched {
    std::uint32_t client;  // the low half of its ClientId
    int pid;
    int rank;
  };

  const engine::AbortSignal& abort_;
  net::UniqueFd epoll_;
  std::vector<Watched> running_;  // the clients of the op that runs
};

}  // namespace gradsync::daemon
