#include "engine/peer_stream.h"

#include <sys/uio.h>

#include <algorithm>
#include <cstring>

namespace gradsync::engine {

namespace {

// The most pieces one write takes; the rest of a segment goes in the next.
constexpr int kMaxWriteParts = 8;

}  // namespace

PeerStream::PeerStream(int peer, net::DataChannels& channels) : peer_(peer), channels_(&channels) {
  if (!channels.connected(peer)) lost_reason_ = "never connected";
}

Status PeerStream::lost_status() const {
  return Status(ErrorCode::peer_lost, "lost rank " + std::to_string(peer_) + ": " + lost_reason_);
}

Status PeerStream::lose(const std::string& reason) {
  lost_reason_ = reason;
  return lost_status();
}

void PeerStream::close(const std::string& reason) {
  channels_->disconnect(peer_);
  lost_reason_ = reason;
}

Status PeerStream::protocol_violation(const std::string& what) {
  close("protocol error: " + what);
  return lost_status();
}

Status PeerStream::receive_some(std::byte* bytes, std::uint64_t wanted, std::uint64_t& got) {
  got = 0;
  if (read_ahead_begin_ == read_ahead_end_ && may_read) {
    const bool through_buffer = wanted < kReadAheadBytes;
    if (through_buffer && read_ahead_.size() < kReadAheadBytes) read_ahead_.resize(kReadAheadBytes);
    std::byte* into = through_buffer ? read_ahead_.data() : bytes;
    const std::size_t room = through_buffer ? kReadAheadBytes : wanted;
    const net::IoResult received = channels_->receive(peer_, into, room);
    switch (received.outcome) {
      case net::IoOutcome::done:
        break;
      case net::IoOutcome::would_block:
        may_read = false;
        return {};
      case net::IoOutcome::closed:
        return lose("connection closed");
      case net::IoOutcome::failed:
        return lose(std::string("receiving failed: ") + std::strerror(received.error));
    }
    // A short read emptied the channel's queue.
    if (received.bytes < room) may_read = false;
    if (!through_buffer) {
      got = received.bytes;
      return {};
    }
    read_ahead_begin_ = 0;
    read_ahead_end_ = received.bytes;
  }
  got = std::min<std::uint64_t>(wanted, read_ahead_end_ - read_ahead_begin_);
  if (got > 0) std::memcpy(bytes, read_ahead_.data() + read_ahead_begin_, got);
  read_ahead_begin_ += got;
  return {};
}

Status PeerStream::receive_header(std::uint64_t& got) {
  got = 0;
  while (header_have < kFrameHeaderBytes) {
    std::uint64_t some = 0;
    if (Status status =
            receive_some(header_bytes.data() + header_have, kFrameHeaderBytes - header_have, some);
        !status.ok()) {
      return status;
    }
    if (some == 0) return {};
    header_have += some;
    got += some;
  }
  return {};
}

Status PeerStream::send_some(OutSegment& segment) {
  iovec parts[kMaxWriteParts];
  int count = 0;
  std::uint64_t skip = segment.written;
  if (skip < kFrameHeaderBytes) {
    parts[count++] = {segment.header.data() + skip, kFrameHeaderBytes - skip};
    skip = 0;
  } else {
    skip -= kFrameHeaderBytes;
  }
  for (const Piece& piece : segment.pieces) {
    if (count == kMaxWriteParts) break;
    if (skip >= piece.length) {
      skip -= piece.length;
      continue;
    }
    parts[count++] = {piece.address + skip, piece.length - skip};
    skip = 0;
  }
  const net::IoResult sent = channels_->send(peer_, std::span(parts, count));
  if (sent.outcome == net::IoOutcome::would_block) {
    may_write = false;
    return {};
  }
  if (sent.outcome != net::IoOutcome::done) {
    return lose(std::string("sending failed: ") + std::strerror(sent.error));
  }
  segment.written += sent.bytes;
  if (segment.written < segment.total) may_write = false;  // the channel's buffer is full
  return {};
}

}  // namespace gradsync::engine
