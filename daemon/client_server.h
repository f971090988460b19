// Serves the local clients of a worker on its unix socket: a hello, the group's plan on request,
// shared-memory regions handed over once each, and ops, which run on the thread that read them, one
// at a time across all clients (a hand-off to another thread would cost every op a wake-up). A
// client that sends something malformed is told why (or, if its stream is unreadable,
// disconnected); the daemon and the other clients carry on.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "gradsync.pb.h"
#include "net/shared_memory.h"
#include "net/unique_fd.h"

namespace gradsync::daemon {

class ClientSession {
 public:
  explicit ClientSession(net::UniqueFd socket) : socket_(std::move(socket)) {}
  int fd() const { return socket_.get(); }
  // Replies are written by the session's reader and by the op loop: one at a time.
  void reply(const proto::DaemonToClient& message);

 private:
  net::UniqueFd socket_;
  std::mutex write_mutex_;
};

struct PendingOp {
  std::shared_ptr<ClientSession> session;
  proto::SubmitOp op;
  std::shared_ptr<net::SharedRegion> region;  // null for ops without bytes or an unknown region
};

// Runs one op to completion and replies; called with no other op running.
using OpRunner = std::function<void(const PendingOp&)>;

class ClientServer {
 public:
  ClientServer(net::UniqueFd listener, proto::DaemonHello hello, proto::GroupPlan plan,
               OpRunner run);
  ~ClientServer();

 private:
  void accept_loop();
  void serve(std::shared_ptr<ClientSession> session);

  net::UniqueFd listener_;
  proto::DaemonHello hello_;
  proto::GroupPlan plan_;
  OpRunner run_;
  std::mutex running_;  // one op at a time, in the order the clients' requests are read
  std::thread thread_;
};

}  // namespace gradsync::daemon
