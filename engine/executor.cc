#include "engine/executor.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "collective/reduce_kernels.h"
#include "collective/subgroup.h"
#include "engine/landing.h"
#include "engine/segment_queues.h"

namespace gradsync::engine {

namespace {

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

// Tells one peer in an abort or end frame (`code` in an abort) why this rank gave up on `op`; a
// peer that cannot be told is dropped, since its stream would be left mid-frame.
void send_notice(PeerMesh& mesh, int peer, FrameKind kind, const OpKey& op,
                 const OpDescriptor& descriptor, std::uint32_t round, const Status& reason,
                 net::Deadline deadline) {
  FrameHeader header;
  header.kind = kind;
  header.generation = mesh.generation();
  header.op = op;
  header.round = round;
  if (kind == FrameKind::abort) header.segment = static_cast<std::uint32_t>(reason.code());
  header.length = std::min<std::uint64_t>(reason.message().size(), kMaxAbortReasonBytes);
  header.descriptor = descriptor;
  const EncodedHeader bytes = encode(header);
  const auto text = std::as_bytes(std::span(reason.message().data(), header.length));
  if (!net::send_all(mesh.channels(), peer, bytes, deadline).ok() ||
      !net::send_all(mesh.channels(), peer, text, deadline).ok()) {
    mesh.peer(peer).close("could not deliver why an op or a stream ended");
  }
}

void send_abort(PeerMesh& mesh, int peer, const ExecuteOptions& options, std::uint32_t round,
                const Status& reason, net::Deadline deadline) {
  send_notice(mesh, peer, FrameKind::abort, options.op, options.descriptor, round, reason,
              deadline);
}

// By mesh rank, whether it takes part in a subgroup's op; empty for an op of every rank, which
// allocates nothing.
std::vector<bool> takes_part(const PeerMesh& mesh, const ExecuteOptions& options) {
  std::vector<bool> result;
  if (options.members.empty()) return result;
  result.resize(static_cast<std::size_t>(mesh.world_size()), false);
  for (const int member : options.members) result[member] = true;
  return result;
}

// How a frame's op stands to the op this rank runs.
enum class Relation {
  current,    // the same op
  done,       // one this rank is done with: skipped
  to_come,    // one this rank has yet to run: left in the channel until then
  other_job,  // an op of another job, which cannot run here while this one's job holds the
              // daemon: skipped
};

// One rank's run of one op: the rounds in order, each a loop that moves every segment it can on
// every channel and then waits for the channels, the op's deadline, a stalled peer or an abort.
class OpRun {
 public:
  OpRun(const Schedule& schedule, const OpBuffers& buffers, PeerMesh& mesh,
        const ExecuteOptions& options)
      : schedule_(schedule),
        mesh_(mesh),
        options_(options),
        format_{options.descriptor.dtype, options.descriptor.op, schedule.shape.element_size,
                options.descriptor.wire},
        segment_bytes_(std::max<std::size_t>(
            options.segment_bytes / schedule.shape.element_size * schedule.shape.element_size,
            schedule.shape.element_size)),
        workspace_(mesh.workspace()),
        memory_{buffers.data, buffers.output, prepare_scratch()},
        queues_(schedule, mesh.world_size(), segment_bytes_, memory_),
        stalled_since_(mesh.world_size()),
        other_job_(mesh.world_size()),
        takes_part_(takes_part(mesh, options)) {}

  std::uint64_t peers_count() const { return peers_count_; }

  Status run() {
    for (int peer = 0; peer < mesh_.world_size(); ++peer) {
      if (!is_peer(peer)) continue;
      if (const std::string* left = mesh_.stream_end_before(peer, options_.op)) {
        return fail(Status(ErrorCode::aborted, "rank " + std::to_string(peer) + ": " + *left));
      }
    }
    for (std::size_t round = 0; round < schedule_.rounds.size(); ++round) {
      queues_.begin_round(round);
      if (Status status = transfer(); !status.ok()) return fail(status);
      for (const LocalCopy& copy : schedule_.rounds[round].copies) {
        if (copy.from.length > 0) {
          std::memmove(memory_.locate(copy.to), memory_.locate(copy.from), copy.from.length);
        }
      }
    }
    const Collective collective = schedule_.shape.collective;
    // With a 16-bit wire, every rank holds a replicated result rounded to it, as it was sent.
    if (format_.wire && result_is_replicated(collective) && ends_with_a_reduction(schedule_)) {
      round_to_wire(format_, memory_.locate(schedule_.result), schedule_.result.length,
                    segment_bytes_, workspace_.converted);
    }
    if (reduces(collective)) {
      finalize_average(
          format_.dtype, format_.op, memory_.locate(schedule_.result),
          schedule_.result.length / format_.element_size,
          options_.average_over > 0 ? options_.average_over : schedule_.shape.world_size);
    }
    return {};
  }

 private:
  std::byte* prepare_scratch() {
    const std::size_t scratch_bytes = schedule_.size_of(BufferId::scratch);
    if (workspace_.scratch.size() < scratch_bytes) workspace_.scratch.resize(scratch_bytes);
    return workspace_.scratch.data();
  }

  bool is_peer(int rank) const {
    return rank != mesh_.rank() && (takes_part_.empty() || takes_part_[rank]);
  }

  // Runs the current round until all its transfers are done.
  Status transfer() {
    while (true) {
      bool round_done = false;
      if (Status status = move_without_waiting(round_done); !status.ok()) return status;
      if (round_done) return {};
      if (Status status = wait_and_move(); !status.ok()) return status;
    }
  }

  // Sends go out before the first wait: a channel that took the last write whole almost always
  // takes the next. Then whatever is already read ahead, or likely waiting, is consumed (a header
  // read ahead of its time may have become current with this round). A segment finished with one
  // peer may free a segment of an early round for another, whose frame may already sit in its
  // read-ahead buffer, where a wait cannot see it: so the pass repeats until it finishes nothing.
  Status move_without_waiting(bool& round_done) {
    std::uint64_t finished_before = 0;
    do {
      finished_before = queues_.finished();
      for (int peer = 0; peer < mesh_.world_size(); ++peer) {
        if (!is_peer(peer)) continue;
        if (mesh_.peer(peer).may_write) {
          if (Status status = write_to(peer); !status.ok()) return status;
        }
        if (Status status = read_from(peer); !status.ok()) return status;
      }
      round_done = queues_.round_done();
      if (round_done) return {};
    } while (queues_.finished() != finished_before && queues_.may_unblock_more());
    return {};
  }

  // Waits for the channels this op needs, until the op's deadline, or earlier when a peer that is
  // in the middle of a frame this rank reads would by then have stalled for too long; then moves
  // what the wait says can move.
  Status wait_and_move() {
    interests_.clear();
    net::Deadline until = options_.deadline;
    for (int peer = 0; peer < mesh_.world_size(); ++peer) {
      if (!is_peer(peer)) continue;
      const PeerStream& stream = mesh_.peer(peer);
      if (stream.lost()) return stream.lost_status();
      interests_.push_back({peer, !deferred(peer), queues_.may_send_next(peer)});
      if (const auto stall = stall_deadline(peer); stall && stall->when() < until.when()) {
        until = *stall;
      }
    }
    events_.resize(interests_.size());
    const int ready = mesh_.channels().wait(interests_, events_,
                                            options_.interrupt ? options_.interrupt->fd() : -1,
                                            until, options_.spin);
    if (ready < 0 && errno != EINTR) {
      return Status(ErrorCode::internal, std::string("waiting failed: ") + std::strerror(errno));
    }
    if (options_.interrupt != nullptr && woke_by_interrupt(ready)) {
      if (Status why = options_.interrupt->interruption(); !why.ok()) return why;
    }
    if (ready == 0) {
      if (Status status = lose_stalled_peers(); !status.ok()) return status;
      if (options_.deadline.expired()) return timed_out();
    }
    if (ready <= 0) return {};
    for (std::size_t i = 0; i < interests_.size(); ++i) {
      const int peer = interests_[i].peer;
      PeerStream& stream = mesh_.peer(peer);
      if (events_[i].writable) {
        stream.may_write = true;
        if (Status status = write_to(peer); !status.ok()) return status;
      }
      if (events_[i].hung_up && deferred(peer)) return stream.lose("connection closed");
      if (events_[i].readable) {
        stream.may_read = true;
        if (Status status = read_from(peer); !status.ok()) return status;
      }
    }
    return {};
  }

  // Whether the wait's `ready` entries include the interrupt's fd besides the channels': asking
  // the interrupt costs a system call, which most waits of a small op would pay for nothing.
  bool woke_by_interrupt(int ready) const {
    const auto channels =
        std::count_if(events_.begin(), events_.end(), [](const net::ChannelEvents& events) {
          return events.readable || events.writable || events.hung_up;
        });
    return ready > channels;
  }

  std::string describe_op() const {
    return options_.op.to_string() + " (" + options_.descriptor.to_string() + ")";
  }

  Status timed_out() const {
    std::string ranks;
    for (int peer = 0; peer < mesh_.world_size(); ++peer) {
      if (queues_.has_pending(peer)) ranks += (ranks.empty() ? "" : ", ") + std::to_string(peer);
    }
    std::string others;
    for (int peer = 0; peer < mesh_.world_size(); ++peer) {
      if (!other_job_[peer]) continue;
      others += "; rank " + std::to_string(peer) + " ran ops of another job meanwhile (" +
                other_job_[peer]->to_string() + ")";
    }
    // The likeliest cause: processes of one run started by hand, each a job of its own.
    if (!others.empty()) others += " (every process of one run names the same job: GRADSYNC_JOB)";
    return Status(ErrorCode::deadline_exceeded, describe_op() + " timed out in round " +
                                                    std::to_string(queues_.round()) + " of " +
                                                    std::to_string(schedule_.rounds.size()) +
                                                    ", waiting for rank " + ranks + others);
  }

  Status mismatch(const std::string& what) const {
    return Status(ErrorCode::mismatch, what + " (" + options_.op.to_string() + ", round " +
                                           std::to_string(queues_.round()) + ")");
  }

  // --- Sending ---

  Status write_to(int peer) {
    PeerStream& stream = mesh_.peer(peer);
    while (queues_.may_send_next(peer)) {
      OutSegment& segment = queues_.outgoing(peer).front();
      if (!segment.framed) frame(segment, stream);
      if (Status status = stream.send_some(segment); !status.ok()) return status;
      if (segment.written < segment.total) return {};
      queues_.sent(peer);
    }
    return {};
  }

  // Puts a segment in its frame when it is about to go, not when queued: only now are its values
  // final, and narrowed to the wire type they are kept as they were sent.
  void frame(OutSegment& segment, PeerStream& stream) {
    FrameHeader header;
    header.kind = FrameKind::data;
    header.generation = mesh_.generation();
    header.op = options_.op;
    header.op_count = options_.op_count;
    header.round = static_cast<std::uint32_t>(segment.round);
    header.segment = segment.index;
    header.offset = format_.on_the_wire(segment.offset);
    header.length = format_.on_the_wire(segment.length);
    header.descriptor = options_.descriptor;
    segment.header = encode(header);
    segment.total = kFrameHeaderBytes + header.length;
    if (format_.wire) {
      stream.narrowed.resize(header.length);
      narrow(format_, segment.pieces, stream.narrowed.data());
      segment.pieces = {{stream.narrowed.data(), stream.narrowed.size()}};
    }
    segment.framed = true;
  }

  // --- Receiving ---

  Relation relation_of(const OpKey& theirs) const {
    const OpKey& mine = options_.op;
    if (theirs == mine) return Relation::current;
    if (theirs.same_stream(mine))
      return theirs.place < mine.place ? Relation::done : Relation::to_come;
    if (theirs.of_daemon()) return Relation::done;  // they come before every client op
    if (mine.of_daemon()) return Relation::to_come;
    if (theirs.job != mine.job) return Relation::other_job;
    return mesh_.has_finished(theirs) ? Relation::done : Relation::to_come;
  }

  // A frame of a later op, or of a round this rank has not started, stays unread until this rank
  // gets there; so does one of a round started early whose bytes are not free yet. An end is read
  // at once: it says what this op may no longer wait for.
  bool deferred(int peer) const {
    if (queues_.holding(peer)) return true;  // its scratch is taken
    const std::optional<FrameHeader>& header = mesh_.peer(peer).header;
    if (!header || header->kind == FrameKind::end) return false;
    switch (relation_of(header->op)) {
      case Relation::current:
        return header->kind == FrameKind::data && queues_.frame_waits(peer, header->round);
      case Relation::to_come:
        return true;
      case Relation::done:
      case Relation::other_job:
        return false;
    }
    return false;
  }

  // Whether `peer` has sent a frame of an op this rank has yet to run while this op still expects
  // data from it. Each channel carries its ops in order, so the peer has gone past this op (its
  // client's ops reached it in another order, or a place of the stream failed there unannounced):
  // waiting would hold this op until its deadline.
  bool runs_ahead(int peer) const {
    const std::optional<FrameHeader>& header = mesh_.peer(peer).header;
    return header && header->kind != FrameKind::end &&
           relation_of(header->op) == Relation::to_come && queues_.expects_more_from(peer);
  }

  // Consumes frames from `peer` as far as the channel and this rank's progress allow.
  Status read_from(int peer) {
    PeerStream& stream = mesh_.peer(peer);
    if (stream.lost()) return {};
    if (queues_.holding(peer)) {
      if (queues_.lands_on_unsent_bytes(queues_.incoming(peer).front())) return {};
      queues_.release(peer);
      take_received(peer);
    }
    while (true) {
      if (!stream.header) {
        if (Status status = read_header(stream); !status.ok()) return status;
        if (!stream.header) return {};  // the channel has no more of it yet
      }
      if (runs_ahead(peer)) {
        return mismatch("rank " + std::to_string(peer) + " has gone on to " +
                        stream.header->op.to_string() + " while this rank still expects data of " +
                        "this op from it");
      }
      if (deferred(peer)) return {};
      if (Status status = consume_payload(stream); !status.ok()) return status;
      if (stream.header) return {};  // the payload is not complete yet
    }
  }

  // Reads a frame header as far as the channel has it, and checks it once whole. A wrong one is
  // kept all the same, so that a later op skips its payload.
  Status read_header(PeerStream& stream) {
    std::uint64_t got = 0;
    if (Status status = stream.receive_header(got); !status.ok()) return status;
    if (got > 0) stalled_since_[stream.peer()].reset();
    if (stream.header_have < kFrameHeaderBytes) return {};
    FrameHeader header;
    if (Status status = decode(stream.header_bytes, header); !status.ok()) {
      return stream.protocol_violation(status.message());
    }
    if (std::string why = misplaced(header, mesh_.generation()); !why.empty()) {
      return stream.protocol_violation(why);
    }
    stream.header = header;
    stream.payload_done = 0;
    if (header.kind == FrameKind::data && header.op == options_.op) {
      peers_count_ = std::max(peers_count_, header.op_count);
    }
    if (header.kind == FrameKind::data && header.op == options_.op &&
        header.descriptor != options_.descriptor) {
      return mismatch("rank " + std::to_string(stream.peer()) + " submitted " +
                      header.descriptor.to_string() + ", rank " + std::to_string(mesh_.rank()) +
                      " submitted " + options_.descriptor.to_string());
    }
    return {};
  }

  // The segment that a data frame of this op from `stream`'s peer must carry: the front of its
  // incoming queue, in the frame's round, at the frame's place.
  Status expected_segment(const PeerStream& stream, InSegment*& expected) {
    const FrameHeader& header = *stream.header;
    std::deque<InSegment>& queue = queues_.incoming(stream.peer());
    const std::string peer = "rank " + std::to_string(stream.peer());
    if (header.round < queues_.round() || queue.empty() || queue.front().round != header.round) {
      return mismatch(peer + " sent data in round " + std::to_string(header.round) +
                      " that this rank does not expect");
    }
    expected = &queue.front();
    if (std::string why =
            other_segment(header, expected->index, format_.on_the_wire(expected->offset),
                          format_.on_the_wire(expected->length));
        !why.empty()) {
      return mismatch(peer + " " + why);
    }
    return {};
  }

  // Reads or skips the payload of the stream's current header; on completion the header is gone.
  Status consume_payload(PeerStream& stream) {
    const FrameHeader& header = *stream.header;
    const bool notice = header.kind == FrameKind::abort || header.kind == FrameKind::end;
    const Relation relation = relation_of(header.op);
    const bool stale = relation != Relation::current && header.kind != FrameKind::end;
    if (relation == Relation::other_job && header.kind == FrameKind::data) {
      other_job_[stream.peer()] = header.op;
    }
    InSegment* expected = nullptr;
    if (stale) {
      trash_.resize(std::max<std::size_t>(trash_.size(), 64 << 10));
    } else if (notice) {
      abort_text_.resize(header.length);
    } else {
      if (Status status = expected_segment(stream, expected); !status.ok()) return status;
      if (stream.payload_done == 0) {
        expected->through_scratch = expected->action != RecvAction::copy || format_.wire ||
                                    queues_.lands_on_unsent_bytes(*expected);
      }
      if (expected->through_scratch) {
        stream.scratch.resize(std::max<std::size_t>(stream.scratch.size(), segment_bytes_));
      }
    }
    while (stream.payload_done < header.length) {
      const Piece room = payload_destination(stream, expected, stale);
      std::uint64_t got = 0;
      if (Status status = stream.receive_some(room.address, room.length, got); !status.ok()) {
        return status;
      }
      if (got == 0) return {};
      stream.payload_done += got;
      stalled_since_[stream.peer()].reset();
    }
    const FrameHeader done = header;
    stream.drop_header();
    if (stale) return {};
    if (done.kind == FrameKind::end) {
      // The peer's client will never submit this op, so no rank can finish it, whether this one
      // needs the peer's data or not. An end of another stream, of an earlier client of this one
      // (its name used again), or of one that submitted this op, fails nothing now: the mesh
      // keeps it for the stream's later ops, which its frame will not reach again.
      std::string reason(reinterpret_cast<const char*>(abort_text_.data()), abort_text_.size());
      if (!done.op.same_stream(options_.op) || options_.op.place <= done.op.place) {
        mesh_.note_stream_end(stream.peer(), done.op, std::move(reason));
        return {};
      }
      return Status(ErrorCode::aborted, "rank " + std::to_string(stream.peer()) + ": " + reason);
    }
    if (done.kind == FrameKind::abort) {
      return Status(
          static_cast<ErrorCode>(done.segment),
          std::string(reinterpret_cast<const char*>(abort_text_.data()), abort_text_.size()));
    }
    if (queues_.lands_on_unsent_bytes(*expected)) {
      // It waits in the peer's scratch, and the peer's stream behind it in the channel, until
      // those bytes are out: the sends of a round read the bytes as they were when it began.
      queues_.hold(stream.peer());
      return {};
    }
    take_received(stream.peer());
    return {};
  }

  // Where the next bytes of the current frame's payload go, and how many fit there: skipped for a
  // frame of an older op, the text of an abort, a segment's scratch or its place in the buffers.
  Piece payload_destination(PeerStream& stream, const InSegment* expected, bool stale) {
    const std::uint64_t done = stream.payload_done;
    const std::uint64_t left = stream.header->length - done;
    if (stale) return {trash_.data(), std::min<std::uint64_t>(trash_.size(), left)};
    if (stream.header->kind != FrameKind::data) return {abort_text_.data() + done, left};
    if (expected->through_scratch) return {stream.scratch.data() + done, left};
    std::uint64_t position = done;
    for (const Piece& piece : expected->pieces) {
      if (position < piece.length) return {piece.address + position, piece.length - position};
      position -= piece.length;
    }
    return {nullptr, 0};
  }

  // Lands the peer's segment that has arrived, from its scratch where it went there.
  void take_received(int peer) {
    const InSegment& segment = queues_.incoming(peer).front();
    if (segment.through_scratch) {
      land(format_, segment.action, segment.pieces, mesh_.peer(peer).scratch.data(),
           workspace_.converted);
    }
    queues_.received(peer);
  }

  // --- Stalls and failure ---

  // Whether this rank is reading a frame from `peer` that has begun and not ended: the rest of
  // it is due now, not when the peer gets to it.
  bool mid_frame(int peer) const {
    const PeerStream& stream = mesh_.peer(peer);
    return !stream.lost() && !deferred(peer) && stream.mid_frame();
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
      return mesh_.peer(peer).protocol_violation("stopped sending in the middle of a frame for " +
                                                 std::to_string(options_.stall_timeout.count()) +
                                                 " ms (--stall-timeout-ms)");
    }
    return {};
  }

  // Leaves every stream at a frame boundary and tells every peer why this rank stopped.
  Status fail(Status reason) {
    const net::Deadline flush_deadline = net::Deadline::after(std::chrono::seconds(1));
    for (int peer = 0; peer < mesh_.world_size(); ++peer) {
      PeerStream& stream = mesh_.peer(peer);
      if (!is_peer(peer) || stream.lost()) continue;
      const std::deque<OutSegment>& queue = queues_.outgoing(peer);
      while (!queue.empty() && queue.front().written > 0 && !flush_deadline.expired()) {
        const auto written_before = queue.front().written;
        if (!write_to(peer).ok()) break;
        if (!queue.empty() && queue.front().written == written_before) {
          const net::ChannelInterest writable{peer, false, true};
          net::ChannelEvents events;
          mesh_.channels().wait(std::span(&writable, 1), std::span(&events, 1), -1, flush_deadline,
                                std::chrono::microseconds(0));
        }
      }
      if (!queue.empty() && queue.front().written > 0) {
        stream.close("a frame could not be completed after a failure");
        continue;
      }
      send_abort(mesh_, peer, options_, static_cast<std::uint32_t>(queues_.round()), reason,
                 flush_deadline);
    }
    return reason;
  }

  const Schedule& schedule_;
  PeerMesh& mesh_;
  const ExecuteOptions& options_;
  const ValueFormat format_;
  const std::size_t segment_bytes_;
  OpWorkspace& workspace_;
  const OpMemory memory_;
  SegmentQueues queues_;
  // Since when each peer has sent nothing of a frame this rank is in the middle of reading.
  std::vector<std::optional<net::Clock::time_point>> stalled_since_;
  std::vector<std::optional<OpKey>> other_job_;  // by peer: an op of another job it sent
  std::uint64_t peers_count_ = 0;                // the largest op count of this op's peers' frames
  const std::vector<bool> takes_part_;           // by mesh rank; empty: every rank
  std::vector<std::byte> trash_;
  std::vector<std::byte> abort_text_;
  std::vector<net::ChannelInterest> interests_;  // what each wait watches, and what it found
  std::vector<net::ChannelEvents> events_;
};

}  // namespace

Status execute(const Schedule& schedule, const OpBuffers& buffers, PeerMesh& mesh,
               const ExecuteOptions& options) {
  const Schedule mapped =
      options.members.empty() ? Schedule() : on_group_ranks(schedule, options.members);
  OpRun run(options.members.empty() ? schedule : mapped, buffers, mesh, options);
  Status status = run.run();
  mesh.catch_up(run.peers_count());
  mesh.finished(options.op);
  mesh.workspace().release_beyond(kKeptWorkspaceSegments * options.segment_bytes);
  return status;
}

void announce_failure(PeerMesh& mesh, const ExecuteOptions& options, const Status& reason) {
  mesh.finished(options.op);
  const auto deadline = net::Deadline::after(std::chrono::seconds(1));
  const std::vector<bool> told = takes_part(mesh, options);
  for (int peer = 0; peer < mesh.world_size(); ++peer) {
    if (peer == mesh.rank() || (!told.empty() && !told[peer]) || mesh.peer(peer).lost()) continue;
    send_abort(mesh, peer, options, 0, reason, deadline);
  }
}

void announce_stream_end(PeerMesh& mesh, const OpKey& stream, const std::string& reason) {
  const auto deadline = net::Deadline::after(std::chrono::seconds(1));
  for (int peer = 0; peer < mesh.world_size(); ++peer) {
    if (peer == mesh.rank() || mesh.peer(peer).lost()) continue;
    send_notice(mesh, peer, FrameKind::end, stream, {}, 0, Status(ErrorCode::aborted, reason),
                deadline);
  }
}

}  // namespace gradsync::engine
