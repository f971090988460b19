#include "engine/segment_queues.h"

#include <algorithm>

namespace gradsync::engine {

namespace {

bool overlap(const Span& a, const Span& b) {
  return a.buffer == b.buffer && a.length > 0 && b.length > 0 && a.offset < b.end() &&
         b.offset < a.end();
}

// Whether a round's receives change bytes that the same round sends (a hypercube exchange reduces
// into what it sends): the sends must read them as they were when the round began.
bool receives_into_its_sends(const Round& round) {
  return std::any_of(round.sends.begin(), round.sends.end(), [&](const Send& send) {
    return std::any_of(send.spans.begin(), send.spans.end(), [&](const Span& sent) {
      return std::any_of(round.recvs.begin(), round.recvs.end(), [&](const Recv& recv) {
        return std::any_of(recv.spans.begin(), recv.spans.end(),
                           [&](const Span& target) { return overlap(sent, target); });
      });
    });
  });
}

bool has_multi_segment_message(const Schedule& schedule, std::uint64_t segment_bytes) {
  return std::any_of(schedule.rounds.begin(), schedule.rounds.end(), [&](const Round& round) {
    return std::any_of(round.sends.begin(), round.sends.end(),
                       [&](const Send& send) { return send.bytes() > segment_bytes; }) ||
           std::any_of(round.recvs.begin(), round.recvs.end(),
                       [&](const Recv& recv) { return recv.bytes() > segment_bytes; });
  });
}

// The pieces of the message bytes [begin, end) that `spans`, at `bases`, lay out back to back.
std::vector<Piece> pieces(const std::vector<Span>& spans, const std::vector<std::byte*>& bases,
                          std::uint64_t begin, std::uint64_t end) {
  std::vector<Piece> result;
  std::uint64_t position = 0;
  for (std::size_t i = 0; i < spans.size(); ++i) {
    const std::uint64_t from = std::max(begin, position);
    const std::uint64_t to = std::min(end, position + spans[i].length);
    if (from < to) result.push_back({bases[i] + (from - position), to - from});
    position += spans[i].length;
  }
  return result;
}

// Calls `visit(index, offset, length)` for each segment of a message of `total` bytes.
template <typename Visit>
void for_each_segment(std::uint64_t total, std::uint64_t segment_bytes, Visit visit) {
  std::uint32_t index = 0;
  std::uint64_t offset = 0;
  do {
    const std::uint64_t length = std::min(segment_bytes, total - offset);
    visit(index++, offset, length);
    offset += length;
  } while (offset < total);
}

}  // namespace

bool overlap(const std::vector<Piece>& a, const std::vector<Piece>& b) {
  for (const Piece& x : a) {
    for (const Piece& y : b) {
      if (x.length > 0 && y.length > 0 && x.address < y.address + y.length &&
          y.address < x.address + x.length) {
        return true;
      }
    }
  }
  return false;
}

std::byte* OpMemory::locate(const Span& span) const {
  switch (span.buffer) {
    case BufferId::data:
      return data + span.offset;
    case BufferId::output:
      return output + span.offset;
    case BufferId::scratch:
      return scratch + span.offset;
  }
  return nullptr;
}

SegmentQueues::SegmentQueues(const Schedule& schedule, int world_size, std::uint64_t segment_bytes,
                             const OpMemory& memory)
    : schedule_(schedule),
      segment_bytes_(segment_bytes),
      memory_(memory),
      multi_segment_(has_multi_segment_message(schedule, segment_bytes)),
      last_receive_round_(world_size, -1),
      outgoing_(world_size),
      incoming_(world_size),
      holding_(world_size, false) {
  for (std::size_t round = 0; round < schedule.rounds.size(); ++round) {
    round_receives_into_its_sends_.push_back(receives_into_its_sends(schedule.rounds[round]));
    for (const Recv& recv : schedule.rounds[round].recvs) {
      last_receive_round_[recv.peer] = static_cast<std::ptrdiff_t>(round);
    }
  }
}

void SegmentQueues::begin_round(std::size_t round) {
  round_ = round;
  if (queued_rounds_ == round) queue_round(round);
  while (may_start_early(queued_rounds_)) queue_round(queued_rounds_);
}

// A round may be queued while an earlier one runs unless it follows local copies or receives
// into its own sends: those must see the buffers as they are once the round before is over.
bool SegmentQueues::may_start_early(std::size_t round) const {
  if (!multi_segment_ || round >= schedule_.rounds.size()) return false;
  return schedule_.rounds[round - 1].copies.empty() && !round_receives_into_its_sends_[round];
}

void SegmentQueues::queue_round(std::size_t round_index) {
  const Round& round = schedule_.rounds[round_index];
  queued_rounds_ = round_index + 1;
  for (const Send& send : round.sends) {
    std::vector<std::byte*> bases;
    for (const Span& span : send.spans) bases.push_back(memory_.locate(span));
    for_each_segment(send.bytes(), segment_bytes_,
                     [&](std::uint32_t index, std::uint64_t offset, std::uint64_t length) {
                       OutSegment segment;
                       segment.round = round_index;
                       segment.index = index;
                       segment.offset = offset;
                       segment.length = length;
                       segment.pieces = pieces(send.spans, bases, offset, offset + length);
                       outgoing_[send.peer].push_back(std::move(segment));
                     });
  }
  for (const Recv& recv : round.recvs) {
    std::vector<std::byte*> bases;
    for (const Span& span : recv.spans) bases.push_back(memory_.locate(span));
    for_each_segment(recv.bytes(), segment_bytes_,
                     [&](std::uint32_t index, std::uint64_t offset, std::uint64_t length) {
                       incoming_[recv.peer].push_back(
                           {round_index, index, offset, length,
                            pieces(recv.spans, bases, offset, offset + length), recv.action});
                     });
  }
}

bool SegmentQueues::round_done() const {
  for (std::size_t peer = 0; peer < outgoing_.size(); ++peer) {
    if (!outgoing_[peer].empty() && outgoing_[peer].front().round == round_) return false;
    if (!incoming_[peer].empty() && incoming_[peer].front().round == round_) return false;
  }
  return true;
}

bool SegmentQueues::waits_for_earlier_round(std::size_t round, const std::vector<Piece>& bytes,
                                            bool writes) const {
  if (round == round_) return false;
  for (std::size_t peer = 0; peer < outgoing_.size(); ++peer) {
    for (const InSegment& in : incoming_[peer]) {
      if (in.round >= round) break;
      if (overlap(bytes, in.pieces)) return true;
    }
    if (!writes) continue;
    for (const OutSegment& out : outgoing_[peer]) {
      if (out.round >= round) break;
      if (overlap(bytes, out.pieces)) return true;
    }
  }
  return false;
}

bool SegmentQueues::may_send_next(int peer) const {
  if (outgoing_[peer].empty()) return false;
  const OutSegment& next = outgoing_[peer].front();
  return !waits_for_earlier_round(next.round, next.pieces, false);
}

bool SegmentQueues::frame_waits(int peer, std::uint32_t round) const {
  if (round <= round_) return false;
  if (round >= queued_rounds_ || incoming_[peer].empty()) return true;
  const InSegment& expected = incoming_[peer].front();
  return expected.round != round || waits_for_earlier_round(expected.round, expected.pieces, true);
}

bool SegmentQueues::expects_more_from(int peer) const {
  return !incoming_[peer].empty() ||
         last_receive_round_[peer] >= static_cast<std::ptrdiff_t>(queued_rounds_);
}

bool SegmentQueues::lands_on_unsent_bytes(const InSegment& segment) const {
  if (!round_receives_into_its_sends_[segment.round]) return false;
  for (const std::deque<OutSegment>& queue : outgoing_) {
    for (const OutSegment& out : queue) {
      if (out.round > segment.round) break;
      if (overlap(segment.pieces, out.pieces)) return true;
    }
  }
  return false;
}

bool SegmentQueues::may_unblock_more() const {
  return queued_rounds_ > round_ + 1 ||
         std::find(holding_.begin(), holding_.end(), true) != holding_.end();
}

void SegmentQueues::sent(int peer) {
  outgoing_[peer].pop_front();
  ++finished_;
}

void SegmentQueues::received(int peer) {
  incoming_[peer].pop_front();
  ++finished_;
}

}  // namespace gradsync::engine
