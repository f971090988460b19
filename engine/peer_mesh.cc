#include "engine/peer_mesh.h"

#include "collective/check.h"

namespace gradsync::engine {

PeerMesh::PeerMesh(int rank, int world_size, std::uint64_t generation,
                   std::vector<net::UniqueFd> sockets)
    : rank_(rank), generation_(generation), peers_(static_cast<std::size_t>(world_size)) {
  GRADSYNC_CHECK_EQ(sockets.size(), peers_.size());
  for (int r = 0; r < world_size; ++r) {
    if (r == rank) continue;
    peers_[r].socket = std::move(sockets[r]);
    if (!peers_[r].socket.valid()) peers_[r].lost_reason = "never connected";
  }
}

}  // namespace gradsync::engine
