// The segments of one rank's op, queued per peer in round order, and the rules that say which of
// them may move now. Pure bookkeeping over the schedule and the segments' state: no channel, no
// clock, so that every dependency rule can be tested alone.
//
// Segmenting, once for every collective: each message of a round (one Send or Recv, its spans back
// to back) is cut into segments of at most `segment_bytes`, each of which travels as one frame; a
// zero-length message is one empty frame. Segments are queued per peer in round order, so the
// current round is done once no queue starts with one of its segments. While it runs, the rounds
// after it may be queued early (pipelining: a ring rank forwards the segment it has just reduced
// while the rest of its round is still arriving), and a segment of a round queued early moves only
// once every earlier transfer that touches its bytes is over.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "collective/schedule.h"
#include "engine/frame.h"

namespace gradsync::engine {

// A contiguous piece of a segment in one of the op's buffers.
struct Piece {
  std::byte* address;
  std::uint64_t length;
};

bool overlap(const std::vector<Piece>& a, const std::vector<Piece>& b);

// Where the schedule's buffers are in memory for one op.
struct OpMemory {
  std::byte* data = nullptr;
  std::byte* output = nullptr;  // all-to-all only
  std::byte* scratch = nullptr;

  std::byte* locate(const Span& span) const;
};

struct OutSegment {
  std::size_t round = 0;
  std::uint32_t index = 0;   // within its message
  std::uint64_t offset = 0;  // within its message, in the op's own values
  std::uint64_t length = 0;
  std::vector<Piece> pieces;
  // Set by the sender just before its first byte goes (only then are its values final): the frame
  // it travels in, and `pieces` then point at its payload as sent (narrowed to a wire type).
  bool framed = false;
  EncodedHeader header{};
  std::uint64_t total = 0;  // header + payload
  std::uint64_t written = 0;
};

struct InSegment {
  std::size_t round = 0;
  std::uint32_t index = 0;
  std::uint64_t offset = 0;  // within its message
  std::uint64_t length = 0;
  std::vector<Piece> pieces;
  RecvAction action = RecvAction::copy;
  // Whether it is read into its peer's scratch, not straight into place: set before its first
  // byte arrives, for one to be reduced, widened, or held (lands_on_unsent_bytes).
  bool through_scratch = false;
};

class SegmentQueues {
 public:
  SegmentQueues(const Schedule& schedule, int world_size, std::uint64_t segment_bytes,
                const OpMemory& memory);

  // Makes `round` the current one: queues its segments unless they were queued early, then those
  // of every later round that may start early.
  void begin_round(std::size_t round);
  std::size_t round() const { return round_; }
  bool round_done() const;

  std::deque<OutSegment>& outgoing(int peer) { return outgoing_[peer]; }
  std::deque<InSegment>& incoming(int peer) { return incoming_[peer]; }
  const std::deque<OutSegment>& outgoing(int peer) const { return outgoing_[peer]; }
  const std::deque<InSegment>& incoming(int peer) const { return incoming_[peer]; }
  bool has_pending(int peer) const { return !outgoing_[peer].empty() || !incoming_[peer].empty(); }

  // Whether the segment at the front of `peer`'s outgoing queue may be sent now.
  bool may_send_next(int peer) const;
  // Whether a data frame of `round` from `peer`, of this op, must stay unread for now: its round
  // is not queued yet, or the bytes of the segment it carries are still to be written or read by
  // an earlier round.
  bool frame_waits(int peer, std::uint32_t round) const;
  // Whether this op still expects data from `peer`, queued or in a round not queued yet.
  bool expects_more_from(int peer) const;
  // Whether a received segment lands on bytes that are still to be sent, in its round or before
  // (only rounds that receive into their own sends can).
  bool lands_on_unsent_bytes(const InSegment& segment) const;

  // The front segment of `peer`'s incoming queue has arrived in the peer's scratch and waits for
  // the bytes it lands on to be sent; nothing more is read from the peer meanwhile.
  void hold(int peer) { holding_[peer] = true; }
  void release(int peer) { holding_[peer] = false; }
  bool holding(int peer) const { return holding_[peer]; }
  // Whether finishing a segment may free another to move: one of a round queued early, or one
  // held.
  bool may_unblock_more() const;

  // The front segment of `peer`'s queue is done.
  void sent(int peer);
  void received(int peer);
  // Segments done so far, sent and received.
  std::uint64_t finished() const { return finished_; }

 private:
  void queue_round(std::size_t round);
  bool may_start_early(std::size_t round) const;
  // Whether a segment of a round queued early must wait: its bytes are still to be written by an
  // earlier round's receive, or (for a receive, `writes`) still to be read by an earlier send.
  bool waits_for_earlier_round(std::size_t round, const std::vector<Piece>& bytes,
                               bool writes) const;

  const Schedule& schedule_;
  const std::uint64_t segment_bytes_;
  const OpMemory memory_;
  // Where every message is one segment, a round started early has nothing to overlap: each
  // segment waits for a whole message either way, and the bookkeeping costs small ops time.
  const bool multi_segment_;
  std::vector<std::ptrdiff_t> last_receive_round_;  // per peer, -1 if none
  std::vector<bool> round_receives_into_its_sends_;
  std::size_t round_ = 0;          // the round whose transfers must all finish before the next
  std::size_t queued_rounds_ = 0;  // rounds whose segments are queued
  std::uint64_t finished_ = 0;
  std::vector<std::deque<OutSegment>> outgoing_;
  std::vector<std::deque<InSegment>> incoming_;
  std::vector<bool> holding_;
};

}  // namespace gradsync::engine
