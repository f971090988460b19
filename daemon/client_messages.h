// The point-to-point messages that local clients have posted and that are not yet answered, on the
// op thread: each request checked (message_request.h) and handed to the point-to-point engine with
// a number of its own, and the engine's outcome turned back into its client's reply.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "daemon/stream_pairing.h"
#include "engine/point_to_point.h"
#include "gradsync.pb.h"
#include "net/deadline.h"

namespace gradsync::daemon {

class ClientMessages {
 public:
  using Post = std::function<void(engine::PostedMessage message)>;

  explicit ClientMessages(Post post) : post_(std::move(post)) {}

  // Posts `op`, a request of global rank `rank` in a group of `world_size` whose stream runs over
  // `members` (empty: every rank); its key names its job and stream. Returns the failure reply of
  // a request that is wrong, which is then not posted.
  std::optional<proto::DaemonToClient> post(PendingOp op, int rank, int world_size,
                                            const std::vector<int>& members);
  // The ops of the messages done, with their replies; those of unknown numbers are left out.
  std::vector<std::pair<PendingOp, proto::DaemonToClient>> done(
      const std::vector<engine::MessageDone>& done);

 private:
  struct InFlight {
    PendingOp op;
    net::Clock::time_point posted;
  };

  const Post post_;
  std::map<std::uint64_t, InFlight> in_flight_;
  std::uint64_t last_id_ = 0;
};

}  // namespace gradsync::daemon
