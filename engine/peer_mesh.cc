#include "engine/peer_mesh.h"

namespace gradsync::engine {

namespace {

void release_if_larger(std::vector<std::byte>& buffer, std::size_t kept_bytes) {
  if (buffer.capacity() > kept_bytes) std::vector<std::byte>().swap(buffer);
}

}  // namespace

void OpWorkspace::release_beyond(std::size_t kept_bytes) {
  release_if_larger(scratch, kept_bytes);
  release_if_larger(converted, kept_bytes);
}

std::size_t OpWorkspace::held_bytes() const { return scratch.capacity() + converted.capacity(); }

PeerMesh::PeerMesh(int rank, int world_size, std::uint64_t generation,
                   std::unique_ptr<net::DataChannels> channels)
    : rank_(rank), generation_(generation), channels_(std::move(channels)) {
  peers_.reserve(static_cast<std::size_t>(world_size));
  for (int r = 0; r < world_size; ++r) peers_.emplace_back(r, *channels_);
}

}  // namespace gradsync::engine
