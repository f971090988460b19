// A client's point-to-point request (a send or a receive, proto::Transfer) checked against what
// this daemon can run, every field before use, and turned into the message the point-to-point
// engine takes (engine/point_to_point.h): its peer and its own rank as global ranks, its region
// large enough for its values, its tag in range.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "collective/status.h"
#include "daemon/stream_pairing.h"
#include "engine/point_to_point.h"

namespace gradsync::daemon {

inline constexpr std::int64_t kMaxTag = std::numeric_limits<std::int32_t>::max();

// Fills `message` for `pending`, a request of global rank `rank` in a group of `world_size`
// ranks, whose stream runs over `members` (empty: every rank; the request's peer is then a rank of
// the subgroup).
Status prepare_message(const PendingOp& pending, int rank, int world_size,
                       const std::vector<int>& members, engine::PostedMessage& message);

}  // namespace gradsync::daemon
