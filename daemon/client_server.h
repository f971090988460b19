// Serves the local clients of a worker on its unix socket, on the worker's op thread's event loop:
// a hello, the group's plan on request, shared-memory regions handed over once each, and ops,
// which run on that thread as they are read (a hand-off to another thread would cost every op a
// wake-up). Ops come through each connection's op queue in shared memory (net/op_queue.h), which
// the server spins on for a while after serving one, and their results go back the same way; an
// op may also come as a request on the socket, answered there (the library sends none). The daemon
// serves one or more local ranks (--local-ranks); a client says which it is in its hello, and the
// job and the op stream its ops belong to: ops pair across ranks by (job, stream, place), and the
// daemon serves one job at a time (stream_pairing.h). Read-only connections (a hello, the plan,
// the status) are always served; a client of another user is refused unless the worker was told
// to serve that user. Once every local rank has submitted its next op of a stream, they run as
// one. A local rank that does not submit its op within the op's timeout, or whose client leaves
// first, fails that op on every rank, and its own op at that place fails when it comes; a client
// that leaves ends its stream on every host. A client that sends something malformed is told why
// (or, if its stream is unreadable, disconnected); the daemon and the other clients carry on.
// When the group moves to a new generation, a client's ops fail with GROUP_CHANGED until it has
// sent a hello again (Client::group()) and so taken note of its new rank and world size: no op of
// a stream is paired across generations.
//
// This file reads the clients' messages and hands each to its part: who may connect
// (client_acceptor.h), one connection and its regions (client_session.h), which ops run together
// (stream_pairing.h) and the spinning on op queues (op_queue_spinner.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "daemon/stream_pairing.h"
#include "engine/point_to_point.h"
#include "gradsync.pb.h"
#include "net/socket.h"
#include "net/unique_fd.h"

namespace asio {
class io_context;
}

namespace gradsync::daemon {

// What the server has the worker do, on the op thread.
struct ServerHooks {
  // Runs the ops to completion (or, with `missing` set, fails them on every rank) and returns
  // their clients' replies, in the order of `ops.ops`; called with no other op running.
  std::function<std::vector<proto::DaemonToClient>(const LocalOps&)> run;
  // A client of stream `stream` (its job and stream; no place) has left, as `why` says: the other
  // hosts fail the stream's ops that wait for this one's data.
  std::function<void(const engine::OpKey& stream, const Status& why)> stream_ended;
  // The worker's part of a status reply; the server adds what it knows of its clients.
  std::function<proto::DaemonStatus()> status;
  // Posts a client's point-to-point message, answered later through
  // ClientServer::messages_done().
  std::function<void(engine::PostedMessage message)> post_message;
  // The submitting client of global rank `rank` in `stream` (its job and stream) has left, as
  // `why` says: the messages its peers post to it, or wait for from it, fail.
  std::function<void(const engine::OpKey& stream, int rank, const std::string& why)> client_left;
};

// Everything it holds lives on `io`'s thread (the worker's op thread): it is made, used and
// destroyed there, and its parts are reachable only through it.
class ClientServer {
 public:
  // Starts accepting on `io`. Clients of the daemon's own user and root are served, and those
  // `access` names; any other is refused with the reason. `hello` is local rank 0's;
  // its local_ranks says how many the daemon serves, its spin_us how long the server spins on
  // the clients' op queues after serving one before it sleeps.
  ClientServer(asio::io_context& io, net::UniqueFd listener, net::ClientAccess access,
               proto::DaemonHello hello, proto::GroupPlan plan, ServerHooks hooks);
  // After the event loop has stopped.
  ~ClientServer();

  // The generation ended: a hello is answered once the next one has formed.
  void generation_ended();
  // The group's next generation, with this rank's new hello and plan.
  void new_generation(proto::DaemonHello hello, proto::GroupPlan plan);
  // The generation's plan has a new table version.
  void new_plan(proto::GroupPlan plan);
  // Point-to-point messages posted through ServerHooks::post_message are done: their clients are
  // answered.
  void messages_done(const std::vector<engine::MessageDone>& done);

 private:
  class Loop;  // the part that handlers on the event loop keep alive
  std::shared_ptr<Loop> loop_;
};

}  // namespace gradsync::daemon
