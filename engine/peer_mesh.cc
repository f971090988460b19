#include "engine/peer_mesh.h"

namespace gradsync::engine {

PeerMesh::PeerMesh(int rank, int world_size, std::uint64_t generation,
                   std::unique_ptr<net::DataChannels> channels)
    : rank_(rank),
      generation_(generation),
      channels_(std::move(channels)),
      peers_(static_cast<std::size_t>(world_size)) {
  for (int r = 0; r < world_size; ++r) {
    if (r != rank && !channels_->connected(r)) peers_[r].lost_reason = "never connected";
  }
}

}  // namespace gradsync::engine
