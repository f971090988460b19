#include "daemon/client_server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <map>
#include <optional>

#include "collective/subgroup.h"
#include "daemon/client_acceptor.h"
#include "daemon/client_messages.h"
#include "daemon/client_session.h"
#include "daemon/op_queue_spinner.h"
#include "daemon/op_request.h"
#include "daemon/stream_pairing.h"
#include "net/op_queue.h"
#include "proto/convert.h"

namespace gradsync::daemon {

namespace {

using Session = std::shared_ptr<ClientSession>;

}  // namespace

class ClientServer::Loop : public std::enable_shared_from_this<ClientServer::Loop> {
 public:
  Loop(asio::io_context& io, net::UniqueFd listener, net::ClientAccess access,
       proto::DaemonHello hello, proto::GroupPlan plan, ServerHooks hooks)
      : io_(io),
        acceptor_(
            io, std::move(listener), access,
            [this](ClientSession::Socket socket, const net::PeerCredentials& peer) {
              take(std::move(socket), peer);
            },
            [this](int pid) { return connections_of(pid); }),
        spinner_(io, std::chrono::microseconds(hello.spin_us()), [this] { return serve_queues(); }),
        pairing_(hello.local_ranks(), hello.rank(), hello.host()),
        pairing_timer_(io),
        hello_(std::move(hello)),
        plan_(std::move(plan)),
        hooks_(std::move(hooks)),
        messages_(hooks_.post_message) {
    acceptor_.set_host(hello_.host());
  }

  void start() {
    spinner_.set_owner(weak_from_this());
    acceptor_.start(shared_from_this());
  }

  void generation_ended() { between_generations_ = true; }
  void new_plan(proto::GroupPlan plan) { plan_ = std::move(plan); }
  void new_generation(proto::DaemonHello hello, proto::GroupPlan plan);
  void stop();
  void messages_done(const std::vector<engine::MessageDone>& done) {
    for (const auto& [op, reply] : messages_.done(done)) answered(op, reply, nullptr);
  }

 private:
  void take(ClientSession::Socket socket, const net::PeerCredentials& peer);
  // The connections process `pid` holds: one it has closed, whose end this daemon has not read
  // yet, is not held.
  long connections_of(int pid) const;
  void read(const Session& session);
  void take_messages(const Session& session);
  template <typename More>
  bool serve_messages(const Session& session, More&& more);
  bool serve_queues();
  bool take_queue(const Session& session);
  bool serve(const Session& session, const proto::ClientToDaemon& message, net::UniqueFd attached);
  bool hello(const Session& session, const proto::ClientHello& request);
  bool status(ClientSession& session);
  bool submit(const Session& session, const proto::SubmitOp& submitted, bool queued);
  Status claim(const Session& session);
  // Ends the submitting clients that have closed their end and whose end this daemon has not
  // read yet.
  void end_closed_submitters();
  bool greet(ClientSession& session);
  Status take_local_rank(ClientSession& session, const proto::ClientHello& request) const;
  Status take_stream(ClientSession& session, const proto::ClientHello& request) const;
  bool perform_pairing(const ClientSession* current);
  bool answered(const PendingOp& op, const proto::DaemonToClient& reply,
                const ClientSession* current);
  void wait_for_missing_ops();
  void drop(const Session& session, const std::string& why);
  void end(Session session);
  template <typename Work>
  void post(Work work);

  asio::io_context& io_;
  ClientAcceptor acceptor_;
  OpQueueSpinner spinner_;
  StreamPairing pairing_;
  asio::steady_timer pairing_timer_;  // for the place some local ranks have reached
  std::optional<StreamPairing::TimePoint> timer_deadline_;
  proto::DaemonHello hello_;  // of the current generation
  proto::GroupPlan plan_;
  bool between_generations_ = false;
  std::vector<std::weak_ptr<ClientSession>> awaiting_hello_;  // until the next generation
  const ServerHooks hooks_;
  ClientMessages messages_;
  std::map<ClientId, Session> sessions_;
  ClientId last_client_ = 0;
};

void ClientServer::Loop::take(ClientSession::Socket socket, const net::PeerCredentials& peer) {
  const auto session = std::make_shared<ClientSession>(
      std::move(socket), ++last_client_, peer.pid,
      [weak = weak_from_this()](ClientSession& dropped, const std::string& why) {
        spdlog::warn("dropped a client (pid {}) that took no reply: {}", dropped.pid(), why);
        const auto self = weak.lock();
        if (!self) return;
        if (const auto found = self->sessions_.find(dropped.id()); found != self->sessions_.end()) {
          self->end(found->second);
        }
      });
  session->note_generation(hello_.generation());
  sessions_[session->id()] = session;
  read(session);
}

long ClientServer::Loop::connections_of(int pid) const {
  return std::count_if(sessions_.begin(), sessions_.end(), [&](const auto& entry) {
    return entry.second->pid() == pid &&
           !net::peer_has_closed(entry.second->socket().native_handle());
  });
}

void ClientServer::Loop::read(const Session& session) {
  session->socket().async_wait(ClientSession::Socket::wait_read,
                               [self = shared_from_this(), session](const asio::error_code& error) {
                                 if (error) return;
                                 self->take_messages(session);
                               });
}

// Serves every message the client has sent and every op in its queue; then waits for its next
// message (a doorbell, when the server sleeps).
void ClientServer::Loop::take_messages(const Session& session) {
  bool first = true;
  if (!serve_messages(session,
                      [&] { return std::exchange(first, false) || session->buffered(); })) {
    return;
  }
  serve_queues();
  if (!sessions_.contains(session->id())) return;
  spinner_.stay_awake();
  read(session);
}

// Serves the client's messages on the socket while `more()` says there are; false when the
// client is dropped.
template <typename More>
bool ClientServer::Loop::serve_messages(const Session& session, More&& more) {
  while (more()) {
    proto::ClientToDaemon message;
    net::UniqueFd attached;
    const Status status = session->receive(message, attached);
    if (status.code() == ErrorCode::deadline_exceeded) return true;
    if (!status.ok() || !serve(session, message, std::move(attached))) {
      if (!status.ok() && status.code() != ErrorCode::peer_lost) {
        spdlog::warn("dropped a client: {}", status.message());
      }
      end(session);
      return false;
    }
  }
  return true;
}

// Takes the ops every client has published in its queue, looking at every queue again until a look
// finds none (or a few looks, if clients publish as fast as this takes), and then runs the places
// they complete: an op that a process published before one that was found is then found too, so
// that the pairing runs a program's ops of several streams in the program's order
// (StreamPairing::take_actions). True if there were any.
bool ClientServer::Loop::serve_queues() {
  constexpr int kMostLooks = 8;
  bool served = false;
  bool took = true;
  for (int look = 0; took && look < kMostLooks; ++look) {
    took = false;
    std::vector<Session> queued;
    for (const auto& [id, session] : sessions_) {
      if (session->queue() != nullptr) queued.push_back(session);
    }
    for (const Session& session : queued) took = take_queue(session) || took;
    served = served || took;
  }
  perform_pairing(nullptr);
  return served;
}

// Takes the ops the client has published in its queue into the pairing, at most a queue's worth;
// true if there were any.
bool ClientServer::Loop::take_queue(const Session& session) {
  bool served = false;
  for (std::uint32_t turn = 0; turn < net::kOpQueueSlots; ++turn) {
    if (session->queue() == nullptr || !sessions_.contains(session->id())) return served;
    net::QueuedOp queued;
    bool taken = false;
    if (const Status status = session->queue()->take(queued, taken); !status.ok()) {
      drop(session, status.message());
      return served;
    }
    if (!taken) {
      // Messages read with those an op followed, and sent after them: the socket will not
      // say again that they are there.
      if (!session->buffered()) return served;
      if (!serve_messages(session, [&] { return session->buffered(); })) return served;
      continue;
    }
    served = true;
    // The socket messages sent before the op (an attachment it names, a hello) come first;
    // they are in the socket already.
    if (!serve_messages(session,
                        [&] { return session->messages_read() < queued.socket_messages_before; })) {
      return served;
    }
    if (session->messages_read() < queued.socket_messages_before) {
      drop(session, "its op " + std::to_string(queued.request_id) + " follows " +
                        std::to_string(queued.socket_messages_before) +
                        " messages on the socket, of which " +
                        std::to_string(session->messages_read()) + " came");
      return served;
    }
    if (!submit(session, submit_op_from(queued), true)) {
      end(session);
      return served;
    }
  }
  return served;
}

// False: the client is to be dropped.
bool ClientServer::Loop::serve(const Session& session, const proto::ClientToDaemon& message,
                               net::UniqueFd attached) {
  if (message.has_hello()) return hello(session, message.hello());
  if (message.has_plan_request()) {
    proto::DaemonToClient reply;
    *reply.mutable_plan() = plan_;
    return session->reply(reply);
  }
  if (message.has_status_request()) return status(*session);
  if (message.has_attach()) {
    // Any client may hand over memory; only the rank's submitting client runs ops on it, and a
    // refused one keeps its regions for when the rank is free.
    if (!message.attach().op_queue()) {
      session->attach_region(message.attach(), std::move(attached));
    } else if (session->attach_queue(message.attach(), std::move(attached))) {
      spinner_.add(session);
    }
    return true;
  }
  if (message.has_submit()) {
    return submit(session, message.submit(), false) && perform_pairing(session.get());
  }
  // A doorbell: its queue is served once the socket has been read.
  if (message.has_doorbell()) return true;
  spdlog::warn("dropped a client that sent an empty message");
  return false;
}

bool ClientServer::Loop::hello(const Session& session, const proto::ClientHello& request) {
  Status refused = take_local_rank(*session, request);
  if (refused.ok()) refused = take_stream(*session, request);
  if (!refused.ok()) {
    proto::DaemonToClient reply;
    to_proto(refused, *reply.mutable_refused());
    (void)session->reply(reply);
    return false;
  }
  if (between_generations_) {
    awaiting_hello_.push_back(session);
    return true;
  }
  return greet(*session);
}

bool ClientServer::Loop::status(ClientSession& session) {
  proto::DaemonToClient reply;
  proto::DaemonStatus& status = *reply.mutable_status();
  status = hooks_.status();
  status.set_clients(static_cast<int>(sessions_.size()));
  status.set_submitter_pid(pairing_.job_pid());
  status.set_job(pairing_.job());
  return session.reply(reply);
}

// Takes an op of the client's stream into the pairing, which the caller then performs; false: the
// client is to be dropped.
bool ClientServer::Loop::submit(const Session& session, const proto::SubmitOp& submitted,
                                bool queued) {
  PendingOp op{session, session->id(), submitted, nullptr, {}, session->local_rank(), queued};
  if (session->generation() != hello_.generation()) {
    const Status changed(
        ErrorCode::group_changed,
        "the group changed from generation " + std::to_string(session->generation()) + " to " +
            std::to_string(hello_.generation()) + ": this is now rank " +
            std::to_string(hello_.rank() + session->local_rank()) + " of " +
            std::to_string(hello_.world_size()) + "; take note of it (Client::group()) to go on");
    return session->answer(op, failure_reply(op, changed));
  }
  if (Status claimed = claim(session); !claimed.ok()) {
    if (claimed.code() != ErrorCode::mismatch || submitted.transfer() != proto::TRANSFER_NONE) {
      return session->answer(op, failure_reply(op, claimed));
    }
    // Another job holds the daemon: the op fails on every rank at once, the others told why.
    op.key = session->stream().key(session->take_place());
    LocalOps refused{{}, claimed, {}};
    refused.ops.push_back(std::move(op));
    const std::vector<proto::DaemonToClient> replies = hooks_.run(refused);
    return session->answer(refused.ops.front(), replies.front());
  }
  op.region = session->region(op.op.region_id());
  if (submitted.transfer() != proto::TRANSFER_NONE) {
    // A point-to-point message takes no place of its stream: it pairs with its peer's alone.
    op.key = session->stream().key(0);
    const std::optional<proto::DaemonToClient> refused = messages_.post(
        op, hello_.rank() + session->local_rank(), hello_.world_size(), session->members());
    return !refused || session->answer(op, *refused);
  }
  op.key = pairing_.key_of(session->id(), session->take_place());
  pairing_.submit(std::move(op));
  return true;
}

// Makes `session` a submitting client of its stream and local rank, unless another one is or
// another job holds the daemon.
Status ClientServer::Loop::claim(const Session& session) {
  if (pairing_.submits(session->id())) return {};
  Status claimed = pairing_.claim(session->local_rank(), session->id(), session->pid(),
                                  session->stream(), session->members());
  if (claimed.ok()) return claimed;
  // A client that has just gone may not have been read to its end yet: a training process that
  // restarts must not be refused because of its own previous life.
  end_closed_submitters();
  return pairing_.claim(session->local_rank(), session->id(), session->pid(), session->stream(),
                        session->members());
}

void ClientServer::Loop::end_closed_submitters() {
  std::vector<Session> closed;
  for (const auto& [id, other] : sessions_) {
    if (pairing_.submits(id) && net::peer_has_closed(other->socket().native_handle())) {
      closed.push_back(other);
    }
  }
  for (const Session& other : closed) end(other);
}

// Answers a hello: the client takes note of the group as it is now.
bool ClientServer::Loop::greet(ClientSession& session) {
  proto::DaemonToClient reply;
  proto::DaemonHello& answer = *reply.mutable_hello();
  answer = hello_;
  answer.set_rank(hello_.rank() + session.local_rank());
  answer.set_local_rank(session.local_rank());
  answer.set_op_queue(session.queue() != nullptr);
  session.note_generation(hello_.generation());
  return session.reply(reply);
}

// The local rank a hello names: one the daemon serves, and for a submitting client the one it
// submits as.
Status ClientServer::Loop::take_local_rank(ClientSession& session,
                                           const proto::ClientHello& request) const {
  const int local_rank = request.has_local_rank() ? request.local_rank() : 0;
  const int served = pairing_.local_ranks();
  if (local_rank < 0 || local_rank >= served) {
    return Status(ErrorCode::invalid_argument,
                  "local rank " + std::to_string(local_rank) + " is not one of the " +
                      std::to_string(served) + " that host " + std::to_string(hello_.host()) +
                      "'s daemon serves (0 to " + std::to_string(served - 1) +
                      "; gradsyncd worker --local-ranks)");
  }
  if (local_rank != session.local_rank() && pairing_.submits(session.id())) {
    return Status(ErrorCode::invalid_argument,
                  "the client submits as " + pairing_.name_of(session.local_rank()) +
                      " and cannot become local rank " + std::to_string(local_rank));
  }
  session.set_local_rank(local_rank);
  return {};
}

// The job and stream a hello names: printable names of at most kMaxNameBytes (a hello without a
// job is a job of its process alone), and for a submitting client the ones it submits to.
Status ClientServer::Loop::take_stream(ClientSession& session,
                                       const proto::ClientHello& request) const {
  for (const auto& [what, name] :
       {std::pair{"job", &request.job()}, {"stream", &request.stream()}}) {
    const bool printable =
        std::all_of(name->begin(), name->end(), [](char c) { return c >= 0x20 && c < 0x7f; });
    if (name->size() > kMaxNameBytes || !printable) {
      return Status(ErrorCode::invalid_argument,
                    std::string("the hello's ") + what + " name is not at most " +
                        std::to_string(kMaxNameBytes) + " printable ASCII characters (it has " +
                        std::to_string(name->size()) + " bytes)");
    }
  }
  StreamName stream{request.job(), request.stream()};
  if (stream.job.empty()) stream.job = "process " + std::to_string(session.pid());
  std::vector<int> members(request.members().begin(), request.members().end());
  if (!members.empty()) {
    Subgroup subgroup;
    const HostLayout layout = HostLayout::of_plan(
        plan_.world_size(), {plan_.local_ranks().begin(), plan_.local_ranks().end()});
    if (Status status = plan_subgroup(layout, members, hello_.host(), subgroup); !status.ok()) {
      return status;
    }
  }
  if ((stream != session.stream() || members != session.members()) &&
      pairing_.submits(session.id())) {
    return Status(ErrorCode::invalid_argument,
                  "the client submits to stream '" + session.stream().stream + "' of job '" +
                      session.stream().job + "' and cannot change to another");
  }
  session.set_stream(std::move(stream));
  session.set_members(std::move(members));
  return {};
}

// Runs the places of the streams the pairing has found complete or failed, and answers the ops it
// fails; false when `current`, the client just read, is to be dropped. Any other client that fails
// to take its reply is dropped here.
bool ClientServer::Loop::perform_pairing(const ClientSession* current) {
  bool current_ok = true;
  for (std::vector<PairingAction> actions = pairing_.take_actions(); !actions.empty();
       actions = pairing_.take_actions()) {
    for (const PairingAction& action : actions) {
      switch (action.kind) {
        case PairingAction::Kind::fail:
          current_ok =
              answered(action.op, failure_reply(action.op, action.why), current) && current_ok;
          continue;
        case PairingAction::Kind::stream_ended:
          hooks_.stream_ended(action.stream, action.why);
          continue;
        case PairingAction::Kind::run:
          break;
      }
      const std::vector<proto::DaemonToClient> replies = hooks_.run(action.place);
      for (std::size_t index = 0; index < action.place.ops.size(); ++index) {
        current_ok = answered(action.place.ops[index], replies[index], current) && current_ok;
      }
    }
  }
  wait_for_missing_ops();
  return current_ok;
}

// Answers `op`; false when its client is `current` and failed to take the reply.
bool ClientServer::Loop::answered(const PendingOp& op, const proto::DaemonToClient& reply,
                                  const ClientSession* current) {
  if (op.session->answer(op, reply)) return true;
  if (op.session.get() == current) return false;
  if (sessions_.contains(op.session->id())) end(op.session);
  return true;
}

// Some local rank has submitted an op the others have not: it may wait for them as long as its
// timeout, then its place fails.
void ClientServer::Loop::wait_for_missing_ops() {
  pairing_.start_waiting(std::chrono::steady_clock::now());
  const std::optional<StreamPairing::TimePoint> deadline = pairing_.deadline();
  if (!deadline || deadline == timer_deadline_) return;
  timer_deadline_ = deadline;
  pairing_timer_.expires_at(*deadline);
  pairing_timer_.async_wait([weak = weak_from_this()](const asio::error_code& error) {
    const auto self = weak.lock();
    if (error || !self) return;
    self->pairing_.tick(std::chrono::steady_clock::now());
    self->perform_pairing(nullptr);
  });
}

void ClientServer::Loop::drop(const Session& session, const std::string& why) {
  spdlog::warn("dropped a client (pid {}): {}", session->pid(), why);
  end(session);
}

void ClientServer::Loop::end(Session session) {
  if (pairing_.submits(session->id())) {
    hooks_.client_left(session->stream().key(0), hello_.rank() + session->local_rank(),
                       "its client (pid " + std::to_string(session->pid()) + ") left");
  }
  for (const Leaver& leaver : pairing_.left(session->id())) {
    post([leaver](Loop& self) {
      self.pairing_.fail_place_left(leaver);
      self.perform_pairing(nullptr);
    });
  }
  session->close();
  spinner_.remove(session.get());
  sessions_.erase(session->id());
  // The other hosts learn that its stream has ended.
  post([](Loop& self) { self.perform_pairing(nullptr); });
}

// Runs `work` on the event loop's next turn, so that sockets and timers are served between.
template <typename Work>
void ClientServer::Loop::post(Work work) {
  asio::post(io_, [weak = weak_from_this(), work] {
    if (const auto self = weak.lock()) work(*self);
  });
}

void ClientServer::Loop::new_generation(proto::DaemonHello hello, proto::GroupPlan plan) {
  hello_ = std::move(hello);
  plan_ = std::move(plan);
  between_generations_ = false;
  acceptor_.set_host(hello_.host());
  pairing_.new_generation(hello_.rank(), hello_.host(), hello_.generation());
  perform_pairing(nullptr);
  for (const auto& waiting : std::exchange(awaiting_hello_, {})) {
    const Session session = waiting.lock();
    if (session && sessions_.contains(session->id()) && !greet(*session)) end(session);
  }
}

void ClientServer::Loop::stop() {
  acceptor_.stop();
  pairing_timer_.cancel();
  for (auto& [id, session] : sessions_) session->close();
  spinner_.clear();
  sessions_.clear();
}

ClientServer::ClientServer(asio::io_context& io, net::UniqueFd listener, net::ClientAccess access,
                           proto::DaemonHello hello, proto::GroupPlan plan, ServerHooks hooks)
    : loop_(std::make_shared<Loop>(io, std::move(listener), access, std::move(hello),
                                   std::move(plan), std::move(hooks))) {
  loop_->start();
}

ClientServer::~ClientServer() { loop_->stop(); }

void ClientServer::generation_ended() { loop_->generation_ended(); }

void ClientServer::new_plan(proto::GroupPlan plan) { loop_->new_plan(std::move(plan)); }

void ClientServer::messages_done(const std::vector<engine::MessageDone>& done) {
  loop_->messages_done(done);
}

void ClientServer::new_generation(proto::DaemonHello hello, proto::GroupPlan plan) {
  loop_->new_generation(std::move(hello), std::move(plan));
}

}  // namespace gradsync::daemon
