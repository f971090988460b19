#include "daemon/client_session.h"

#include <spdlog/spdlog.h>

#include "proto/convert.h"

namespace gradsync::daemon {

namespace {

// A client that takes none of its replies for this long, or leaves kMaxQueuedBytes of them
// unread, is dropped. Replies are queued, not written by the op thread: a client that does not
// read them cannot stall the rank's ops.
constexpr auto kReplyTimeout = std::chrono::seconds(10);
// Regions one client may have attached at once: each is a mapping and a descriptor of this
// daemon's, and a client that attached without end would exhaust them for every other client.
// The client library keeps a pool of a few per op in flight and one per SharedTensor.
constexpr std::size_t kMaxRegionsPerClient = 4096;

}  // namespace

ClientSession::ClientSession(Socket socket, ClientId id, int pid, Dropped dropped)
    : socket_(std::move(socket)),
      reader_(socket_.native_handle()),
      id_(id),
      pid_(pid),
      dropped_(std::move(dropped)),
      outbox_(socket_, kReplyTimeout, [this](const std::string& why) { dropped_(*this, why); }) {}

Status ClientSession::receive(proto::ClientToDaemon& message, net::UniqueFd& attached) {
  const Status status = reader_.receive(message, net::Deadline(net::Clock::now()), &attached);
  if (status.ok()) ++messages_read_;
  return status;
}

void ClientSession::attach_region(const proto::AttachRegion& request, net::UniqueFd attached) {
  auto region = std::make_shared<net::SharedRegion>();
  const bool full =
      regions_.size() >= kMaxRegionsPerClient && !regions_.contains(request.region_id());
  const Status mapped =
      full               ? Status(ErrorCode::invalid_argument,
                                  "the client has attached " + std::to_string(kMaxRegionsPerClient) +
                                      " regions, as many as one client may")
      : attached.valid() ? net::SharedRegion::map(std::move(attached), request.bytes(), *region)
                         : Status(ErrorCode::invalid_argument, "no descriptor came with it");
  if (!mapped.ok()) {
    spdlog::warn("a client's shared-memory region {} is unusable: {}", request.region_id(),
                 mapped.message());
    return;
  }
  regions_[request.region_id()] = std::move(region);
}

bool ClientSession::attach_queue(const proto::AttachRegion& request, net::UniqueFd attached) {
  net::SharedRegion region;
  const Status mapped =
      queue_ ? Status(ErrorCode::invalid_argument, "the connection has one already")
      : request.bytes() < sizeof(net::OpQueueLayout)
          ? Status(ErrorCode::invalid_argument, "it has " + std::to_string(request.bytes()) +
                                                    " bytes, and a queue takes " +
                                                    std::to_string(sizeof(net::OpQueueLayout)))
      : attached.valid() ? net::SharedRegion::map(std::move(attached), request.bytes(), region)
                         : Status(ErrorCode::invalid_argument, "no descriptor came with it");
  if (!mapped.ok()) {
    spdlog::warn("a client's op queue (pid {}) is unusable: {}", pid_, mapped.message());
    return false;
  }
  queue_region_ = std::move(region);
  queue_.emplace(queue_region_.data());
  return true;
}

std::shared_ptr<net::SharedRegion> ClientSession::region(std::uint64_t region_id) const {
  const auto found = regions_.find(region_id);
  return found != regions_.end() ? found->second : nullptr;
}

bool ClientSession::reply(const proto::DaemonToClient& message) {
  std::string framed;
  if (const Status framing = net::frame_message(message, framed); !framing.ok()) {
    spdlog::error("a reply to a client: {}", framing.message());
    return false;
  }
  outbox_.push(std::move(framed), shared_from_this());
  return !outbox_.failed();
}

bool ClientSession::answer(const PendingOp& op, const proto::DaemonToClient& message) {
  if (!op.queued || !queue_) return reply(message);
  const proto::OpResult& result = message.result();
  const bool failed = !from_proto(result.status()).ok();
  if (failed && !reply(message)) return false;
  const net::QueuedResult queued{result.request_id(), failed ? 1 : 0, result.algorithm(),
                                 result.elapsed_us()};
  if (!queue_->publish(queued)) return true;
  proto::DaemonToClient doorbell;
  doorbell.mutable_doorbell();
  return reply(doorbell);
}

void ClientSession::close() {
  asio::error_code ignored;
  socket_.close(ignored);
}

proto::DaemonToClient failure_reply(const PendingOp& op, const Status& why) {
  proto::DaemonToClient reply;
  proto::OpResult& result = *reply.mutable_result();
  result.set_request_id(op.op.request_id());
  to_proto(why, *result.mutable_status());
  return reply;
}

}  // namespace gradsync::daemon
