// Point-to-point messages between ranks (docs/architecture.md §4.4): a send to one rank and the
// matching receive there, matched in order per (job, stream, sender, receiver, tag). Every message
// posted on a host is in flight at once, whatever the order its program posts them in, so that a
// ring of sends and receives cannot deadlock, and none waits for a collective.
//
// The receiver asks first: posting a receive sends the sender's host a ready frame with its
// count and dtype; the sender's bytes go, segment by segment, only once both the send and the ready
// are there, and land straight in the receiver's region. So no host holds a message its program
// has not asked for; what waits is a ready's few bytes, at most kMaxWaitingReadies per peer host.
// A send and a receive whose counts or dtypes differ fail on both ranks, each naming both sides.
// Two ranks of one host exchange through memory.
//
// Failures: every message has its deadline; a peer host whose connection is lost, or that stalls
// in the middle of a frame, fails every message to and from its ranks; a client that leaves fails
// the messages its stream's peers post to or await from it (end frames). No thread of its own:
// the caller runs progress() in a loop (daemon/point_to_point_thread.h). point_to_point.cc holds
// the messages' lives, point_to_point_frames.cc the frames queued to and read from each host.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collective/status.h"
#include "collective/types.h"
#include "engine/frame.h"
#include "engine/peer_stream.h"
#include "engine/segment_queues.h"
#include "net/data_channels.h"
#include "net/deadline.h"

namespace gradsync::engine {

// Readies one peer host may have sent for sends not yet posted here, and failures of messages
// not yet posted here; more of either is a protocol error.
inline constexpr std::size_t kMaxWaitingReadies = 1 << 16;
// (job, stream, sender, receiver, tag) keys one engine numbers messages of; a post beyond is
// refused.
inline constexpr std::size_t kMaxMessageKeys = 1 << 16;

// Whose messages a message is among: they match in order.
struct MessageKey {
  std::uint64_t job = 0;
  std::uint64_t stream = 0;
  std::uint32_t sender = 0;  // global ranks
  std::uint32_t receiver = 0;
  std::uint32_t tag = 0;

  friend auto operator<=>(const MessageKey&, const MessageKey&) = default;
};

enum class Direction : std::uint8_t { send, receive };

// One send or receive as its client posted it.
struct PostedMessage {
  std::uint64_t id = 0;  // the caller's, to answer it by
  Direction direction = Direction::send;
  MessageKey key;
  DataType dtype = DataType::f32;
  std::uint64_t count = 0;
  std::byte* bytes = nullptr;        // count values: read by a send, written by a receive
  std::shared_ptr<const void> keep;  // keeps `bytes` mapped while the message or a frame of it is
                                     // in flight
  net::Deadline deadline = net::Deadline::after(std::chrono::seconds(0));
};

struct MessageDone {
  std::uint64_t id = 0;
  Status status;
};

struct PointToPointOptions {
  int host = 0;  // this daemon's rank among the hosts
  std::uint64_t generation = 0;
  std::vector<int> host_of_rank;  // by global rank
  std::size_t segment_bytes = 1 << 20;
  std::chrono::milliseconds stall_timeout{10000};
};

class PointToPointEngine {
 public:
  PointToPointEngine(PointToPointOptions options, std::unique_ptr<net::DataChannels> channels);

  // Takes a message, to be answered by a MessageDone once it completes or fails. Its key's ranks
  // are checked: the caller's rank is the sender (a send) or the receiver (a receive), and is on
  // this host.
  void post(PostedMessage message);
  // The client of rank `rank` in (job, stream) has left: the messages that peers post to it, or
  // wait for from it, fail; the other hosts are told.
  void stream_ended(std::uint64_t job, std::uint64_t stream, std::uint32_t rank,
                    const std::string& why);
  // Moves what can move, then, unless that finished a message, waits for the channels, `wake_fd`
  // (unless -1) or the first deadline, but not past `until`, and moves what the wait allows.
  void progress(int wake_fd, net::Deadline until);
  // The messages done since the last call.
  std::vector<MessageDone> take_done();
  // Fails every message in flight (the generation ended).
  void fail_all(const Status& why);
  // Messages posted and not yet done.
  std::size_t in_flight() const { return sends_.size() + receives_.size(); }

 private:
  // A message's place: its key and its number among the key's messages.
  struct Place {
    MessageKey key;
    std::uint64_t number = 0;
    friend auto operator<=>(const Place&, const Place&) = default;
  };
  struct Ready {  // a receiver's count and dtype, as its ready said
    DataType dtype = DataType::f32;
    std::uint64_t count = 0;
  };
  struct Pending {
    PostedMessage message;
    std::optional<Ready> ready;    // a send's: its receiver's
    std::uint64_t bytes_done = 0;  // sent, or received
  };
  // A frame queued to a peer host: its segment (header and pieces) and what keeps its bytes.
  struct Outgoing {
    OutSegment segment;
    std::string text;  // an abort's or an end's reason, which the pieces point at
    std::shared_ptr<const void> keep;
    std::optional<Place> send;  // a send's bytes: dropped unbegun if the send fails
    bool ready = false;
  };
  // What the message frame being read from a host lands in: nothing (skipped), or a receive's
  // region.
  struct Landing {
    std::optional<Place> receive;
    std::byte* bytes = nullptr;
    std::shared_ptr<const void> keep;
  };

  // The place a point-to-point frame names (engine/frame.h).
  static Place place_of(const FrameHeader& header);
  // Whether this host has posted its side of the message at `place` (done with it or not).
  bool posted(Direction direction, const Place& place) const;
  int host_of(std::uint32_t rank) const { return options_.host_of_rank[rank]; }
  bool local(std::uint32_t rank) const { return host_of(rank) == options_.host; }
  std::uint64_t message_bytes(const PostedMessage& message) const;
  Status check_post(const PostedMessage& message) const;

  void match_locally(const Place& place);
  void start_sending(const Place& place, Pending& send);
  void finish(std::map<Place, Pending>& pending, std::map<Place, Pending>::iterator it,
              Status status);
  // Fails a message and tells its peer's host, unless `tell` is false.
  void fail(std::map<Place, Pending>& pending, std::map<Place, Pending>::iterator it,
            const Status& why, bool tell);
  void fail_expired();
  // Fails every message to and from the ranks of `host`, whose stream is lost.
  void lose_host(int host);
  // Drops what waits for messages of `rank` in (job, stream) that will never be posted.
  void forget_waiting(std::uint64_t job, std::uint64_t stream, std::uint32_t rank);
  // A peer host failed the message at `place` that this host has not posted yet (`direction`:
  // this host's side of it): its post fails at once with `why`, unless there are too many.
  Status remember_failure(int host, Direction direction, const Place& place, const Status& why);

  // Frames out.
  FrameHeader header_of(FrameKind kind, const Place& place) const;
  void queue(int host, Outgoing outgoing);
  void queue_notice(int host, FrameKind kind, const Place& place, const Status& why);
  Status write_to(int host);

  // Frames in.
  Status read_from(int host);
  Status take_header(int host, const FrameHeader& header);
  Status take_ready(int host, const FrameHeader& header);
  Landing landing_of(int host, const FrameHeader& header);
  Status take_notice(int host, const FrameHeader& header, const std::string& text);

  void move_without_waiting();
  std::optional<net::Deadline> first_deadline();

  const PointToPointOptions options_;
  std::unique_ptr<net::DataChannels> channels_;
  std::vector<PeerStream> hosts_;
  std::vector<std::deque<Outgoing>> outgoing_;  // by host
  std::vector<Landing> landing_;                // by host: of the frame being read
  std::vector<std::string> notice_text_;        // by host: of the abort or end being read
  std::vector<std::optional<net::Clock::time_point>> stalled_since_;  // by host, mid-frame
  std::vector<std::size_t> readies_from_;  // by host: readies waiting for their send
  std::map<std::pair<Direction, MessageKey>, std::uint64_t> numbers_;  // the last number given
  std::map<Place, Pending> sends_;
  std::map<Place, Pending> receives_;
  std::map<Place, std::pair<int, Ready>> waiting_readies_;  // from host, for sends not posted
  // Messages whose peer failed before they were posted here: from host, the peer's reason.
  std::map<std::pair<Direction, Place>, std::pair<int, Status>> failed_before_posted_;
  std::vector<std::size_t> failures_from_;  // by host: in failed_before_posted_
  std::vector<MessageDone> done_;
  std::vector<std::byte> trash_;
  std::vector<net::ChannelInterest> interests_;
  std::vector<net::ChannelEvents> events_;
};

// "message 3 from rank 0 to rank 1 with tag 7"
std::string describe_message(const MessageKey& key, std::uint64_t number);
// "4 f32"
std::string describe_values(std::uint64_t count, DataType dtype);

}  // namespace gradsync::engine
