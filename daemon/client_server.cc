#include "daemon/client_server.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <asio/io_context.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/steady_timer.hpp>
#include <ctime>
#include <functional>
#include <map>

#include "daemon/accept_loop.h"
#include "daemon/outbox.h"
#include "net/message_stream.h"
#include "net/socket.h"
#include "proto/convert.h"

namespace gradsync::daemon {

namespace {

using asio::local::stream_protocol;

// A client that takes none of its replies for this long, or leaves kMaxQueuedBytes of them
// unread, is dropped. Replies are queued, not written by the op thread: a client that does not
// read them cannot stall the rank's ops.
constexpr auto kReplyTimeout = std::chrono::seconds(10);
// Regions one client may have attached at once: each is a mapping and a descriptor of this
// daemon's, and a client that attached without end would exhaust them for every other client.
// The client library keeps a pool of a few per op in flight and one per SharedTensor.
constexpr std::size_t kMaxRegionsPerClient = 4096;
// Connections of one client process: its library opens one; each costs the daemon a descriptor.
constexpr int kMaxConnectionsPerClient = 64;

std::string clock_time(std::chrono::system_clock::time_point when) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(when);
  std::tm local{};
  ::localtime_r(&seconds, &local);
  char text[16];
  std::strftime(text, sizeof text, "%H:%M:%S", &local);
  return text;
}

}  // namespace

class ClientSession : public std::enable_shared_from_this<ClientSession> {
 public:
  // `dropped` is called when the client fails to take its replies.
  using Dropped = std::function<void(ClientSession&, const std::string& why)>;

  ClientSession(stream_protocol::socket socket, int pid, Dropped dropped)
      : socket_(std::move(socket)),
        reader_(socket_.native_handle()),
        pid_(pid),
        dropped_(std::move(dropped)),
        outbox_(socket_, kReplyTimeout, [this](const std::string& why) { dropped_(*this, why); }) {}

  stream_protocol::socket& socket() { return socket_; }
  int pid() const { return pid_; }
  // The generation of the group whose membership the client last took note of (by a hello).
  std::uint64_t generation = 0;
  net::MessageReader& reader() { return reader_; }
  std::map<std::uint64_t, std::shared_ptr<net::SharedRegion>>& regions() { return regions_; }

  // Queues a reply; false once the client has failed to take its replies (the session is to
  // end).
  bool reply(const proto::DaemonToClient& message) {
    std::string framed;
    if (const Status framing = net::frame_message(message, framed); !framing.ok()) {
      spdlog::error("a reply to a client: {}", framing.message());
      return false;
    }
    outbox_.push(std::move(framed), shared_from_this());
    return !outbox_.failed();
  }

 private:
  stream_protocol::socket socket_;
  net::MessageReader reader_;
  const int pid_;  // the client process's, as the kernel said when it connected
  const Dropped dropped_;
  Outbox<stream_protocol::socket> outbox_;
  std::map<std::uint64_t, std::shared_ptr<net::SharedRegion>> regions_;
};

struct ClientServer::State : std::enable_shared_from_this<ClientServer::State> {
  State(asio::io_context& io, net::UniqueFd listener, int client_uid_in,
        proto::DaemonHello hello_in, proto::GroupPlan plan_in, OpRunner run_in,
        StatusSource status_in)
      : acceptor(io),
        backoff(io),
        client_uid(client_uid_in),
        hello(std::move(hello_in)),
        plan(std::move(plan_in)),
        run(std::move(run_in)),
        status_source(std::move(status_in)) {
    acceptor.assign(stream_protocol(), listener.release());
  }

  void accept() {
    accept_forever(acceptor, backoff, "a client", shared_from_this(),
                   [this](stream_protocol::socket socket) { take(std::move(socket)); });
  }

  void take(stream_protocol::socket socket) {
    const net::PeerCredentials peer = net::peer_credentials(socket.native_handle());
    if (const Status refused = refusal(peer); !refused.ok()) {
      refuse(socket, refused);
      return;
    }
    const auto session = std::make_shared<ClientSession>(
        std::move(socket), peer.pid,
        [weak = weak_from_this()](ClientSession& dropped, const std::string& why) {
          spdlog::warn("dropped a client (pid {}) that took no reply: {}", dropped.pid(), why);
          const auto state = weak.lock();
          if (!state) return;
          if (const auto found = state->sessions.find(&dropped); found != state->sessions.end()) {
            state->end(found->second);
          }
        });
    session->generation = hello.generation();
    sessions[session.get()] = session;
    read(session);
  }

  // Why a client may not use this rank, if it may not. Another user's: the socket file is the
  // daemon user's own (mode 0600), so such a client was let in by hand, and would read and write
  // the group's tensors. A process that holds kMaxConnectionsPerClient connections already.
  Status refusal(const net::PeerCredentials& peer) const {
    const long own = static_cast<long>(::geteuid());
    if (peer.uid != own && peer.uid != 0 && (client_uid < 0 || peer.uid != client_uid)) {
      return Status(ErrorCode::unauthenticated,
                    "rank " + std::to_string(hello.rank()) + "'s daemon runs as uid " +
                        std::to_string(own) + " and serves no client of uid " +
                        std::to_string(peer.uid) + " (pid " + std::to_string(peer.pid) +
                        "; --client-uid names one more user to serve)");
    }
    // A connection the process has closed, whose end this daemon has not read yet, is not held.
    const auto held = std::count_if(sessions.begin(), sessions.end(), [&](const auto& entry) {
      return entry.second->pid() == peer.pid &&
             !net::peer_has_closed(entry.second->socket().native_handle());
    });
    if (held >= kMaxConnectionsPerClient) {
      return Status(ErrorCode::invalid_argument,
                    "pid " + std::to_string(peer.pid) + " already holds " + std::to_string(held) +
                        " connections to rank " + std::to_string(hello.rank()) +
                        "'s daemon, as many as one process may");
    }
    return {};
  }

  // Tells a client why it is not served, and closes its connection.
  static void refuse(stream_protocol::socket& socket, const Status& why) {
    spdlog::warn("refused a client: {}", why.message());
    proto::DaemonToClient refusal;
    to_proto(why, *refusal.mutable_refused());
    (void)net::send_message(socket.native_handle(), refusal,
                            net::Deadline::after(std::chrono::milliseconds(100)));
    asio::error_code ignored;
    socket.close(ignored);
  }

  void read(const std::shared_ptr<ClientSession>& session) {
    session->socket().async_wait(
        stream_protocol::socket::wait_read,
        [self = shared_from_this(), session](const asio::error_code& error) {
          if (error) return;
          self->take_messages(session);
        });
  }

  // Serves every message the client has sent; then waits for its next.
  void take_messages(const std::shared_ptr<ClientSession>& session) {
    do {
      proto::ClientToDaemon message;
      net::UniqueFd attached;
      const Status status =
          session->reader().receive(message, net::Deadline(net::Clock::now()), &attached);
      if (status.code() == ErrorCode::deadline_exceeded) break;
      if (!status.ok() || !serve(session, message, std::move(attached))) {
        if (!status.ok() && status.code() != ErrorCode::peer_lost) {
          spdlog::warn("dropped a client: {}", status.message());
        }
        end(session);
        return;
      }
    } while (session->reader().buffered());
    read(session);
  }

  // False: the client is to be dropped.
  bool serve(const std::shared_ptr<ClientSession>& session, const proto::ClientToDaemon& message,
             net::UniqueFd attached) {
    proto::DaemonToClient reply;
    if (message.has_hello()) {
      if (between_generations) {
        awaiting_hello.push_back(session);
        return true;
      }
      return greet(*session);
    } else if (message.has_plan_request()) {
      *reply.mutable_plan() = plan;
      return session->reply(reply);
    } else if (message.has_status_request()) {
      proto::DaemonStatus& status = *reply.mutable_status();
      status = status_source();
      status.set_clients(static_cast<int>(sessions.size()));
      status.set_submitter_pid(submitter != nullptr ? submitter_pid : 0);
      return session->reply(reply);
    } else if (message.has_attach()) {
      // Any client may hand over memory; only the rank's submitting client runs ops on it, and a
      // refused one keeps its regions for when the rank is free.
      attach(*session, message.attach(), std::move(attached));
    } else if (message.has_submit()) {
      PendingOp op{session, message.submit(), nullptr, 0};
      Status claimed = claim(session);
      if (claimed.ok() && session->generation != hello.generation()) {
        claimed =
            Status(ErrorCode::group_changed,
                   "the group changed from generation " + std::to_string(session->generation) +
                       " to " + std::to_string(hello.generation()) + ": this is now rank " +
                       std::to_string(hello.rank()) + " of " + std::to_string(hello.world_size()) +
                       "; take note of it (Client::group()) to go on");
      }
      if (!claimed.ok()) {
        proto::OpResult& result = *reply.mutable_result();
        result.set_request_id(op.op.request_id());
        to_proto(claimed, *result.mutable_status());
        return session->reply(reply);
      }
      op.stream_sequence = ++submitted;
      if (const auto found = session->regions().find(op.op.region_id());
          found != session->regions().end()) {
        op.region = found->second;
      }
      return session->reply(run(op));
    } else {
      spdlog::warn("dropped a client that sent an empty message");
      return false;
    }
    return true;
  }

  // Answers a hello: the client takes note of the group as it is now.
  bool greet(ClientSession& session) {
    proto::DaemonToClient reply;
    *reply.mutable_hello() = hello;
    session.generation = hello.generation();
    return session.reply(reply);
  }

  static void attach(ClientSession& session, const proto::AttachRegion& request,
                     net::UniqueFd attached) {
    auto region = std::make_shared<net::SharedRegion>();
    const bool full = session.regions().size() >= kMaxRegionsPerClient &&
                      !session.regions().contains(request.region_id());
    const Status mapped =
        full               ? Status(ErrorCode::invalid_argument, "the client has attached " +
                                                                     std::to_string(kMaxRegionsPerClient) +
                                                                     " regions, as many as one client may")
        : attached.valid() ? net::SharedRegion::map(std::move(attached), request.bytes(), *region)
                           : Status(ErrorCode::invalid_argument, "no descriptor came with it");
    if (!mapped.ok()) {
      // The ops that name this region will fail with a clear error of their own.
      spdlog::warn("a client's shared-memory region {} is unusable: {}", request.region_id(),
                   mapped.message());
      return;
    }
    session.regions()[request.region_id()] = std::move(region);
  }

  // Makes `session` the rank's submitting client, unless another one is.
  Status claim(const std::shared_ptr<ClientSession>& session) {
    if (submitter == session.get()) return {};
    // A client that has just gone may not have been read to its end yet: a training process
    // that restarts must not be refused because of its own previous life.
    if (submitter != nullptr && net::peer_has_closed(submitter->socket().native_handle())) {
      end(sessions.at(submitter));
    }
    if (submitter != nullptr) {
      return Status(ErrorCode::invalid_argument,
                    "rank " + std::to_string(hello.rank()) +
                        " already has a submitting client (pid " + std::to_string(submitter_pid) +
                        ", since " + clock_time(submitter_since) +
                        "); a rank takes ops from one client at a time, so that every rank "
                        "pairs the same ops");
    }
    submitter = session.get();
    submitted = 0;
    submitter_pid = net::peer_credentials(session->socket().native_handle()).pid;
    submitter_since = std::chrono::system_clock::now();
    spdlog::info("rank {}: ops now come from the client with pid {}", hello.rank(), submitter_pid);
    return {};
  }

  void end(const std::shared_ptr<ClientSession>& session) {
    if (submitter == session.get()) {
      spdlog::info("rank {}: the submitting client (pid {}) left", hello.rank(), submitter_pid);
      submitter = nullptr;
    }
    asio::error_code ignored;
    session->socket().close(ignored);
    sessions.erase(session.get());
  }

  void stop() {
    asio::error_code ignored;
    acceptor.close(ignored);
    backoff.cancel();
    for (auto& [key, session] : sessions) session->socket().close(ignored);
    sessions.clear();
  }

  stream_protocol::acceptor acceptor;
  asio::steady_timer backoff;  // between accepts that failed
  const int client_uid;        // served besides the daemon's own user and root; -1: none
  proto::DaemonHello hello;    // of the current generation
  proto::GroupPlan plan;
  bool between_generations = false;
  std::vector<std::weak_ptr<ClientSession>> awaiting_hello;  // until the next generation
  const OpRunner run;
  const StatusSource status_source;
  std::map<const ClientSession*, std::shared_ptr<ClientSession>> sessions;
  ClientSession* submitter = nullptr;
  std::uint64_t submitted = 0;  // ops of the submitting client so far
  int submitter_pid = 0;
  std::chrono::system_clock::time_point submitter_since;
};

ClientServer::ClientServer(asio::io_context& io, net::UniqueFd listener, int client_uid,
                           proto::DaemonHello hello, proto::GroupPlan plan, OpRunner run,
                           StatusSource status)
    : state_(std::make_shared<State>(io, std::move(listener), client_uid, std::move(hello),
                                     std::move(plan), std::move(run), std::move(status))) {
  state_->accept();
}

// Runs after the event loop has stopped, on the thread that ran it.
ClientServer::~ClientServer() { state_->stop(); }

void ClientServer::generation_ended() { state_->between_generations = true; }

void ClientServer::new_plan(proto::GroupPlan plan) { state_->plan = std::move(plan); }

void ClientServer::new_generation(proto::DaemonHello hello, proto::GroupPlan plan) {
  state_->hello = std::move(hello);
  state_->plan = std::move(plan);
  state_->between_generations = false;
  // The submitting client's stream starts again: ops pair by their place in it.
  state_->submitted = 0;
  for (const auto& waiting : std::exchange(state_->awaiting_hello, {})) {
    const std::shared_ptr<ClientSession> session = waiting.lock();
    if (session && state_->sessions.contains(session.get()) && !state_->greet(*session)) {
      state_->end(session);
    }
  }
}

}  // namespace gradsync::daemon
