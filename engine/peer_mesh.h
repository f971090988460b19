// The data channels of one rank to every other rank of its group, with the stream state kept for
// each between ops (engine/peer_stream.h). Ops run one at a time on a mesh; frames of older ops
// are skipped by their op id.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/peer_stream.h"
#include "net/data_channels.h"

namespace gradsync::engine {

// Memory an op needs besides its client's buffers, kept from op to op up to a few segments: fresh
// memory costs a page fault per page on first touch, which for a large op takes longer than moving
// its bytes; but what one large op needed (a Bruck all-to-all's scratch) is not held for the
// daemon's life.
struct OpWorkspace {
  std::vector<std::byte> scratch;    // the schedule's scratch buffer
  std::vector<std::byte> converted;  // values converted to or from their wire type

  // Frees every buffer larger than `kept_bytes`.
  void release_beyond(std::size_t kept_bytes);
  std::size_t held_bytes() const;
};

class PeerMesh {
 public:
  // A peer whose channel is not connected is lost from the start.
  PeerMesh(int rank, int world_size, std::uint64_t generation,
           std::unique_ptr<net::DataChannels> channels);

  int rank() const { return rank_; }
  int world_size() const { return static_cast<int>(peers_.size()); }
  std::uint64_t generation() const { return generation_; }
  PeerStream& peer(int rank) { return peers_[rank]; }
  net::DataChannels& channels() { return *channels_; }
  // The op id the next op gets: every rank counts its ops in the same order.
  std::uint64_t next_op_id() { return next_op_id_++; }
  OpWorkspace& workspace() { return workspace_; }

 private:
  int rank_;
  std::uint64_t generation_;
  std::uint64_t next_op_id_ = 1;
  std::unique_ptr<net::DataChannels> channels_;
  std::vector<PeerStream> peers_;
  OpWorkspace workspace_;
};

}  // namespace gradsync::engine
