#include <algorithm>

#include "engine/point_to_point.h"

namespace gradsync::engine {

PointToPointEngine::Place PointToPointEngine::place_of(const FrameHeader& header) {
  return {{header.op.job, header.op.stream, header.descriptor.root,
           static_cast<std::uint32_t>(header.op_count), header.round},
          header.op.place};
}

// --- Frames out ---

FrameHeader PointToPointEngine::header_of(FrameKind kind, const Place& place) const {
  FrameHeader header;
  header.kind = kind;
  header.generation = options_.generation;
  header.op = {place.key.job, place.key.stream, place.number};
  header.round = place.key.tag;
  header.descriptor.root = place.key.sender;
  header.op_count = place.key.receiver;
  return header;
}

void PointToPointEngine::queue(int host, Outgoing outgoing) {
  OutSegment& segment = outgoing.segment;
  segment.framed = true;
  segment.total = kFrameHeaderBytes + segment.length;
  std::deque<Outgoing>& queue = outgoing_[host];
  if (outgoing.ready) {
    // Ahead of the bytes not yet begun: its sender may wait to send this way while this host
    // sends it a long message, and a ready has nothing to keep in order with other messages'
    // bytes.
    const auto unbegun = std::find_if(queue.begin(), queue.end(), [](const Outgoing& queued) {
      return queued.send && queued.segment.written == 0;
    });
    queue.insert(unbegun, std::move(outgoing));
    return;
  }
  queue.push_back(std::move(outgoing));
}

void PointToPointEngine::queue_notice(int host, FrameKind kind, const Place& place,
                                      const Status& why) {
  FrameHeader header = header_of(kind, place);
  Outgoing outgoing;
  outgoing.text = why.message().substr(0, kMaxAbortReasonBytes);
  if (kind == FrameKind::abort) header.segment = static_cast<std::uint32_t>(why.code());
  header.length = outgoing.text.size();
  outgoing.segment.header = encode(header);
  outgoing.segment.length = header.length;
  queue(host, std::move(outgoing));
}

Status PointToPointEngine::write_to(int host) {
  PeerStream& stream = hosts_[host];
  std::deque<Outgoing>& queue = outgoing_[host];
  while (!queue.empty() && stream.may_write && !stream.lost()) {
    Outgoing& front = queue.front();
    if (!front.text.empty()) {
      // Pointed at only now: a queue's elements move when a failed send's frames leave it.
      front.segment.pieces = {{reinterpret_cast<std::byte*>(front.text.data()), front.text.size()}};
    }
    if (Status status = stream.send_some(front.segment); !status.ok()) return status;
    if (front.segment.written < front.segment.total) return {};
    const std::optional<Place> place = front.send;
    const std::uint64_t length = front.segment.length;
    queue.pop_front();
    if (!place) continue;
    const auto send = sends_.find(*place);
    if (send == sends_.end()) continue;  // it failed meanwhile
    send->second.bytes_done += length;
    if (send->second.bytes_done == message_bytes(send->second.message)) {
      finish(sends_, send, {});
    }
  }
  return {};
}

// --- Frames in ---

Status PointToPointEngine::read_from(int host) {
  PeerStream& stream = hosts_[host];
  while (!stream.lost()) {
    if (!stream.header) {
      std::uint64_t got = 0;
      if (Status status = stream.receive_header(got); !status.ok()) return status;
      if (got > 0) stalled_since_[host].reset();
      if (stream.header_have < kFrameHeaderBytes) return {};
      FrameHeader header;
      if (Status status = decode(stream.header_bytes, header); !status.ok()) {
        return stream.protocol_violation(status.message());
      }
      if (Status status = take_header(host, header); !status.ok()) return status;
      if (!stream.header) continue;  // a ready, taken whole
    }
    const FrameHeader& header = *stream.header;
    const Landing& landing = landing_[host];
    const bool notice = header.kind == FrameKind::abort || header.kind == FrameKind::end;
    while (stream.payload_done < header.length) {
      const std::uint64_t left = header.length - stream.payload_done;
      std::byte* into = nullptr;
      std::uint64_t room = left;
      if (notice) {
        into = reinterpret_cast<std::byte*>(notice_text_[host].data()) + stream.payload_done;
      } else if (landing.receive) {
        into = landing.bytes + stream.payload_done;
      } else {
        trash_.resize(64 << 10);
        into = trash_.data();
        room = std::min<std::uint64_t>(left, trash_.size());
      }
      std::uint64_t got = 0;
      if (Status status = stream.receive_some(into, room, got); !status.ok()) return status;
      if (got == 0) return {};
      stream.payload_done += got;
      stalled_since_[host].reset();
    }
    const FrameHeader done = header;
    const std::optional<Place> place = landing_[host].receive;
    stream.drop_header();
    landing_[host] = {};
    if (notice) {
      if (Status status = take_notice(host, done, notice_text_[host]); !status.ok()) return status;
    } else if (place) {
      const auto receive = receives_.find(*place);
      if (receive != receives_.end()) {
        receive->second.bytes_done += done.length;
        if (receive->second.bytes_done == message_bytes(receive->second.message)) {
          finish(receives_, receive, {});
        }
      }
    }
  }
  return {};
}

// Checks a header from `host` against what it may say, and sets where its payload goes.
Status PointToPointEngine::take_header(int host, const FrameHeader& header) {
  PeerStream& stream = hosts_[host];
  const auto violation = [&](const std::string& what) { return stream.protocol_violation(what); };
  if (header.generation != options_.generation) {
    return violation("frame of generation " + std::to_string(header.generation) + ", expected " +
                     std::to_string(options_.generation));
  }
  if (header.kind == FrameKind::data || header.kind == FrameKind::hello) {
    return violation("a collectives frame on a point-to-point connection");
  }
  const auto ranks = options_.host_of_rank.size();
  if (header.descriptor.root >= ranks ||
      (header.kind != FrameKind::end && header.op_count >= ranks)) {
    return violation(
        "a frame naming rank " +
        std::to_string(std::max<std::uint64_t>(header.descriptor.root, header.op_count)) +
        ", beyond the group's " + std::to_string(ranks));
  }
  if (header.kind == FrameKind::ready && header.length != 0) {
    return violation("a ready with " + std::to_string(header.length) + " bytes of payload");
  }
  if (header.kind == FrameKind::end && host_of(header.descriptor.root) != host) {
    return violation("an end for rank " + std::to_string(header.descriptor.root) +
                     ", which is not that host's");
  }
  if (header.kind == FrameKind::abort) {
    const Place place = place_of(header);
    const bool ours_to_theirs = local(place.key.sender) && host_of(place.key.receiver) == host;
    const bool theirs_to_ours = local(place.key.receiver) && host_of(place.key.sender) == host;
    if (!ours_to_theirs && !theirs_to_ours) {
      return violation("an abort of " + describe_message(place.key, place.number) +
                       ", which is not between that host's ranks and this host's");
    }
  }
  stream.header = header;
  stream.payload_done = 0;
  switch (header.kind) {
    case FrameKind::ready:
      stream.drop_header();
      return take_ready(host, header);
    case FrameKind::abort:
    case FrameKind::end:
      notice_text_[host].assign(header.length, '\0');
      return {};
    case FrameKind::message:
      landing_[host] = landing_of(host, header);
      if (stream.lost()) return stream.lost_status();
      return {};
    default:
      return {};
  }
}

Status PointToPointEngine::take_ready(int host, const FrameHeader& header) {
  const Place place = place_of(header);
  PeerStream& stream = hosts_[host];
  if (!local(place.key.sender) || host_of(place.key.receiver) != host) {
    return stream.protocol_violation("a ready for " + describe_message(place.key, place.number) +
                                     ", which is not from that host's rank to this host's");
  }
  const Ready ready{header.descriptor.dtype, header.descriptor.count};
  if (const auto send = sends_.find(place); send != sends_.end()) {
    if (send->second.ready) {
      return stream.protocol_violation("a second ready for " +
                                       describe_message(place.key, place.number));
    }
    send->second.ready = ready;
    start_sending(place, send->second);
    return {};
  }
  if (posted(Direction::send, place)) {
    // Its send failed before the ready came (or the peer repeats itself): the receive fails too,
    // instead of waiting for bytes that will not come.
    queue_notice(
        host, FrameKind::abort, place,
        Status(ErrorCode::aborted, "rank " + std::to_string(place.key.sender) + "'s send of " +
                                       describe_message(place.key, place.number) +
                                       " had ended before its receive was posted"));
    return {};
  }
  if (waiting_readies_.contains(place) || readies_from_[host] >= kMaxWaitingReadies) {
    return stream.protocol_violation(
        waiting_readies_.contains(place)
            ? "a second ready for " + describe_message(place.key, place.number)
            : "more than " + std::to_string(kMaxWaitingReadies) + " readies for sends not posted");
  }
  waiting_readies_.insert_or_assign(place, std::pair{host, ready});
  ++readies_from_[host];
  return {};
}

// Where a message frame's bytes go: into its receive's region, at their offset, when the frame
// is the next of a receive this host waits for; skipped when that receive has failed; a protocol
// violation (the stream closed) when the frame cannot be one the peer should send.
PointToPointEngine::Landing PointToPointEngine::landing_of(int host, const FrameHeader& header) {
  const Place place = place_of(header);
  PeerStream& stream = hosts_[host];
  if (!local(place.key.receiver) || host_of(place.key.sender) != host) {
    (void)stream.protocol_violation("bytes of " + describe_message(place.key, place.number) +
                                    ", which is not from that host's rank to this host's");
    return {};
  }
  const auto receive = receives_.find(place);
  if (receive == receives_.end()) {
    if (posted(Direction::receive, place)) return {};  // it failed: its bytes are skipped
    (void)stream.protocol_violation("bytes of " + describe_message(place.key, place.number) +
                                    ", whose receive this host has not posted");
    return {};
  }
  const Pending& pending = receive->second;
  const PostedMessage& message = pending.message;
  if (header.descriptor.dtype != message.dtype || header.descriptor.count != message.count ||
      header.offset != pending.bytes_done ||
      header.length > message_bytes(message) - pending.bytes_done) {
    (void)stream.protocol_violation(
        "bytes of " + describe_message(place.key, place.number) + " at " +
        std::to_string(header.offset) + " (" + std::to_string(header.length) + " of " +
        describe_values(header.descriptor.count, header.descriptor.dtype) +
        "), where this rank waits for byte " + std::to_string(pending.bytes_done) + " of " +
        describe_values(message.count, message.dtype));
    return {};
  }
  return {place, message.bytes + header.offset, message.keep};
}

Status PointToPointEngine::take_notice(int host, const FrameHeader& header,
                                       const std::string& text) {
  if (header.kind == FrameKind::end) {
    const auto rank = header.descriptor.root;
    forget_waiting(header.op.job, header.op.stream, rank);
    const Status ended(ErrorCode::aborted, text);
    const auto end = [&](std::map<Place, Pending>& pending, bool is_send) {
      for (auto it = pending.begin(); it != pending.end();) {
        const auto next = std::next(it);
        const MessageKey& key = it->first.key;
        if (key.job == header.op.job && key.stream == header.op.stream &&
            (is_send ? key.receiver : key.sender) == rank) {
          fail(pending, it, ended, false);
        }
        it = next;
      }
    };
    end(sends_, true);
    end(receives_, false);
    return {};
  }
  const Place place = place_of(header);
  const Status why(static_cast<ErrorCode>(header.segment), text);
  const Direction direction = local(place.key.sender) ? Direction::send : Direction::receive;
  std::map<Place, Pending>& pending = direction == Direction::send ? sends_ : receives_;
  if (const auto it = pending.find(place); it != pending.end()) {
    fail(pending, it, why, false);
    return {};
  }
  if (posted(direction, place)) return {};  // over already
  if (const auto waiting = waiting_readies_.find(place); waiting != waiting_readies_.end()) {
    --readies_from_[waiting->second.first];
    waiting_readies_.erase(waiting);
  }
  return remember_failure(host, direction, place, why);
}

}  // namespace gradsync::engine
