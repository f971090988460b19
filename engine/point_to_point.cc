#include "engine/point_to_point.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace gradsync::engine {

bool PointToPointEngine::posted(Direction direction, const Place& place) const {
  const auto number = numbers_.find({direction, place.key});
  return number != numbers_.end() && place.number <= number->second;
}

std::string describe_message(const MessageKey& key, std::uint64_t number) {
  return "message " + std::to_string(number) + " from rank " + std::to_string(key.sender) +
         " to rank " + std::to_string(key.receiver) + " with tag " + std::to_string(key.tag);
}

std::string describe_values(std::uint64_t count, DataType dtype) {
  return std::to_string(count) + " " + std::string(name(dtype));
}

PointToPointEngine::PointToPointEngine(PointToPointOptions options,
                                       std::unique_ptr<net::DataChannels> channels)
    : options_(std::move(options)), channels_(std::move(channels)) {
  const int hosts =
      1 + *std::max_element(options_.host_of_rank.begin(), options_.host_of_rank.end());
  for (int host = 0; host < hosts; ++host) hosts_.emplace_back(host, *channels_);
  outgoing_.resize(hosts);
  landing_.resize(hosts);
  notice_text_.resize(hosts);
  stalled_since_.resize(hosts);
  readies_from_.resize(hosts);
  failures_from_.resize(hosts);
}

std::uint64_t PointToPointEngine::message_bytes(const PostedMessage& message) const {
  return message.count * element_size(message.dtype);
}

Status PointToPointEngine::check_post(const PostedMessage& message) const {
  const MessageKey& key = message.key;
  const auto ranks = static_cast<std::uint32_t>(options_.host_of_rank.size());
  if (key.sender >= ranks || key.receiver >= ranks) {
    return Status(ErrorCode::invalid_argument,
                  "rank " + std::to_string(std::max(key.sender, key.receiver)) +
                      " is not in the group of " + std::to_string(ranks) + " ranks");
  }
  if (key.sender == key.receiver) {
    return Status(ErrorCode::invalid_argument,
                  "rank " + std::to_string(key.sender) + " cannot send to itself");
  }
  const std::uint32_t own = message.direction == Direction::send ? key.sender : key.receiver;
  if (!local(own)) {
    return Status(ErrorCode::internal, "rank " + std::to_string(own) + " is not on this host");
  }
  if (!numbers_.contains({message.direction, key}) && numbers_.size() >= kMaxMessageKeys) {
    return Status(ErrorCode::invalid_argument, "this host already numbers the messages of " +
                                                   std::to_string(kMaxMessageKeys) +
                                                   " (sender, receiver, tag) keys; use fewer tags");
  }
  return {};
}

void PointToPointEngine::post(PostedMessage message) {
  if (Status refused = check_post(message); !refused.ok()) {
    done_.push_back({message.id, refused});
    return;
  }
  const Direction direction = message.direction;
  const std::uint32_t peer =
      direction == Direction::send ? message.key.receiver : message.key.sender;
  if (!local(peer) && hosts_[host_of(peer)].lost()) {
    done_.push_back({message.id, Status(ErrorCode::peer_lost,
                                        "rank " + std::to_string(peer) + "'s host is lost: " +
                                            hosts_[host_of(peer)].lost_reason())});
    return;
  }
  const Place place{message.key, ++numbers_[{direction, message.key}]};
  if (const auto failed = failed_before_posted_.find({direction, place});
      failed != failed_before_posted_.end()) {
    done_.push_back({message.id, failed->second.second});
    --failures_from_[failed->second.first];
    failed_before_posted_.erase(failed);
    return;
  }
  if (direction == Direction::send) {
    Pending& send =
        sends_.insert_or_assign(place, Pending{std::move(message), std::nullopt, 0}).first->second;
    if (local(place.key.receiver)) {
      match_locally(place);
    } else if (const auto waiting = waiting_readies_.find(place);
               waiting != waiting_readies_.end()) {
      --readies_from_[waiting->second.first];
      send.ready = waiting->second.second;
      waiting_readies_.erase(waiting);
      start_sending(place, send);
    }
    return;
  }
  const Pending& receive =
      receives_.insert_or_assign(place, Pending{std::move(message), std::nullopt, 0}).first->second;
  if (local(place.key.sender)) {
    match_locally(place);
    return;
  }
  FrameHeader ready = header_of(FrameKind::ready, place);
  ready.descriptor.dtype = receive.message.dtype;
  ready.descriptor.count = receive.message.count;
  Outgoing outgoing;
  outgoing.segment.header = encode(ready);
  outgoing.ready = true;
  queue(host_of(place.key.sender), std::move(outgoing));
}

void PointToPointEngine::match_locally(const Place& place) {
  const auto send = sends_.find(place);
  const auto receive = receives_.find(place);
  if (send == sends_.end() || receive == receives_.end()) return;
  const PostedMessage& from = send->second.message;
  const PostedMessage& to = receive->second.message;
  if (from.dtype != to.dtype || from.count != to.count) {
    const Status why(ErrorCode::mismatch, describe_message(place.key, place.number) + ": rank " +
                                              std::to_string(place.key.sender) + " sends " +
                                              describe_values(from.count, from.dtype) + ", rank " +
                                              std::to_string(place.key.receiver) + " receives " +
                                              describe_values(to.count, to.dtype));
    finish(sends_, send, why);
    finish(receives_, receive, why);
    return;
  }
  if (from.count > 0) std::memcpy(to.bytes, from.bytes, message_bytes(from));
  finish(sends_, send, {});
  finish(receives_, receive, {});
}

void PointToPointEngine::start_sending(const Place& place, Pending& send) {
  const PostedMessage& message = send.message;
  if (send.ready->dtype != message.dtype || send.ready->count != message.count) {
    const Status why(ErrorCode::mismatch,
                     describe_message(place.key, place.number) + ": rank " +
                         std::to_string(place.key.sender) + " sends " +
                         describe_values(message.count, message.dtype) + ", rank " +
                         std::to_string(place.key.receiver) + " receives " +
                         describe_values(send.ready->count, send.ready->dtype));
    fail(sends_, sends_.find(place), why, true);
    return;
  }
  const std::uint64_t total = message_bytes(message);
  const std::uint64_t segment = std::max<std::uint64_t>(options_.segment_bytes, 1);
  std::uint64_t offset = 0;
  do {
    const std::uint64_t length = std::min(segment, total - offset);
    FrameHeader header = header_of(FrameKind::message, place);
    header.descriptor.dtype = message.dtype;
    header.descriptor.count = message.count;
    header.offset = offset;
    header.length = length;
    Outgoing outgoing;
    outgoing.segment.header = encode(header);
    outgoing.segment.offset = offset;
    outgoing.segment.length = length;
    if (length > 0) outgoing.segment.pieces = {{message.bytes + offset, length}};
    outgoing.keep = message.keep;
    outgoing.send = place;
    queue(host_of(place.key.receiver), std::move(outgoing));
    offset += length;
  } while (offset < total);
}

void PointToPointEngine::finish(std::map<Place, Pending>& pending,
                                std::map<Place, Pending>::iterator it, Status status) {
  done_.push_back({it->second.message.id, std::move(status)});
  pending.erase(it);
}

void PointToPointEngine::fail(std::map<Place, Pending>& pending,
                              std::map<Place, Pending>::iterator it, const Status& why, bool tell) {
  const Place place = it->first;
  const bool is_send = &pending == &sends_;
  const std::uint32_t peer = is_send ? place.key.receiver : place.key.sender;
  if (is_send && !local(peer)) {
    // Its frames not yet begun are dropped; one begun goes out whole, its bytes kept mapped.
    std::erase_if(outgoing_[host_of(peer)], [&](const Outgoing& outgoing) {
      return outgoing.send == place && outgoing.segment.written == 0;
    });
  }
  if (!is_send && !local(peer) && landing_[host_of(peer)].receive == place) {
    // The rest of the frame being read goes nowhere: its client may reuse the region at once.
    landing_[host_of(peer)] = {};
  }
  if (tell && !local(peer) && !hosts_[host_of(peer)].lost()) {
    queue_notice(host_of(peer), FrameKind::abort, place, why);
  }
  finish(pending, it, why);
}

void PointToPointEngine::fail_expired() {
  const auto expire = [&](std::map<Place, Pending>& pending, bool is_send) {
    for (auto it = pending.begin(); it != pending.end();) {
      const auto next = std::next(it);
      const Pending& message = it->second;
      if (message.message.deadline.expired()) {
        const MessageKey& key = it->first.key;
        const std::uint64_t total = message_bytes(message.message);
        std::string state;
        if (is_send) {
          state = message.ready
                      ? std::to_string(message.bytes_done) + " of " + std::to_string(total) +
                            " bytes sent"
                      : "rank " + std::to_string(key.receiver) + " has not posted the receive";
        } else {
          // With what has come of the frame being read.
          const int from = host_of(key.sender);
          const std::uint64_t came =
              message.bytes_done +
              (!local(key.sender) && landing_[from].receive == it->first && hosts_[from].header
                   ? hosts_[from].payload_done
                   : 0);
          state = came > 0 ? std::to_string(came) + " of " + std::to_string(total) + " bytes came"
                           : "rank " + std::to_string(key.sender) + " has not sent it";
        }
        fail(pending, it,
             Status(ErrorCode::deadline_exceeded,
                    std::string(is_send ? "send" : "receive") + " of " +
                        describe_message(key, it->first.number) + " timed out: " + state),
             true);
      }
      it = next;
    }
  };
  expire(sends_, true);
  expire(receives_, false);
}

void PointToPointEngine::lose_host(int host) {
  const std::string why = hosts_[host].lost_reason();
  const auto lost = [&](std::map<Place, Pending>& pending, bool is_send) {
    for (auto it = pending.begin(); it != pending.end();) {
      const auto next = std::next(it);
      const MessageKey& key = it->first.key;
      const std::uint32_t peer = is_send ? key.receiver : key.sender;
      if (host_of(peer) == host) {
        fail(pending, it,
             Status(ErrorCode::peer_lost, describe_message(key, it->first.number) +
                                              " failed: the connection to rank " +
                                              std::to_string(peer) + "'s host " +
                                              std::to_string(host) + " is lost: " + why),
             false);
      }
      it = next;
    }
  };
  lost(sends_, true);
  lost(receives_, false);
  outgoing_[host].clear();
  landing_[host] = {};
  std::erase_if(waiting_readies_, [&](const auto& entry) { return entry.second.first == host; });
  readies_from_[host] = 0;
  std::erase_if(failed_before_posted_,
                [&](const auto& entry) { return entry.second.first == host; });
  failures_from_[host] = 0;
}

void PointToPointEngine::forget_waiting(std::uint64_t job, std::uint64_t stream,
                                        std::uint32_t rank) {
  const auto of_rank = [&](const Place& place) {
    return place.key.job == job && place.key.stream == stream &&
           (place.key.sender == rank || place.key.receiver == rank);
  };
  for (auto it = waiting_readies_.begin(); it != waiting_readies_.end();) {
    if (of_rank(it->first)) {
      --readies_from_[it->second.first];
      it = waiting_readies_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = failed_before_posted_.begin(); it != failed_before_posted_.end();) {
    if (of_rank(it->first.second)) {
      --failures_from_[it->second.first];
      it = failed_before_posted_.erase(it);
    } else {
      ++it;
    }
  }
}

Status PointToPointEngine::remember_failure(int host, Direction direction, const Place& place,
                                            const Status& why) {
  if (failures_from_[host] >= kMaxWaitingReadies) {
    return hosts_[host].protocol_violation("more than " + std::to_string(kMaxWaitingReadies) +
                                           " failures of messages not posted");
  }
  if (failed_before_posted_.try_emplace({direction, place}, host, why).second) {
    ++failures_from_[host];
  }
  return {};
}

void PointToPointEngine::stream_ended(std::uint64_t job, std::uint64_t stream, std::uint32_t rank,
                                      const std::string& why) {
  const Status ended(ErrorCode::aborted, "rank " + std::to_string(rank) + ": " + why);
  const auto end = [&](std::map<Place, Pending>& pending) {
    for (auto it = pending.begin(); it != pending.end();) {
      const auto next = std::next(it);
      const MessageKey& key = it->first.key;
      if (key.job == job && key.stream == stream && (key.sender == rank || key.receiver == rank)) {
        fail(pending, it, ended, false);
      }
      it = next;
    }
  };
  end(sends_);
  end(receives_);
  forget_waiting(job, stream, rank);
  for (int host = 0; host < static_cast<int>(hosts_.size()); ++host) {
    if (host == options_.host || hosts_[host].lost()) continue;
    Place place{{job, stream, rank, 0, 0}, 0};
    queue_notice(host, FrameKind::end, place, ended);
  }
}

void PointToPointEngine::fail_all(const Status& why) {
  while (!sends_.empty()) finish(sends_, sends_.begin(), why);
  while (!receives_.empty()) finish(receives_, receives_.begin(), why);
}

std::vector<MessageDone> PointToPointEngine::take_done() { return std::exchange(done_, {}); }

// --- The loop ---

void PointToPointEngine::move_without_waiting() {
  for (int host = 0; host < static_cast<int>(hosts_.size()); ++host) {
    if (host == options_.host || hosts_[host].lost()) continue;
    Status status = write_to(host);
    if (status.ok()) status = read_from(host);
    if (status.ok()) status = write_to(host);  // readies read may have queued bytes
    if (!status.ok()) {
      if (!hosts_[host].lost()) (void)hosts_[host].lose(status.message());
      lose_host(host);
    }
  }
}

std::optional<net::Deadline> PointToPointEngine::first_deadline() {
  std::optional<net::Deadline> first;
  const auto consider = [&](net::Deadline deadline) {
    if (!first || deadline.when() < first->when()) first = deadline;
  };
  for (const auto& [place, pending] : sends_) consider(pending.message.deadline);
  for (const auto& [place, pending] : receives_) consider(pending.message.deadline);
  for (int host = 0; host < static_cast<int>(hosts_.size()); ++host) {
    if (host == options_.host || hosts_[host].lost() || !hosts_[host].mid_frame()) {
      stalled_since_[host].reset();
      continue;
    }
    if (!stalled_since_[host]) stalled_since_[host] = net::Clock::now();
    consider(net::Deadline(*stalled_since_[host] + options_.stall_timeout));
  }
  return first;
}

void PointToPointEngine::progress(int wake_fd, net::Deadline until) {
  move_without_waiting();
  fail_expired();
  for (int host = 0; host < static_cast<int>(hosts_.size()); ++host) {
    if (stalled_since_[host] && hosts_[host].mid_frame() && !hosts_[host].lost() &&
        net::Clock::now() - *stalled_since_[host] >= options_.stall_timeout) {
      (void)hosts_[host].protocol_violation("stopped sending in the middle of a frame for " +
                                            std::to_string(options_.stall_timeout.count()) +
                                            " ms (--stall-timeout-ms)");
      lose_host(host);
    }
  }
  // Messages done are the caller's to answer now, not after the wait.
  if (!done_.empty()) return;
  interests_.clear();
  for (int host = 0; host < static_cast<int>(hosts_.size()); ++host) {
    if (host == options_.host || hosts_[host].lost()) continue;
    interests_.push_back({host, true, !outgoing_[host].empty()});
  }
  if (const auto first = first_deadline(); first && first->when() < until.when()) until = *first;
  events_.resize(interests_.size());
  const int ready =
      channels_->wait(interests_, events_, wake_fd, until, std::chrono::microseconds(0));
  if (ready <= 0) return;
  for (std::size_t i = 0; i < interests_.size(); ++i) {
    const int host = interests_[i].peer;
    if (events_[i].writable) hosts_[host].may_write = true;
    if (events_[i].readable || events_[i].hung_up) hosts_[host].may_read = true;
  }
  move_without_waiting();
}

}  // namespace gradsync::engine
