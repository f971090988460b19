// The data channels of one rank to every other rank of its group, and the state of each
// stream between ops: a frame header read ahead of its op, a payload half consumed when an op
// failed. Ops run one at a time on a mesh; frames of older ops are skipped by their op id.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/frame.h"
#include "net/data_channels.h"

namespace gradsync::engine {

// Bytes read from a channel ahead of the frame that needs them: one read takes a small frame's
// header and payload, and whatever frames follow, where reading them one by one would cost a
// system call each (about a microsecond apiece on a virtual machine).
inline constexpr std::size_t kReadAheadBytes = 4 << 10;

struct PeerStream {
  std::string lost_reason;  // non-empty once the connection is unusable

  std::vector<std::byte> read_ahead;
  std::size_t read_ahead_begin = 0;  // the unconsumed bytes are [begin, end)
  std::size_t read_ahead_end = 0;
  // Whether the channel may have more to read, or room to write: false after a read came back
  // short or a write would have blocked, true again once a wait says so. No system call is made
  // to find out what the last one already said.
  bool may_read = true;
  bool may_write = true;

  EncodedHeader header_bytes{};
  std::size_t header_have = 0;
  std::optional<FrameHeader> header;  // decoded, its payload not yet fully consumed
  std::uint64_t payload_done = 0;
  std::vector<std::byte> scratch;   // one segment, for receive-and-reduce or a narrowed payload
  std::vector<std::byte> narrowed;  // the segment being sent, narrowed to its op's wire type

  bool lost() const { return !lost_reason.empty(); }
  void drop_header() {
    header.reset();
    header_have = 0;
    payload_done = 0;
  }
};

// Memory an op needs besides its client's buffers, kept from op to op up to a few segments: fresh
// memory costs a page fault per 4 KiB on first touch, which for a 64 MiB op takes longer than
// moving its bytes; but what one large op needed (a Bruck all-to-all's scratch) is not held for
// the daemon's life.
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
