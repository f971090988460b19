#include "daemon/client_messages.h"

#include "daemon/client_session.h"
#include "daemon/message_request.h"
#include "proto/convert.h"

namespace gradsync::daemon {

std::optional<proto::DaemonToClient> ClientMessages::post(PendingOp op, int rank, int world_size,
                                                          const std::vector<int>& members) {
  engine::PostedMessage message;
  if (Status status = prepare_message(op, rank, world_size, members, message); !status.ok()) {
    return failure_reply(op, status);
  }
  message.id = ++last_id_;
  in_flight_.emplace(message.id, InFlight{std::move(op), net::Clock::now()});
  post_(std::move(message));
  return std::nullopt;
}

std::vector<std::pair<PendingOp, proto::DaemonToClient>> ClientMessages::done(
    const std::vector<engine::MessageDone>& done) {
  std::vector<std::pair<PendingOp, proto::DaemonToClient>> answers;
  for (const engine::MessageDone& message : done) {
    const auto found = in_flight_.find(message.id);
    if (found == in_flight_.end()) continue;
    proto::DaemonToClient reply;
    proto::OpResult& result = *reply.mutable_result();
    result.set_request_id(found->second.op.op.request_id());
    to_proto(message.status, *result.mutable_status());
    result.set_elapsed_us(
        std::chrono::duration<double, std::micro>(net::Clock::now() - found->second.posted)
            .count());
    answers.emplace_back(std::move(found->second.op), std::move(reply));
    in_flight_.erase(found);
  }
  return answers;
}

}  // namespace gradsync::daemon
