#include "daemon/message_request.h"

#include <string>

#include "config/knobs.h"
#include "daemon/op_request.h"
#include "proto/convert.h"

namespace gradsync::daemon {

namespace {

Status invalid(const std::string& message) { return Status(ErrorCode::invalid_argument, message); }

}  // namespace

Status prepare_message(const PendingOp& pending, int rank, int world_size,
                       const std::vector<int>& members, engine::PostedMessage& message) {
  const proto::SubmitOp& op = pending.op;
  const bool sends = op.transfer() == proto::TRANSFER_SEND;
  if (!sends && op.transfer() != proto::TRANSFER_RECEIVE) {
    return invalid("unknown transfer " + std::to_string(op.transfer()) + " in request " +
                   std::to_string(op.request_id()));
  }
  const auto dtype = from_proto(op.dtype());
  if (!dtype) return invalid("unknown dtype in request " + std::to_string(op.request_id()));
  const int ranks = members.empty() ? world_size : static_cast<int>(members.size());
  if (op.peer() < 0 || op.peer() >= ranks) {
    return invalid("rank " + std::to_string(op.peer()) + " is not a rank of a group of " +
                   std::to_string(ranks));
  }
  const int peer = members.empty() ? op.peer() : members[op.peer()];
  if (peer == rank) {
    return invalid("rank " + std::to_string(op.peer()) + " cannot " +
                   (sends ? "send to" : "receive from") + " itself");
  }
  if (op.tag() < 0 || op.tag() > kMaxTag) {
    return invalid("tag " + std::to_string(op.tag()) + " is out of range: tags are 0 to " +
                   std::to_string(kMaxTag));
  }
  const std::uint64_t size = element_size(*dtype);
  if (op.count() > std::numeric_limits<std::uint64_t>::max() / size) {
    return invalid("a count of " + std::to_string(op.count()) + " " + std::string(name(*dtype)) +
                   " is more bytes than any region holds");
  }
  if (Status status = check_region(pending, op.count() * size); !status.ok()) return status;
  const engine::OpKey& stream = pending.key;  // its job and stream
  message.direction = sends ? engine::Direction::send : engine::Direction::receive;
  message.key = {stream.job, stream.stream, static_cast<std::uint32_t>(sends ? rank : peer),
                 static_cast<std::uint32_t>(sends ? peer : rank),
                 static_cast<std::uint32_t>(op.tag())};
  message.dtype = *dtype;
  message.count = op.count();
  message.bytes = pending.region ? pending.region->data() : nullptr;
  message.keep = pending.region;
  message.deadline = net::Deadline::after(std::chrono::milliseconds(
      op.timeout_ms() > 0 ? op.timeout_ms() : knobs::kOpTimeoutMs.default_value));
  return {};
}

}  // namespace gradsync::daemon
