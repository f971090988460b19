// One rank's byte stream to and from one peer, kept from op to op: bytes read ahead of the frame
// that needs them, the frame header being read and how much of its payload is consumed (a frame
// read ahead of its op waits here for it), and whether the channel was last seen with more to read
// or room to write. Bytes move here; what a frame means is the executor's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "collective/status.h"
#include "engine/frame.h"
#include "engine/segment_queues.h"
#include "net/data_channels.h"

namespace gradsync::engine {

// Bytes read from a channel ahead of the frame that needs them: one read takes a small frame's
// header and payload, and whatever frames follow, where reading them one by one would cost a
// system call each.
inline constexpr std::size_t kReadAheadBytes = 4 << 10;

class PeerStream {
 public:
  // A peer whose channel is not connected is lost from the start (this rank's own stream, which
  // carries nothing, included).
  PeerStream(int peer, net::DataChannels& channels);

  int peer() const { return peer_; }
  bool lost() const { return !lost_reason_.empty(); }
  const std::string& lost_reason() const { return lost_reason_; }
  // The peer-lost status of a lost stream, naming the peer and why.
  Status lost_status() const;
  // Marks the stream unusable and returns its lost status.
  Status lose(const std::string& reason);
  // Closes the channel for good as well: what comes on it can no longer be trusted, or the peer
  // would wait for the rest of a frame that never comes.
  void close(const std::string& reason);
  Status protocol_violation(const std::string& what);

  // Gives up to `wanted` bytes of the stream: first what was read ahead, then, if the channel may
  // have more, from the channel; `got` is 0 once nothing is left without waiting. A small want is
  // read through the read-ahead buffer, so that the frames behind it come in the same read; a
  // large one goes straight into `bytes`.
  Status receive_some(std::byte* bytes, std::uint64_t wanted, std::uint64_t& got);
  // Reads the next frame's header into header_bytes as far as the channel has it (`got`: how many
  // bytes came); it is whole once header_have is kFrameHeaderBytes.
  Status receive_header(std::uint64_t& got);
  // Writes what the channel takes of a framed segment, from where its last write stopped;
  // `may_write` is false afterwards unless the whole frame went.
  Status send_some(OutSegment& segment);

  // Whether the channel may have more to read, or room to write: false after a read came back
  // short or a write would have blocked, true again once a wait says so. No system call is made
  // to find out what the last one already said.
  bool may_read = true;
  bool may_write = true;

  // The frame being read: its header bytes as they arrive, then the header decoded, its payload
  // not yet fully consumed.
  EncodedHeader header_bytes{};
  std::size_t header_have = 0;
  std::optional<FrameHeader> header;
  std::uint64_t payload_done = 0;
  void drop_header() {
    header.reset();
    header_have = 0;
    payload_done = 0;
  }
  // Whether a frame has begun and not ended.
  bool mid_frame() const { return header ? payload_done < header->length : header_have > 0; }

  std::vector<std::byte> scratch;   // one segment, for receive-and-reduce or a narrowed payload
  std::vector<std::byte> narrowed;  // the segment being sent, narrowed to its op's wire type

 private:
  int peer_;
  net::DataChannels* channels_;
  std::string lost_reason_;  // non-empty once the connection is unusable
  std::vector<std::byte> read_ahead_;
  std::size_t read_ahead_begin_ = 0;  // the unconsumed bytes are [begin, end)
  std::size_t read_ahead_end_ = 0;
};

}  // namespace gradsync::engine
