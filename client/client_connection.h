// The client's connection to its daemon, internal to the client library: the hello, the shared
// regions it lends the daemon (a pool, so that repeated ops of a size reuse theirs), the op queue
// it publishes ops in and takes results from, spinning while the daemon spins and sleeping on the
// socket's doorbell otherwise, and the ops in flight until each has its result.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "client/gradsync_client.h"
#include "client/job_identity.h"
#include "collective/schedule.h"
#include "collective/subgroup.h"
#include "net/message_stream.h"
#include "net/op_queue.h"
#include "net/shared_memory.h"
#include "net/socket.h"
#include "proto/convert.h"

namespace gradsync {

// A daemon gives up on an op at its timeout; the client waits this much longer for the verdict.
inline constexpr auto kResultGrace = std::chrono::seconds(10);
// A daemon that took the connection has at least this long to answer its hello, however short the
// caller's wait for the daemon to appear.
inline constexpr auto kHelloAtLeast = std::chrono::seconds(5);
inline constexpr std::uint64_t kMinRegionBytes = 64 << 10;

inline void throw_if_failed(const Status& status) {
  if (!status.ok()) throw ClientError(status);
}

// The next op's number among every op this process submits, through any of its clients: a daemon
// runs the ops of several streams it finds at once in this order, which is the program's order on
// every rank, so that all daemons run them in the same order.
inline std::uint64_t next_process_order() {
  static std::atomic<std::uint64_t> submitted{0};
  return ++submitted;
}

inline std::uint64_t rounded_region_size(std::uint64_t bytes) {
  std::uint64_t size = kMinRegionBytes;
  while (size < bytes) size *= 2;
  return size;
}

struct PooledRegion {
  std::uint64_t id = 0;
  net::SharedRegion memory;
  bool busy = false;
  bool lent = false;  // to the caller as a SharedTensor: out of the pool until given back
};

struct OpState {
  std::uint64_t request_id = 0;
  PooledRegion* region = nullptr;  // null for ops without bytes
  void* output = nullptr;
  std::uint64_t output_offset = 0;
  std::uint64_t output_bytes = 0;
  net::Deadline deadline = net::Deadline::after(std::chrono::seconds(0));
  ClientConnection* connection = nullptr;
  bool done = false;
  bool reason_on_socket = false;  // failed: its result, with the reason, is to be read
  Status status;
  Algorithm algorithm = Algorithm::ring;
  double elapsed_us = 0;
};

// What one submission moves: the op's shape, and where the caller's bytes go in and come out.
struct Submission {
  OpShape shape;
  DataType type = DataType::f32;
  const void* input = nullptr;
  std::uint64_t input_offset = 0;  // in the region
  std::uint64_t input_bytes = 0;
  void* output = nullptr;
  std::uint64_t output_offset = 0;
  std::uint64_t output_bytes = 0;
  // alltoallv: its splits, which lead the region (collective/schedule.h: splits_bytes).
  std::span<const std::uint64_t> splits = {};
  // A point-to-point message instead of a collective: of shape.count values of
  // shape.element_size bytes.
  struct Transfer {
    proto::Transfer kind = proto::TRANSFER_SEND;
    int peer = 0;
    std::int64_t tag = 0;
  };
  std::optional<Transfer> transfer = std::nullopt;
};

class ClientConnection {
 public:
  ClientConnection(net::UniqueFd socket, int local_rank, ClientNames names,
                   std::vector<int> members)
      : socket_(std::move(socket)),
        reader_(socket_.get()),
        local_rank_(local_rank),
        names_(std::move(names)),
        members_(std::move(members)) {}

  proto::ClientToDaemon hello_request() const {
    proto::ClientToDaemon request;
    request.mutable_hello()->set_local_rank(local_rank_);
    request.mutable_hello()->set_job(names_.job());
    request.mutable_hello()->set_stream(names_.stream());
    for (const int member : members_) request.mutable_hello()->add_members(member);
    return request;
  }

  // The hello was answered: the client is connected under its names.
  void keep_names() { names_.keep(); }
  const std::string& job() const { return names_.job(); }
  const std::string& stream() const { return names_.stream(); }

  // Attaches the connection's op queue, then says hello.
  void hello(net::Deadline deadline) {
    throw_if_failed(net::SharedRegion::create(sizeof(net::OpQueueLayout), queue_region_));
    queue_ = net::OpQueueClientEnd(queue_region_.data());
    proto::ClientToDaemon attach;
    attach.mutable_attach()->set_op_queue(true);
    attach.mutable_attach()->set_bytes(queue_region_.size());
    Status sent = send(attach, deadline, queue_region_.fd());
    if (sent.ok()) sent = send(hello_request(), deadline);
    // A daemon that refuses a connection says why without reading the hello, and may have closed
    // it before the hello went: its reason is still there to read.
    proto::DaemonToClient reply;
    const Status received = reader_.receive(reply, deadline);
    if (received.ok() && reply.has_refused()) throw ClientError(from_proto(reply.refused()));
    throw_if_failed(sent);
    throw_if_failed(received);
    if (!reply.has_hello()) {
      throw ClientError(Status(ErrorCode::protocol_error, "the daemon did not answer the hello"));
    }
    take_hello(reply.hello());
  }

  void take_hello(const proto::DaemonHello& hello) {
    if (!hello.op_queue()) {
      throw ClientError(
          Status(ErrorCode::protocol_error,
                 "host " + std::to_string(hello.host()) +
                     "'s daemon did not take this client's op queue (its log says why)"));
    }
    spin_ = std::chrono::microseconds(std::max(hello.spin_us(), 0));
    rank_ = hello.rank();
    world_size_ = hello.world_size();
    if (!members_.empty()) {
      const auto member = std::find(members_.begin(), members_.end(), rank_);
      if (member == members_.end()) {
        throw ClientError(Status(ErrorCode::invalid_argument, "rank " + std::to_string(rank_) +
                                                                  " is not a member of subgroup " +
                                                                  describe_members(members_)));
      }
      rank_ = static_cast<int>(member - members_.begin());
      world_size_ = static_cast<int>(members_.size());
    }
    generation_ = hello.generation();
    local_world_size_ = std::max(hello.local_ranks(), 1);
    daemon_cpus_.assign(hello.cpus().begin(), hello.cpus().end());
  }

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const std::vector<int>& members() const { return members_; }
  int local_rank() const { return local_rank_; }
  int local_world_size() const { return local_world_size_; }
  std::uint64_t generation() const { return generation_; }
  const std::vector<int>& daemon_cpus() const { return daemon_cpus_; }
  bool daemon_spins() const { return spin_.count() > 0; }

  std::shared_ptr<OpState> submit(const Submission& submission, const OpOptions& options) {
    std::lock_guard lock(mutex_);
    if (queue_.full()) {
      await([this] { return !queue_.full(); },
            net::Deadline::after(options.timeout + kResultGrace));
      if (!lost_.ok()) throw ClientError(lost_);
      if (queue_.full()) {
        throw ClientError(
            Status(ErrorCode::deadline_exceeded, "the daemon answered none of the " +
                                                     std::to_string(net::kOpQueueSlots) +
                                                     " ops in flight within this op's timeout"));
      }
    }
    const OpShape& shape = submission.shape;
    const std::uint64_t bytes =
        submission.transfer
            ? shape.count * shape.element_size
            : splits_bytes(shape) + data_bytes(shape, rank_) + output_bytes(shape, rank_);
    auto state = std::make_shared<OpState>();
    state->request_id = next_request_id_++;
    state->connection = this;
    state->output = submission.output;
    state->output_offset = submission.output_offset;
    state->output_bytes = submission.output_bytes;
    state->deadline = net::Deadline::after(options.timeout + kResultGrace);
    // A message has one tensor, read by a send and written by a receive: in place either way.
    PooledRegion* lent = lent_region_at(submission.input != nullptr ? submission.input
                                                                    : submission.output);
    const bool in_place = (submission.transfer || submission.input == submission.output) &&
                          submission.input_offset == 0 && submission.output_offset == 0;
    if (bytes > 0 && lent != nullptr && in_place && lent->memory.size() >= bytes) {
      // The caller's tensor already lives in the daemon's view: nothing to copy either way.
      state->region = lent;
      state->output_bytes = 0;
    } else if (bytes > 0) {
      state->region = &acquire_region(bytes);
      if (!submission.splits.empty()) {
        std::memcpy(state->region->memory.data(), submission.splits.data(),
                    submission.splits.size_bytes());
      }
      if (submission.input_bytes > 0) {
        std::memcpy(state->region->memory.data() + submission.input_offset, submission.input,
                    submission.input_bytes);
        bytes_copied_ += submission.input_bytes;
      }
    }
    net::QueuedOp op{};
    op.request_id = state->request_id;
    op.region_id = state->region != nullptr ? state->region->id : 0;
    op.count = submission.shape.count;
    op.socket_messages_before = socket_messages_sent_;
    op.process_order = next_process_order();
    op.collective =
        submission.transfer ? proto::COLLECTIVE_UNSPECIFIED : to_proto(submission.shape.collective);
    if (submission.transfer) {
      op.transfer = submission.transfer->kind;
      op.peer = submission.transfer->peer;
      op.tag = submission.transfer->tag;
    }
    op.dtype = to_proto(submission.type);
    op.op = to_proto(options.op);
    op.algorithm = options.algorithm ? to_proto(*options.algorithm) : proto::ALGORITHM_AUTO;
    op.root = submission.shape.root;
    op.wire = options.wire ? to_proto(*options.wire) : proto::DATA_TYPE_UNSPECIFIED;
    op.timeout_ms = static_cast<std::uint32_t>(options.timeout.count());
    options.name.copy(op.name, sizeof op.name - 1);
    in_flight_[state->request_id] = state;
    if (queue_.publish(op)) ring_doorbell(options.timeout);
    return state;
  }

  void wait(OpState& state) {
    std::lock_guard lock(mutex_);
    await([&state] { return state.done; }, state.deadline);
    throw_if_failed(state.status);
  }

  // Sends `request` and returns the daemon's answer, the first message that `is_answer` accepts;
  // results of ops in flight that arrive first are kept.
  proto::DaemonToClient ask(const proto::ClientToDaemon& request,
                            bool (proto::DaemonToClient::*is_answer)() const,
                            net::Deadline deadline) {
    std::lock_guard lock(mutex_);
    if (const Status sent = send(request, deadline); !sent.ok()) {
      throw ClientError(daemon_lost(sent));
    }
    while (true) {
      proto::DaemonToClient message;
      if (const Status status = reader_.receive(message, deadline); !status.ok()) {
        // The stream may stop mid-message: nothing more can be read from it.
        fail_everything(daemon_lost(status));
        throw ClientError(status.code() == ErrorCode::deadline_exceeded ? status
                                                                        : daemon_lost(status));
      }
      if (message.has_result()) deliver(message.result());
      if ((message.*is_answer)()) return message;
    }
  }

  std::uint64_t bytes_copied() const { return bytes_copied_; }

  PooledRegion* lend(std::uint64_t bytes) {
    std::lock_guard lock(mutex_);
    PooledRegion& region = acquire_region(bytes);
    region.lent = true;
    return &region;
  }

  void give_back(PooledRegion* region) {
    std::lock_guard lock(mutex_);
    region->lent = false;
    region->busy = false;
  }

 private:
  // What every call says once the connection to the daemon has failed.
  static Status daemon_lost(const Status& failed) {
    return Status(ErrorCode::peer_lost, "lost the daemon: " + failed.message());
  }

  PooledRegion* lent_region_at(const void* address) {
    for (auto& region : regions_) {
      if (region->lent && region->memory.data() == address) return region.get();
    }
    return nullptr;
  }

  PooledRegion& acquire_region(std::uint64_t bytes) {
    for (auto& region : regions_) {
      if (!region->busy && !region->lent && region->memory.size() >= bytes) {
        region->busy = true;
        return *region;
      }
    }
    auto region = std::make_unique<PooledRegion>();
    region->id = next_region_id_++;
    throw_if_failed(net::SharedRegion::create(rounded_region_size(bytes), region->memory));
    proto::ClientToDaemon attach;
    attach.mutable_attach()->set_region_id(region->id);
    attach.mutable_attach()->set_bytes(region->memory.size());
    if (const Status sent =
            send(attach, net::Deadline::after(std::chrono::seconds(10)), region->memory.fd());
        !sent.ok()) {
      throw ClientError(daemon_lost(sent));
    }
    region->busy = true;
    regions_.push_back(std::move(region));
    return *regions_.back();
  }

  void release(OpState& state) {
    if (state.region != nullptr && !state.region->lent) state.region->busy = false;
    state.region = nullptr;
  }

  // Every message on the socket counts: an op in the queue says how many came before it.
  Status send(const proto::ClientToDaemon& message, net::Deadline deadline, int attached_fd = -1) {
    Status sent = net::send_message(socket_.get(), message, deadline, attached_fd);
    if (sent.ok()) ++socket_messages_sent_;
    return sent;
  }

  void ring_doorbell(std::chrono::milliseconds timeout) {
    proto::ClientToDaemon doorbell;
    doorbell.mutable_doorbell();
    if (const Status sent = send(doorbell, net::Deadline::after(timeout)); !sent.ok()) {
      fail_everything(daemon_lost(sent));
    }
  }

  // Takes results until `done()`: from the queue while the daemon spins, and for as long; then
  // asleep on the socket, which brings a doorbell, a failed op's reason or the daemon's end.
  void await(const std::function<bool()>& done, net::Deadline deadline) {
    const auto spin_until = net::Clock::now() + spin_;
    while (true) {
      take_results();
      if (done()) return;
      if (reasons_to_read_ == 0 && net::Clock::now() < spin_until) {
        std::this_thread::yield();  // the daemon may share this CPU
        continue;
      }
      queue_.fall_asleep();
      take_results();  // one the daemon published before it could see the flag rings nothing
      bool rung = false;
      if (!done() && !read_socket(deadline, rung)) return;
      // A doorbell the daemon committed to when it took the flag down is read now, not left in
      // the socket for a later sleep to wake on.
      if (!queue_.wake()) {
        while (!rung) {
          if (!read_socket(deadline, rung)) return;
        }
      }
    }
  }

  // Reads one message: a doorbell (`rung`), or a failed op's result; false, with every op in
  // flight failed, if none came before `deadline`.
  bool read_socket(net::Deadline deadline, bool& rung) {
    proto::DaemonToClient message;
    if (const Status status = reader_.receive(message, deadline); !status.ok()) {
      fail_everything(status.code() == ErrorCode::deadline_exceeded
                          ? Status(ErrorCode::deadline_exceeded,
                                   "no result from the daemon before the op's timeout")
                          : daemon_lost(status));
      return false;
    }
    rung = rung || message.has_doorbell();
    if (message.has_result()) deliver(message.result());
    return true;
  }

  void take_results() {
    queue_.take_results([this](const net::QueuedResult& result) {
      const auto found = in_flight_.find(result.request_id);
      if (found == in_flight_.end()) return;  // failed already: its reason came first, or no daemon
      OpState& state = *found->second;
      if (result.failed != 0) {
        state.reason_on_socket = true;
        ++reasons_to_read_;
        return;
      }
      complete(state, Status(), from_proto(static_cast<proto::Algorithm>(result.algorithm)),
               result.elapsed_us);
      in_flight_.erase(found);
    });
  }

  void deliver(const proto::OpResult& result) {
    const auto found = in_flight_.find(result.request_id());
    if (found == in_flight_.end()) return;
    if (found->second->reason_on_socket) --reasons_to_read_;
    complete(*found->second, from_proto(result.status()), from_proto(result.algorithm()),
             result.elapsed_us());
    in_flight_.erase(found);
  }

  void complete(OpState& state, Status status, std::optional<Algorithm> algorithm,
                double elapsed_us) {
    state.status = std::move(status);
    state.algorithm = algorithm.value_or(Algorithm::ring);
    state.elapsed_us = elapsed_us;
    if (state.status.ok() && state.output_bytes > 0) {
      std::memcpy(state.output, state.region->memory.data() + state.output_offset,
                  state.output_bytes);
      bytes_copied_ += state.output_bytes;
    }
    state.done = true;
    release(state);
  }

  void fail_everything(const Status& reason) {
    if (reason.code() == ErrorCode::peer_lost) lost_ = reason;
    for (auto& [id, pending] : in_flight_) {
      pending->status = reason;
      pending->done = true;
      release(*pending);
    }
    in_flight_.clear();
    reasons_to_read_ = 0;
  }

  net::UniqueFd socket_;
  net::MessageReader reader_;
  int rank_ = 0;
  int world_size_ = 1;
  const int local_rank_;
  ClientNames names_;
  std::vector<int> members_;  // of a subgroup's stream
  int local_world_size_ = 1;
  std::uint64_t generation_ = 0;
  std::vector<int> daemon_cpus_;
  std::mutex mutex_;
  std::uint64_t next_request_id_ = 1;
  std::atomic<std::uint64_t> bytes_copied_{0};
  std::uint64_t next_region_id_ = 1;
  std::vector<std::unique_ptr<PooledRegion>> regions_;
  std::map<std::uint64_t, std::shared_ptr<OpState>> in_flight_;
  net::SharedRegion queue_region_;
  net::OpQueueClientEnd queue_;
  std::chrono::microseconds spin_{0};  // the daemon's
  std::uint64_t socket_messages_sent_ = 0;
  int reasons_to_read_ = 0;  // failed ops in flight whose reason is on the socket, unread
  Status lost_;              // why the daemon is gone, once it is
};

}  // namespace gradsync
