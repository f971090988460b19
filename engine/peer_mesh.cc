#include "engine/peer_mesh.h"

#include <algorithm>

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

void PeerMesh::finished(const OpKey& op) {
  if (op.of_daemon()) return;
  const auto [entry, added] = last_finished_.try_emplace({op.job, op.stream}, op.place);
  if (!added) {
    entry->second = std::max(entry->second, op.place);
    return;
  }
  streams_by_age_.push_back(entry->first);
  if (streams_by_age_.size() > kMaxStreamsKept) {
    last_finished_.erase(streams_by_age_.front());
    streams_by_age_.pop_front();
  }
}

bool PeerMesh::has_finished(const OpKey& op) const {
  const auto found = last_finished_.find({op.job, op.stream});
  return found != last_finished_.end() && op.place <= found->second;
}

void PeerMesh::note_stream_end(int peer, const OpKey& stream, std::string reason) {
  const auto [entry, added] = stream_ends_.insert_or_assign(
      {peer, stream.job, stream.stream}, std::pair{stream.place, std::move(reason)});
  if (!added) return;
  ends_by_age_.push_back(entry->first);
  if (ends_by_age_.size() > kMaxStreamsKept) {
    stream_ends_.erase(ends_by_age_.front());
    ends_by_age_.pop_front();
  }
}

const std::string* PeerMesh::stream_end_before(int peer, const OpKey& op) const {
  const auto found = stream_ends_.find({peer, op.job, op.stream});
  if (found == stream_ends_.end() || found->second.first >= op.place) return nullptr;
  return &found->second.second;
}

}  // namespace gradsync::engine
