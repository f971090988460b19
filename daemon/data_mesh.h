// Forms a rank's data connections: it connects to every lower rank and accepts every higher one,
// each connection opened by a hello frame (generation, rank, world size). A connection that does
// not open with a valid hello from an expected rank is logged and closed; the listener keeps
// rejecting such connections for the daemon's whole life.
#pragma once

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "collective/status.h"
#include "engine/peer_mesh.h"
#include "net/deadline.h"
#include "net/socket.h"

namespace gradsync::daemon {

struct MeshPlan {
  int rank = 0;
  int world_size = 1;
  std::uint64_t generation = 0;
  std::vector<net::HostPort> peers;  // by rank
};

Status form_data_mesh(const MeshPlan& plan, int listener, net::Deadline deadline,
                      std::vector<net::UniqueFd>& sockets);

// Accepts and turns away every later connection to the data port, with a log line saying why.
class IntruderGuard {
 public:
  IntruderGuard(int listener, MeshPlan plan);
  ~IntruderGuard();

 private:
  void run();
  int listener_;
  MeshPlan plan_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace gradsync::daemon
