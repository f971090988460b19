#include "daemon/client_server.h"

#include <spdlog/spdlog.h>

#include "net/message_stream.h"
#include "net/socket.h"

namespace gradsync::daemon {

namespace {

constexpr auto kReplyTimeout = std::chrono::seconds(10);
// A client may stay silent between steps for as long as it likes; it is never waited on.
constexpr auto kIdleWait = std::chrono::hours(24 * 365);

}  // namespace

void ClientSession::reply(const proto::DaemonToClient& message) {
  std::lock_guard lock(write_mutex_);
  const Status status =
      net::send_message(socket_.get(), message, net::Deadline::after(kReplyTimeout));
  if (!status.ok()) spdlog::warn("cannot reply to a client: {}", status.message());
}

ClientServer::ClientServer(net::UniqueFd listener, proto::DaemonHello hello, proto::GroupPlan plan,
                           OpRunner run)
    : listener_(std::move(listener)),
      hello_(std::move(hello)),
      plan_(std::move(plan)),
      run_(std::move(run)),
      thread_([this] { accept_loop(); }) {}

ClientServer::~ClientServer() { thread_.detach(); }

void ClientServer::accept_loop() {
  while (true) {
    net::UniqueFd connection;
    if (!net::accept_connection(listener_.get(), net::Deadline::after(std::chrono::seconds(1)),
                                connection)
             .ok()) {
      continue;
    }
    auto session = std::make_shared<ClientSession>(std::move(connection));
    std::thread([this, session] { serve(session); }).detach();
  }
}

void ClientServer::serve(std::shared_ptr<ClientSession> session) {
  std::map<std::uint64_t, std::shared_ptr<net::SharedRegion>> regions;
  net::MessageReader reader(session->fd());
  while (true) {
    proto::ClientToDaemon message;
    net::UniqueFd attached;
    const Status status = reader.receive(message, net::Deadline::after(kIdleWait), &attached);
    if (!status.ok()) {
      if (status.code() != ErrorCode::peer_lost) {
        spdlog::warn("dropped a client: {}", status.message());
      }
      return;
    }
    if (message.has_hello()) {
      proto::DaemonToClient reply;
      *reply.mutable_hello() = hello_;
      session->reply(reply);
    } else if (message.has_plan_request()) {
      proto::DaemonToClient reply;
      *reply.mutable_plan() = plan_;
      session->reply(reply);
    } else if (message.has_attach()) {
      auto region = std::make_shared<net::SharedRegion>();
      Status mapped =
          attached.valid()
              ? net::SharedRegion::map(std::move(attached), message.attach().bytes(), *region)
              : Status(ErrorCode::invalid_argument, "no descriptor came with it");
      if (!mapped.ok()) {
        // The ops that name this region will fail with a clear error of their own.
        spdlog::warn("a client's shared-memory region {} is unusable: {}",
                     message.attach().region_id(), mapped.message());
        continue;
      }
      regions[message.attach().region_id()] = std::move(region);
    } else if (message.has_submit()) {
      PendingOp op{session, message.submit(), nullptr};
      if (const auto found = regions.find(op.op.region_id()); found != regions.end()) {
        op.region = found->second;
      }
      std::lock_guard lock(running_);
      run_(op);
    } else {
      spdlog::warn("dropped a client that sent an empty message");
      return;
    }
  }
}

}  // namespace gradsync::daemon
