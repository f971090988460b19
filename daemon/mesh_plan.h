// What a worker needs from its assignment to form its data mesh: its rank, the group's size and
// generation, every rank's data address and local ranks. Read from the coordinator's message and
// checked field by field first, since an assignment that lies (a world size of two billion, a rank
// outside the group, a peer table with holes) would otherwise size memory or index tables with it.
#pragma once

#include <cstdint>
#include <vector>

#include "collective/host_layout.h"
#include "collective/status.h"
#include "gradsync.pb.h"
#include "net/socket.h"

namespace gradsync::daemon {

struct MeshPlan {
  int rank = 0;
  int world_size = 1;
  std::uint64_t generation = 0;
  std::vector<net::HostPort> peers;  // by rank
  HostLayout layout;                 // the ranks each worker's daemon serves
};

// A protocol error naming the first field that is wrong.
Status mesh_plan_from(const proto::Assignment& assignment, MeshPlan& plan);

}  // namespace gradsync::daemon
