// The fast path between a client and its daemon: ops go in and their results come back through a
// region of shared memory that the client makes and attaches once, with no socket message while
// the other side is awake (spinning). A side that stops spinning raises its flag in the region
// before it sleeps; the other side, publishing, takes the flag down and rings its doorbell, a
// small message on the unix socket, which wakes it: one doorbell per sleep. The socket still
// carries the hello, attachments, the plan, status and the reason of every failed op.
//
// The daemon treats the region as hostile: the client may write anything in it at any time. The
// daemon keeps its own counts, copies each op out of the region before reading it, and refuses a
// client whose count of published ops its own count cannot follow.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "collective/status.h"

namespace gradsync::net {

// Ops one client may have in the queue and not yet answered; a client with more waits.
inline constexpr std::uint32_t kOpQueueSlots = 256;
inline constexpr std::size_t kQueuedNameBytes = 48;

// One op as the client submits it: proto::SubmitOp's fields, enums as their proto values.
struct QueuedOp {
  std::uint64_t request_id;
  std::uint64_t region_id;
  std::uint64_t count;
  // Messages the client had sent on its socket before this op: an op may name a region whose
  // attachment the daemon has not read yet.
  std::uint64_t socket_messages_before;
  std::uint64_t process_order;  // proto::SubmitOp::process_order
  std::int32_t collective;
  std::int32_t dtype;
  std::int32_t op;
  std::int32_t algorithm;
  std::int32_t root;
  std::int32_t wire;
  std::uint32_t timeout_ms;
  std::int32_t transfer;  // proto::Transfer
  std::int32_t peer;
  std::int64_t tag;
  char name[kQueuedNameBytes];  // NUL-padded; a longer name is cut
};

struct QueuedResult {
  std::uint64_t request_id;
  std::int32_t failed;     // 1: the op failed; its result, with the reason, is sent on the socket
  std::int32_t algorithm;  // proto enum value
  double elapsed_us;
};

// The region. Counters only grow; slot i % kOpQueueSlots holds op or result i. Each counter is
// written by one side only; a flag is raised by its side and taken down by either. All through
// std::atomic_ref.
struct OpQueueLayout {
  alignas(64) std::uint64_t submitted;  // client: ops published
  alignas(64) std::uint32_t daemon_asleep;
  alignas(64) std::uint64_t completed;  // daemon: results published
  alignas(64) std::uint32_t client_asleep;
  alignas(64) QueuedOp ops[kOpQueueSlots];
  QueuedResult results[kOpQueueSlots];
};

// The client's end.
class OpQueueClientEnd {
 public:
  OpQueueClientEnd() = default;
  explicit OpQueueClientEnd(std::byte* region) : queue_(reinterpret_cast<OpQueueLayout*>(region)) {}

  bool full() const { return published_ - results_read_ >= kOpQueueSlots; }
  // Publishes `op`; true when the daemon sleeps and its doorbell is to be rung (its flag is then
  // down: the next op rings nothing).
  bool publish(const QueuedOp& op);
  // Calls `take(result)` for each result published since the last call.
  template <typename Take>
  void take_results(Take&& take) {
    const std::uint64_t completed =
        std::atomic_ref(queue_->completed).load(std::memory_order_seq_cst);
    for (; results_read_ < completed; ++results_read_) {
      take(queue_->results[results_read_ % kOpQueueSlots]);
    }
  }
  // Before sleeping: the next result rings the doorbell.
  void fall_asleep() { std::atomic_ref(queue_->client_asleep).store(1, std::memory_order_seq_cst); }
  // After: false if the daemon took the flag down, and so rang (or is about to ring) the doorbell.
  bool wake() {
    return std::atomic_ref(queue_->client_asleep).exchange(0, std::memory_order_seq_cst) != 0;
  }

 private:
  OpQueueLayout* queue_ = nullptr;
  std::uint64_t published_ = 0;
  std::uint64_t results_read_ = 0;
};

// The daemon's end.
class OpQueueDaemonEnd {
 public:
  explicit OpQueueDaemonEnd(std::byte* region) : queue_(reinterpret_cast<OpQueueLayout*>(region)) {}

  // The next op into `op`, if the client has published one (`taken` says). An error if the
  // client's count is not one the daemon's can follow: the client is then to be dropped.
  Status take(QueuedOp& op, bool& taken);
  bool has_ops() const {
    return std::atomic_ref(queue_->submitted).load(std::memory_order_seq_cst) != taken_;
  }
  // Publishes `result`; true when the client sleeps and its doorbell is to be rung (its flag is
  // then down).
  bool publish(const QueuedResult& result);
  void set_asleep(bool asleep) {
    std::atomic_ref(queue_->daemon_asleep).store(asleep ? 1 : 0, std::memory_order_seq_cst);
  }

 private:
  OpQueueLayout* queue_;
  std::uint64_t taken_ = 0;
  std::uint64_t completed_ = 0;
};

}  // namespace gradsync::net
