#include "engine/executor.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <optional>
#include <vector>

#include "collective/reduce_kernels.h"

namespace gradsync::engine {

namespace {

// A contiguous piece of a segment in one of the op's buffers.
struct Piece {
  std::byte* address;
  std::uint64_t length;
};

struct OutSegment {
  std::size_t round = 0;
  EncodedHeader header;
  std::vector<Piece> pieces;
  std::uint64_t total = 0;  // header + payload
  std::uint64_t written = 0;
  bool narrowed = false;  // `pieces` is the payload narrowed to the wire type
};

struct InSegment {
  std::size_t round = 0;
  std::uint32_t index = 0;
  std::uint64_t offset = 0;  // within the message
  std::uint64_t length = 0;
  std::vector<Piece> pieces;
  RecvAction action = RecvAction::copy;
  // Whether it is read into its peer's scratch, not straight into place: set before its first
  // byte arrives, for one to be reduced, widened, or held (lands_on_unsent_bytes).
  bool through_scratch = false;
};

bool overlap(const Span& a, const Span& b) {
  return a.buffer == b.buffer && a.length > 0 && b.length > 0 && a.offset < b.end() &&
         b.offset < a.end();
}

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

// The last round in which this rank receives from each peer; -1 for a peer it never hears from.
std::vector<std::ptrdiff_t> last_receive_rounds(const Schedule& schedule, int world_size) {
  std::vector<std::ptrdiff_t> last(world_size, -1);
  for (std::size_t round = 0; round < schedule.rounds.size(); ++round) {
    for (const Recv& recv : schedule.rounds[round].recvs) {
      last[recv.peer] = static_cast<std::ptrdiff_t>(round);
    }
  }
  return last;
}

// Whether the last thing this rank receives is reduced in rather than copied: its result is then
// a sum that no peer sent it, which the same sum elsewhere (a hypercube's other ranks) may have
// sent rounded to a 16-bit wire type.
bool ends_with_a_reduction(const Schedule& schedule) {
  for (auto round = schedule.rounds.rbegin(); round != schedule.rounds.rend(); ++round) {
    if (!round->recvs.empty()) {
      return std::any_of(round->recvs.begin(), round->recvs.end(),
                         [](const Recv& recv) { return recv.reduces(); });
    }
  }
  return false;
}

bool has_multi_segment_message(const Schedule& schedule, std::uint64_t segment_bytes) {
  return std::any_of(schedule.rounds.begin(), schedule.rounds.end(), [&](const Round& round) {
    return std::any_of(round.sends.begin(), round.sends.end(),
                       [&](const Send& send) { return send.bytes() > segment_bytes; }) ||
           std::any_of(round.recvs.begin(), round.recvs.end(),
                       [&](const Recv& recv) { return recv.bytes() > segment_bytes; });
  });
}

// Tells one peer why this rank gave up on an op; a peer that cannot be told is dropped, since its
// stream would be left mid-frame.
void send_abort(PeerMesh& mesh, int peer, const ExecuteOptions& options, std::uint32_t round,
                const Status& reason, net::Deadline deadline) {
  FrameHeader header;
  header.kind = FrameKind::abort;
  header.generation = mesh.generation();
  header.op_id = options.op_id;
  header.round = round;
  header.segment = static_cast<std::uint32_t>(reason.code());
  header.length = std::min<std::uint64_t>(reason.message().size(), kMaxAbortReasonBytes);
  header.descriptor = options.descriptor;
  const EncodedHeader bytes = encode(header);
  const auto text = std::as_bytes(std::span(reason.message().data(), header.length));
  if (!net::send_all(mesh.channels(), peer, bytes, deadline).ok() ||
      !net::send_all(mesh.channels(), peer, text, deadline).ok()) {
    mesh.peer(peer).lost_reason = "could not deliver the abort of a failed op";
    mesh.channels().disconnect(peer);
  }
}

class OpRun {
 public:
  OpRun(const Schedule& schedule, const OpBuffers& buffers, PeerMesh& mesh,
        const ExecuteOptions& options)
      : schedule_(schedule),
        buffers_(buffers),
        mesh_(mesh),
        options_(options),
        segment_bytes_(std::max<std::size_t>(
            options.segment_bytes / schedule.shape.element_size * schedule.shape.element_size,
            schedule.shape.element_size)),
        multi_segment_(has_multi_segment_message(schedule, segment_bytes_)),
        last_receive_round_(last_receive_rounds(schedule, mesh.world_size())),
        wire_(options.descriptor.wire),
        workspace_(mesh.workspace()),
        outgoing_(mesh.world_size()),
        incoming_(mesh.world_size()),
        holding_(mesh.world_size(), false),
        stalled_since_(mesh.world_size()) {
    for (const Round& round : schedule.rounds) {
      round_receives_into_its_sends_.push_back(receives_into_its_sends(round));
    }
  }

  Status run() {
    const std::size_t scratch_bytes = schedule_.size_of(BufferId::scratch);
    if (workspace_.scratch.size() < scratch_bytes) workspace_.scratch.resize(scratch_bytes);
    for (round_ = 0; round_ < schedule_.rounds.size(); ++round_) {
      if (prepared_rounds_ == round_) prepare_round(round_);
      while (may_start_early(prepared_rounds_)) prepare_round(prepared_rounds_);
      if (Status status = transfer(); !status.ok()) return fail(status);
      for (const LocalCopy& copy : schedule_.rounds[round_].copies) {
        if (copy.from.length > 0) {
          std::memmove(locate(copy.to), locate(copy.from), copy.from.length);
        }
      }
    }
    const Collective collective = schedule_.shape.collective;
    // With a 16-bit wire, every rank holds a replicated result rounded to it, as it was sent.
    if (wire_ && result_is_replicated(collective) && ends_with_a_reduction(schedule_)) {
      round_to_wire(schedule_.result);
    }
    if (collective == Collective::allreduce || collective == Collective::reduce_scatter) {
      finalize_average(
          options_.descriptor.dtype, options_.descriptor.op, locate(schedule_.result),
          schedule_.result.length / schedule_.shape.element_size,
          options_.average_over > 0 ? options_.average_over : schedule_.shape.world_size);
    }
    return {};
  }

 private:
  std::byte* locate(const Span& span) {
    switch (span.buffer) {
      case BufferId::data:
        return buffers_.data + span.offset;
      case BufferId::output:
        return buffers_.output + span.offset;
      case BufferId::scratch:
        return workspace_.scratch.data() + span.offset;
    }
    return nullptr;
  }

  // The pieces of the message bytes [begin, end) that `spans` lay out back to back.
  std::vector<Piece> pieces(const std::vector<Span>& spans, std::uint64_t begin, std::uint64_t end,
                            const std::vector<std::byte*>& bases) {
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

  FrameHeader header_for(std::size_t round, std::uint32_t index, std::uint64_t offset,
                         std::uint64_t length) const {
    FrameHeader header;
    header.kind = FrameKind::data;
    header.generation = mesh_.generation();
    header.op_id = options_.op_id;
    header.round = static_cast<std::uint32_t>(round);
    header.segment = index;
    header.offset = on_the_wire(offset);
    header.length = on_the_wire(length);
    header.descriptor = options_.descriptor;
    return header;
  }

  // How many bytes `data_bytes` of the op's values take on the wire.
  std::uint64_t on_the_wire(std::uint64_t data_bytes) const {
    if (!wire_) return data_bytes;
    return data_bytes / schedule_.shape.element_size * element_size(*wire_);
  }

  // Rounds the values of `span` to the wire type in place, where this rank keeps a value that its
  // peers were sent rounded; a segment at a time, so that no buffer the size of the span is needed.
  void round_to_wire(const Span& span) {
    const std::uint64_t step = std::min<std::uint64_t>(span.length, segment_bytes_);
    workspace_.converted.resize(on_the_wire(step));
    for (std::uint64_t offset = 0; offset < span.length; offset += step) {
      const std::uint64_t length = std::min(step, span.length - offset);
      narrow_pieces({{locate(span) + offset, length}}, workspace_.converted.data());
    }
  }

  // Rounds the values of `pieces` to the wire type in place, writing the narrowed values to
  // `narrowed` (sized by the caller) back to back.
  void narrow_pieces(const std::vector<Piece>& pieces, std::byte* narrowed) const {
    const DataType type = options_.descriptor.dtype;
    for (const Piece& piece : pieces) {
      const std::size_t count = piece.length / schedule_.shape.element_size;
      narrow_for_wire(type, *wire_, narrowed, piece.address, count);
      narrowed += count * element_size(*wire_);
    }
  }

  // Cuts every message of the round into segments; a zero-length message is one empty frame.
  template <typename Visit>
  void for_each_segment(std::uint64_t total, Visit visit) {
    std::uint32_t index = 0;
    std::uint64_t offset = 0;
    do {
      const std::uint64_t length = std::min<std::uint64_t>(segment_bytes_, total - offset);
      visit(index++, offset, length);
      offset += length;
    } while (offset < total);
  }

  // Later rounds' transfers are queued while this one runs (DESIGN.md §4: a rank forwards the
  // segment it has just received and reduced while the rest of its round is still arriving),
  // up to a round that follows local copies or receives into its own sends: those must see the
  // buffers as they are once the round before is over. Each segment queued early waits only
  // for the earlier transfers that touch its own bytes (see waits_for_earlier_round).
  bool may_start_early(std::size_t next) const {
    if (!multi_segment_ || next >= schedule_.rounds.size()) return false;
    return schedule_.rounds[next - 1].copies.empty() && !round_receives_into_its_sends_[next];
  }

  void prepare_round(std::size_t round_index) {
    const Round& round = schedule_.rounds[round_index];
    prepared_rounds_ = round_index + 1;
    for (const Send& send : round.sends) {
      std::vector<std::byte*> bases;
      for (const Span& span : send.spans) bases.push_back(locate(span));
      for_each_segment(
          send.bytes(), [&](std::uint32_t index, std::uint64_t offset, std::uint64_t length) {
            OutSegment segment{round_index, encode(header_for(round_index, index, offset, length)),
                               pieces(send.spans, offset, offset + length, bases),
                               kFrameHeaderBytes + on_the_wire(length), 0};
            outgoing_[send.peer].push_back(std::move(segment));
          });
    }
    for (const Recv& recv : round.recvs) {
      std::vector<std::byte*> bases;
      for (const Span& span : recv.spans) bases.push_back(locate(span));
      for_each_segment(
          recv.bytes(), [&](std::uint32_t index, std::uint64_t offset, std::uint64_t length) {
            incoming_[recv.peer].push_back({round_index, index, offset, length,
                                            pieces(recv.spans, offset, offset + length, bases),
                                            recv.action});
          });
    }
  }

  // Segments are queued in round order, so the current round is done once no queue starts with
  // one of its segments.
  bool round_done() const {
    for (int peer = 0; peer < mesh_.world_size(); ++peer) {
      if (!outgoing_[peer].empty() && outgoing_[peer].front().round == round_) return false;
      if (!incoming_[peer].empty() && incoming_[peer].front().round == round_) return false;
    }
    return true;
  }

  // Whether a segment of a round started early must wait: its bytes are still to be written by an
  // earlier round's receive, or (for a receive) still to be read by an earlier round's send.
  bool waits_for_earlier_round(std::size_t round, const std::vector<Piece>& bytes,
                               bool writes) const {
    if (round == round_) return false;
    for (int peer = 0; peer < mesh_.world_size(); ++peer) {
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

  bool may_send_next(int peer) const {
    if (outgoing_[peer].empty()) return false;
    const OutSegment& next = outgoing_[peer].front();
    return !waits_for_earlier_round(next.round, next.pieces, false);
  }

  std::string describe_op() const {
    return "op " + std::to_string(options_.op_id) + " (" + options_.descriptor.to_string() + ")";
  }

  std::string waiting_for() const {
    std::string ranks;
    for (int peer = 0; peer < mesh_.world_size(); ++peer) {
      if (!outgoing_[peer].empty() || !incoming_[peer].empty()) {
        ranks += (ranks.empty() ? "" : ", ") + std::to_string(peer);
      }
    }
    return ranks;
  }

  Status transfer() {
    while (true) {
      // Sends go out before the first wait: a channel that took the last write whole almost
      // always takes the next. Then whatever is already read ahead, or likely waiting, is
      // consumed (a header read ahead of its time may have become current with this round).
      // A segment finished with one peer may free a segment of an early round for another, whose
      // frame may already sit in its read-ahead buffer, where a wait cannot see it: so the pass
      // repeats until it finishes nothing.
      std::uint64_t finished_before = 0;
      do {
        finished_before = finished_segments_;
        for (int peer = 0; peer < mesh_.world_size(); ++peer) {
          if (peer == mesh_.rank()) continue;
          if (mesh_.peer(peer).may_write) {
            if (Status status = write_to(peer); !status.ok()) return status;
          }
          if (Status status = read_from(peer); !status.ok()) return status;
        }
        if (round_done()) return {};
      } while (finished_segments_ != finished_before &&
               (prepared_rounds_ > round_ + 1 || holds_a_segment()));
      interests_.clear();
      // The wait ends at the op's deadline, or earlier when a peer that is in the middle of a
      // frame this rank reads would by then have stalled for too long.
      net::Deadline until = options_.deadline;
      for (int peer = 0; peer < mesh_.world_size(); ++peer) {
        if (peer == mesh_.rank()) continue;
        PeerStream& stream = mesh_.peer(peer);
        if (stream.lost()) {
          return Status(ErrorCode::peer_lost,
                        "lost rank " + std::to_string(peer) + ": " + stream.lost_reason);
        }
        interests_.push_back({peer, !deferred(peer), may_send_next(peer)});
        if (const auto stall = stall_deadline(peer); stall && stall->when() < until.when()) {
          until = *stall;
        }
      }
      events_.resize(interests_.size());
      const int ready = mesh_.channels().wait(
          interests_, events_, options_.abort ? options_.abort->fd() : -1, until, options_.spin);
      if (ready < 0 && errno != EINTR) {
        return Status(ErrorCode::internal, std::string("waiting failed: ") + std::strerror(errno));
      }
      if (options_.abort != nullptr && options_.abort->raised()) return options_.abort->reason();
      if (ready == 0) {
        if (Status status = lose_stalled_peers(); !status.ok()) return status;
      }
      if (ready == 0 && options_.deadline.expired()) {
        return Status(ErrorCode::deadline_exceeded, describe_op() + " timed out in round " +
                                                        std::to_string(round_) + " of " +
                                                        std::to_string(schedule_.rounds.size()) +
                                                        ", waiting for rank " + waiting_for());
      }
      if (ready <= 0) continue;
      for (std::size_t i = 0; i < interests_.size(); ++i) {
        const int peer = interests_[i].peer;
        PeerStream& stream = mesh_.peer(peer);
        if (events_[i].writable) {
          stream.may_write = true;
          if (Status status = write_to(peer); !status.ok()) return status;
        }
        if (events_[i].hung_up && deferred(peer)) return lose(peer, "connection closed");
        if (events_[i].readable) {
          stream.may_read = true;
          if (Status status = read_from(peer); !status.ok()) return status;
        }
      }
    }
  }

  // Whether this rank is reading a frame from `peer` that has begun and not ended: the rest of
  // it is due now, not when the peer gets to it.
  bool mid_frame(int peer) const {
    const PeerStream& stream = mesh_.peer(peer);
    if (stream.lost() || deferred(peer)) return false;
    return stream.header ? stream.payload_done < stream.header->length : stream.header_have > 0;
  }

  // When `peer`, in the middle of a frame this rank reads, will have stalled for too long; none
  // while it is not. A stall counts from the peer's last byte or from when its frame became due,
  // whichever is later.
  std::optional<net::Deadline> stall_deadline(int peer) {
    if (!mid_frame(peer)) {
      stalled_since_[peer].reset();
      return std::nullopt;
    }
    if (!stalled_since_[peer]) stalled_since_[peer] = net::Clock::now();
    return net::Deadline(*stalled_since_[peer] + options_.stall_timeout);
  }

  Status lose_stalled_peers() {
    for (int peer = 0; peer < mesh_.world_size(); ++peer) {
      if (!stalled_since_[peer] || !mid_frame(peer) ||
          net::Clock::now() - *stalled_since_[peer] < options_.stall_timeout) {
        continue;
      }
      return protocol_violation(peer, "stopped sending in the middle of a frame for " +
                                          std::to_string(options_.stall_timeout.count()) +
                                          " ms (--stall-timeout-ms)");
    }
    return {};
  }

  Status lose(int peer, const std::string& reason) {
    mesh_.peer(peer).lost_reason = reason;
    return Status(ErrorCode::peer_lost, "lost rank " + std::to_string(peer) + ": " + reason);
  }

  Status write_to(int peer) {
    PeerStream& stream = mesh_.peer(peer);
    while (may_send_next(peer)) {
      OutSegment& segment = outgoing_[peer].front();
      if (wire_ && !segment.narrowed) {
        // Narrowed when it is about to go, not when queued: only now are its values final.
        stream.narrowed.resize(segment.total - kFrameHeaderBytes);
        narrow_pieces(segment.pieces, stream.narrowed.data());
        segment.pieces = {{stream.narrowed.data(), stream.narrowed.size()}};
        segment.narrowed = true;
      }
      iovec parts[8];
      int count = 0;
      std::uint64_t skip = segment.written;
      if (skip < kFrameHeaderBytes) {
        parts[count++] = {segment.header.data() + skip, kFrameHeaderBytes - skip};
        skip = 0;
      } else {
        skip -= kFrameHeaderBytes;
      }
      for (const Piece& piece : segment.pieces) {
        if (count == 8) break;
        if (skip >= piece.length) {
          skip -= piece.length;
          continue;
        }
        parts[count++] = {piece.address + skip, piece.length - skip};
        skip = 0;
      }
      const net::IoResult sent = mesh_.channels().send(peer, std::span(parts, count));
      if (sent.outcome == net::IoOutcome::would_block) {
        stream.may_write = false;
        return {};
      }
      if (sent.outcome != net::IoOutcome::done) {
        return lose(peer, std::string("sending failed: ") + std::strerror(sent.error));
      }
      segment.written += sent.bytes;
      if (segment.written < segment.total) {
        stream.may_write = false;  // the channel's buffer is full
        return {};
      }
      outgoing_[peer].pop_front();
      ++finished_segments_;
    }
    return {};
  }

  // A frame of a later op, or of a round this rank has not started, stays unread until this rank
  // gets there; so does one of a round started early whose bytes are not free yet.
  bool deferred(int peer) const {
    const PeerStream& stream = mesh_.peer(peer);
    if (holding_[peer]) return true;  // its scratch is taken
    if (!stream.header) return false;
    const FrameHeader& header = *stream.header;
    if (header.op_id != options_.op_id) return header.op_id > options_.op_id;
    if (header.kind != FrameKind::data || header.round <= round_) return false;
    if (header.round >= prepared_rounds_ || incoming_[peer].empty()) return true;
    const InSegment& expected = incoming_[peer].front();
    return expected.round != header.round ||
           waits_for_earlier_round(expected.round, expected.pieces, true);
  }

  // Gives up to `wanted` bytes of the stream: first what was read ahead, then, if the channel may
  // have more, from the channel; `got` is 0 once nothing is left without waiting. A small want is
  // read through the read-ahead buffer, so that the frames behind it come in the same read; a
  // large one goes straight into `bytes`.
  Status receive_some(int peer, std::byte* bytes, std::uint64_t wanted, std::uint64_t& got) {
    PeerStream& stream = mesh_.peer(peer);
    got = 0;
    if (stream.read_ahead_begin == stream.read_ahead_end && stream.may_read) {
      const bool through_buffer = wanted < kReadAheadBytes;
      if (through_buffer && stream.read_ahead.size() < kReadAheadBytes) {
        stream.read_ahead.resize(kReadAheadBytes);
      }
      std::byte* into = through_buffer ? stream.read_ahead.data() : bytes;
      const std::size_t room = through_buffer ? kReadAheadBytes : wanted;
      const net::IoResult received = mesh_.channels().receive(peer, into, room);
      switch (received.outcome) {
        case net::IoOutcome::done:
          break;
        case net::IoOutcome::would_block:
          stream.may_read = false;
          return {};
        case net::IoOutcome::closed:
          return lose(peer, "connection closed");
        case net::IoOutcome::failed:
          return lose(peer, std::string("receiving failed: ") + std::strerror(received.error));
      }
      const std::size_t count = received.bytes;
      // A short read emptied the channel's queue.
      if (count < room) stream.may_read = false;
      if (!through_buffer) {
        got = count;
        return {};
      }
      stream.read_ahead_begin = 0;
      stream.read_ahead_end = count;
    }
    got = std::min<std::uint64_t>(wanted, stream.read_ahead_end - stream.read_ahead_begin);
    if (got > 0) std::memcpy(bytes, stream.read_ahead.data() + stream.read_ahead_begin, got);
    stream.read_ahead_begin += got;
    return {};
  }

  // Whether `peer` has sent a frame of a later op while this op still expects data from it. Each
  // stream carries its ops in order, so the peer skipped what this rank needs; waiting would wedge
  // the stream until the op's deadline, and every op after it.
  bool runs_ahead(int peer) const {
    const std::optional<FrameHeader>& header = mesh_.peer(peer).header;
    if (!header || header->op_id <= options_.op_id) return false;
    return !incoming_[peer].empty() ||
           last_receive_round_[peer] >= static_cast<std::ptrdiff_t>(prepared_rounds_);
  }

  // Whether a received segment lands on bytes that are still to be sent, in its round or before
  // (checked only in rounds that receive into their own sends).
  bool lands_on_unsent_bytes(const InSegment& segment) const {
    if (!round_receives_into_its_sends_[segment.round]) return false;
    for (int peer = 0; peer < mesh_.world_size(); ++peer) {
      for (const OutSegment& out : outgoing_[peer]) {
        if (out.round > segment.round) break;
        if (overlap(segment.pieces, out.pieces)) return true;
      }
    }
    return false;
  }

  bool holds_a_segment() const {
    return std::find(holding_.begin(), holding_.end(), true) != holding_.end();
  }

  // Consumes frames from `peer` as far as the channel and this rank's progress allow.
  Status read_from(int peer) {
    PeerStream& stream = mesh_.peer(peer);
    if (stream.lost()) return {};
    if (holding_[peer]) {
      if (lands_on_unsent_bytes(incoming_[peer].front())) return {};
      holding_[peer] = false;
      take_received(peer);
    }
    while (true) {
      if (!stream.header) {
        std::uint64_t got = 0;
        if (Status status = receive_some(peer, stream.header_bytes.data() + stream.header_have,
                                         kFrameHeaderBytes - stream.header_have, got);
            !status.ok()) {
          return status;
        }
        if (got == 0) return {};
        stream.header_have += got;
        stalled_since_[peer].reset();
        if (stream.header_have < kFrameHeaderBytes) continue;
        FrameHeader header;
        if (Status status = decode(stream.header_bytes, header); !status.ok()) {
          return protocol_violation(peer, status.message());
        }
        if (header.generation != mesh_.generation()) {
          return protocol_violation(peer, "frame of generation " +
                                              std::to_string(header.generation) + ", expected " +
                                              std::to_string(mesh_.generation()));
        }
        if (header.kind == FrameKind::hello) return protocol_violation(peer, "unexpected hello");
        // Kept even when it is wrong, so that a later op skips its payload.
        stream.header = header;
        stream.payload_done = 0;
        if (header.kind == FrameKind::data && header.op_id == options_.op_id &&
            header.descriptor != options_.descriptor) {
          return mismatch("rank " + std::to_string(peer) + " submitted " +
                          header.descriptor.to_string() + ", rank " + std::to_string(mesh_.rank()) +
                          " submitted " + options_.descriptor.to_string());
        }
      }
      if (runs_ahead(peer)) {
        return protocol_violation(
            peer, "it sent a frame of op " + std::to_string(stream.header->op_id) + " while op " +
                      std::to_string(options_.op_id) + " still expects data from it");
      }
      if (deferred(peer)) return {};
      Status status = consume_payload(peer, stream);
      if (!status.ok()) return status;
      if (stream.header) return {};  // the payload is not complete yet
    }
  }

  Status protocol_violation(int peer, const std::string& what) {
    mesh_.channels().disconnect(peer);  // the stream can no longer be trusted
    return lose(peer, "protocol error: " + what);
  }

  Status mismatch(const std::string& what) const {
    return Status(ErrorCode::mismatch, what + " (op " + std::to_string(options_.op_id) +
                                           ", round " + std::to_string(round_) + ")");
  }

  // Reads or skips the payload of the stream's current header; on completion the header is gone.
  Status consume_payload(int peer, PeerStream& stream) {
    const FrameHeader& header = *stream.header;
    std::vector<Piece> targets;
    InSegment* expected = nullptr;
    const bool stale = header.op_id < options_.op_id;
    if (stale) {
      trash_.resize(std::max<std::size_t>(trash_.size(), 64 << 10));
    } else if (header.kind == FrameKind::abort) {
      abort_text_.resize(header.length);
    } else {
      if (header.round < round_ || incoming_[peer].empty() ||
          incoming_[peer].front().round != header.round) {
        return mismatch("rank " + std::to_string(peer) + " sent data in round " +
                        std::to_string(header.round) + " that this rank does not expect");
      }
      expected = &incoming_[peer].front();
      if (header.segment != expected->index || header.offset != on_the_wire(expected->offset) ||
          header.length != on_the_wire(expected->length)) {
        return mismatch("rank " + std::to_string(peer) + " sent " + std::to_string(header.length) +
                        " bytes at offset " + std::to_string(header.offset) +
                        ", this rank expects " + std::to_string(on_the_wire(expected->length)) +
                        " at offset " + std::to_string(on_the_wire(expected->offset)));
      }
      if (stream.payload_done == 0) {
        expected->through_scratch =
            expected->action != RecvAction::copy || wire_ || lands_on_unsent_bytes(*expected);
      }
      if (expected->through_scratch) {
        stream.scratch.resize(std::max<std::size_t>(stream.scratch.size(), segment_bytes_));
      } else {
        targets = expected->pieces;
      }
    }
    while (stream.payload_done < header.length) {
      std::byte* destination = nullptr;
      std::uint64_t room = 0;
      if (stale) {
        destination = trash_.data();
        room = std::min<std::uint64_t>(trash_.size(), header.length - stream.payload_done);
      } else if (header.kind == FrameKind::abort) {
        destination = abort_text_.data() + stream.payload_done;
        room = header.length - stream.payload_done;
      } else if (expected->through_scratch) {
        destination = stream.scratch.data() + stream.payload_done;
        room = header.length - stream.payload_done;
      } else {
        std::uint64_t position = stream.payload_done;
        for (const Piece& piece : targets) {
          if (position < piece.length) {
            destination = piece.address + position;
            room = piece.length - position;
            break;
          }
          position -= piece.length;
        }
      }
      std::uint64_t got = 0;
      if (Status status = receive_some(peer, destination, room, got); !status.ok()) return status;
      if (got == 0) return {};
      stream.payload_done += got;
      stalled_since_[peer].reset();
    }
    const FrameHeader done = header;
    stream.drop_header();
    if (stale) return {};
    if (done.kind == FrameKind::abort) {
      return Status(
          static_cast<ErrorCode>(done.segment),
          std::string(reinterpret_cast<const char*>(abort_text_.data()), abort_text_.size()));
    }
    if (lands_on_unsent_bytes(*expected)) {
      // It waits in the peer's scratch, and the peer's stream behind it in the channel, until
      // those bytes are out: the sends of a round read the bytes as they were when it began.
      holding_[peer] = true;
      return {};
    }
    take_received(peer);
    return {};
  }

  // Copies or reduces the peer's segment that has arrived, from its scratch where it went there.
  void take_received(int peer) {
    const PeerStream& stream = mesh_.peer(peer);
    const InSegment& segment = incoming_[peer].front();
    if (wire_) {
      widen_received(stream, segment);
    } else if (segment.through_scratch) {
      const std::byte* received = stream.scratch.data();
      const std::size_t element = schedule_.shape.element_size;
      for (const Piece& piece : segment.pieces) {
        const bool local_first = segment.action == RecvAction::reduce_local_first;
        if (segment.action == RecvAction::copy) {
          std::memcpy(piece.address, received, piece.length);
        } else {
          reduce(options_.descriptor.dtype, options_.descriptor.op, piece.address,
                 local_first ? piece.address : received, local_first ? received : piece.address,
                 piece.length / element);
        }
        received += piece.length;
      }
    }
    incoming_[peer].pop_front();
    ++finished_segments_;
  }

  // Takes a segment received in the wire type: copies it widened, or widens it and reduces.
  void widen_received(const PeerStream& stream, const InSegment& segment) {
    const DataType type = options_.descriptor.dtype;
    const std::size_t element = schedule_.shape.element_size;
    const std::byte* received = stream.scratch.data();
    for (const Piece& piece : segment.pieces) {
      const std::size_t count = piece.length / element;
      if (segment.action == RecvAction::copy) {
        widen_from_wire(type, *wire_, piece.address, received, count);
      } else {
        workspace_.converted.resize(std::max(workspace_.converted.size(), piece.length));
        std::byte* widened = workspace_.converted.data();
        widen_from_wire(type, *wire_, widened, received, count);
        const bool local_first = segment.action == RecvAction::reduce_local_first;
        reduce(type, options_.descriptor.op, piece.address, local_first ? piece.address : widened,
               local_first ? widened : piece.address, count);
      }
      received += count * element_size(*wire_);
    }
  }

  // Leaves every stream at a frame boundary and tells every peer why this rank stopped.
  Status fail(Status reason) {
    const net::Deadline flush_deadline = net::Deadline::after(std::chrono::seconds(1));
    for (int peer = 0; peer < mesh_.world_size(); ++peer) {
      PeerStream& stream = mesh_.peer(peer);
      if (peer == mesh_.rank() || stream.lost()) continue;
      while (!outgoing_[peer].empty() && outgoing_[peer].front().written > 0 &&
             !flush_deadline.expired()) {
        const auto written_before = outgoing_[peer].front().written;
        if (!write_to(peer).ok()) break;
        if (!outgoing_[peer].empty() && outgoing_[peer].front().written == written_before) {
          const net::ChannelInterest writable{peer, false, true};
          net::ChannelEvents events;
          mesh_.channels().wait(std::span(&writable, 1), std::span(&events, 1), -1, flush_deadline,
                                std::chrono::microseconds(0));
        }
      }
      if (!outgoing_[peer].empty() && outgoing_[peer].front().written > 0) {
        stream.lost_reason = "a frame could not be completed after a failure";
        mesh_.channels().disconnect(peer);
        continue;
      }
      send_abort(mesh_, peer, options_, static_cast<std::uint32_t>(round_), reason, flush_deadline);
    }
    return reason;
  }

  const Schedule& schedule_;
  OpBuffers buffers_;
  PeerMesh& mesh_;
  const ExecuteOptions& options_;
  const std::size_t segment_bytes_;
  // Where every message is one segment, a round started early has nothing to overlap: each
  // segment waits for a whole message either way, and the bookkeeping cost a tree of 4 B-4 KiB
  // about 10% (loopback, p = 4).
  const bool multi_segment_;
  const std::vector<std::ptrdiff_t> last_receive_round_;  // per peer, -1 if none
  std::vector<bool> round_receives_into_its_sends_;
  const std::optional<DataType> wire_;  // set when values travel narrowed
  std::size_t round_ = 0;               // the round whose transfers must all finish before the next
  std::size_t prepared_rounds_ = 0;     // rounds whose segments are queued
  std::uint64_t finished_segments_ = 0;
  OpWorkspace& workspace_;
  std::vector<std::deque<OutSegment>> outgoing_;
  std::vector<std::deque<InSegment>> incoming_;
  // Per peer: its segment at the front of `incoming_` has arrived in its scratch and waits for
  // bytes it lands on to be sent.
  std::vector<bool> holding_;
  // Since when each peer has sent nothing of a frame this rank is in the middle of reading.
  std::vector<std::optional<net::Clock::time_point>> stalled_since_;
  std::vector<std::byte> trash_;
  std::vector<std::byte> abort_text_;
  std::vector<net::ChannelInterest> interests_;  // what each wait watches, and what it found
  std::vector<net::ChannelEvents> events_;
};

}  // namespace

Status execute(const Schedule& schedule, const OpBuffers& buffers, PeerMesh& mesh,
               const ExecuteOptions& options) {
  Status status = OpRun(schedule, buffers, mesh, options).run();
  mesh.workspace().release_beyond(kKeptWorkspaceSegments * options.segment_bytes);
  return status;
}

void announce_failure(PeerMesh& mesh, const ExecuteOptions& options, const Status& reason) {
  const auto deadline = net::Deadline::after(std::chrono::seconds(1));
  for (int peer = 0; peer < mesh.world_size(); ++peer) {
    if (peer == mesh.rank() || mesh.peer(peer).lost()) continue;
    send_abort(mesh, peer, options, 0, reason, deadline);
  }
}

}  // namespace gradsync::engine
