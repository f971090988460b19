// The data channels of one rank to every other rank of its group, with the stream state kept for
// each between ops (engine/peer_stream.h). Ops run one at a time on a mesh; frames of ops this rank
// is done with, and of other jobs, are skipped by their key (frame.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/frame.h"
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

// How many client streams a mesh remembers the last finished place of (PeerMesh::finished).
inline constexpr std::size_t kMaxStreamsKept = 4096;

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
  // This rank's count of the ops it has started in the generation, 1 for the first: the place of
  // the daemon's own ops, and where a new algorithm table takes effect.
  std::uint64_t next_op_id() { return next_op_id_++; }
  // How many it has started: the count a subgroup's op carries, which does not start a place of
  // the count (docs/architecture.md §6.5).
  std::uint64_t ops_started() const { return next_op_id_ - 1; }
  // A peer has counted `count` ops: ops a job ran on some ranks only (one whose client died, a
  // lone rank's) leave the counts apart, and the next op they share brings them together again.
  void catch_up(std::uint64_t count) {
    if (count < std::numeric_limits<std::uint64_t>::max()) {
      next_op_id_ = std::max(next_op_id_, count + 1);
    }
  }
  OpWorkspace& workspace() { return workspace_; }

  // This rank is done with client op `op`: a frame of it, or of an earlier op of its stream, that
  // comes while another stream's op runs is skipped, not kept for later. The last place of the
  // kMaxStreamsKept streams finished with last is kept: a job's frames may still come after it
  // has left this daemon (its other ranks' clients go on), and the same names may come back.
  void finished(const OpKey& op);
  bool has_finished(const OpKey& op) const;  // of a client op

  // `peer` said, in an end frame read while an op it did not fail ran, that its client of
  // `stream` (its job and stream) left after submitting the op at stream.place: a later op of that
  // stream can never finish. Kept for the kMaxStreamsKept streams that ended last.
  void note_stream_end(int peer, const OpKey& stream, std::string reason);
  // Why `op` cannot finish because `peer`'s client of its stream left before submitting it; null
  // if it did not.
  const std::string* stream_end_before(int peer, const OpKey& op) const;

 private:
  int rank_;
  std::uint64_t generation_;
  std::uint64_t next_op_id_ = 1;
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint64_t> last_finished_;  // by stream
  std::deque<std::pair<std::uint64_t, std::uint64_t>> streams_by_age_;  // of last_finished_
  // By (peer, job, stream): the last place its client submitted, and why it left.
  using PeerStreamKey = std::tuple<int, std::uint64_t, std::uint64_t>;
  std::map<PeerStreamKey, std::pair<std::uint64_t, std::string>> stream_ends_;
  std::deque<PeerStreamKey> ends_by_age_;  // of stream_ends_
  std::unique_ptr<net::DataChannels> channels_;
  std::vector<PeerStream> peers_;
  OpWorkspace workspace_;
};

}  // namespace gradsync::engine
