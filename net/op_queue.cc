#include "net/op_queue.h"

#include <cstring>
#include <string>
#include <type_traits>

namespace gradsync::net {

static_assert(std::is_trivially_copyable_v<OpQueueLayout>);
static_assert(std::atomic_ref<std::uint64_t>::is_always_lock_free &&
                  std::atomic_ref<std::uint32_t>::is_always_lock_free,
              "the two processes share these counters without a lock");

bool OpQueueClientEnd::publish(const QueuedOp& op) {
  queue_->ops[published_ % kOpQueueSlots] = op;
  ++published_;
  std::atomic_ref(queue_->submitted).store(published_, std::memory_order_seq_cst);
  // Seen together with the daemon's store of the flag before its last look at `submitted`
  // (both sequentially consistent): either the daemon sees this op or this sees it asleep.
  return std::atomic_ref(queue_->daemon_asleep).exchange(0, std::memory_order_seq_cst) != 0;
}

Status OpQueueDaemonEnd::take(QueuedOp& op, bool& taken) {
  taken = false;
  const std::uint64_t submitted =
      std::atomic_ref(queue_->submitted).load(std::memory_order_acquire);
  if (submitted == taken_) return {};
  if (submitted - taken_ > kOpQueueSlots) {
    return Status(ErrorCode::protocol_error,
                  "the client's op queue says " + std::to_string(submitted) +
                      " ops published where the daemon has taken " + std::to_string(taken_) +
                      " and at most " + std::to_string(kOpQueueSlots) + " more may wait");
  }
  // Copied out first: the client may change the slot while it is read.
  std::memcpy(&op, &queue_->ops[taken_ % kOpQueueSlots], sizeof op);
  op.name[kQueuedNameBytes - 1] = '\0';
  ++taken_;
  taken = true;
  return {};
}

bool OpQueueDaemonEnd::publish(const QueuedResult& result) {
  std::memcpy(&queue_->results[completed_ % kOpQueueSlots], &result, sizeof result);
  ++completed_;
  std::atomic_ref(queue_->completed).store(completed_, std::memory_order_seq_cst);
  return std::atomic_ref(queue_->client_asleep).exchange(0, std::memory_order_seq_cst) != 0;
}

}  // namespace gradsync::net
