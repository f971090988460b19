#include "daemon/client_server.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <asio/io_context.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <ctime>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "config/knobs.h"
#include "daemon/accept_loop.h"
#include "daemon/op_request.h"
#include "daemon/outbox.h"
#include "net/message_stream.h"
#include "net/op_queue.h"
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
  int local_rank = 0;  // as its hello said
  std::map<std::uint64_t, std::shared_ptr<net::SharedRegion>>& regions() { return regions_; }
  std::optional<net::OpQueueDaemonEnd>& queue() { return queue_; }
  std::uint64_t messages_read() const { return messages_read_; }

  // The next message on the socket, if all of it is there (otherwise deadline_exceeded).
  Status receive(proto::ClientToDaemon& message, net::UniqueFd& attached) {
    const Status status = reader_.receive(message, net::Deadline(net::Clock::now()), &attached);
    if (status.ok()) ++messages_read_;
    return status;
  }
  bool buffered() const { return reader_.buffered(); }

  void take_queue(net::SharedRegion region) {
    queue_region_ = std::move(region);
    queue_.emplace(queue_region_.data());
  }

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

  // Answers `op`, one of this client's: through its op queue if it came that way, the reason of
  // a failure on the socket first; otherwise on the socket. False as reply()'s.
  bool answer(const PendingOp& op, const proto::DaemonToClient& message) {
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

 private:
  stream_protocol::socket socket_;
  net::MessageReader reader_;
  const int pid_;  // the client process's, as the kernel said when it connected
  const Dropped dropped_;
  Outbox<stream_protocol::socket> outbox_;
  std::map<std::uint64_t, std::shared_ptr<net::SharedRegion>> regions_;
  net::SharedRegion queue_region_;
  std::optional<net::OpQueueDaemonEnd> queue_;
  std::uint64_t messages_read_ = 0;
};

// What the server keeps of one of the daemon's local ranks.
struct LocalRank {
  ClientSession* submitter = nullptr;
  std::uint64_t submitted = 0;  // ops of the submitting client so far
  int submitter_pid = 0;
  std::chrono::system_clock::time_point submitter_since;
  std::deque<PendingOp> waiting;  // submitted, until every local rank has submitted its op
  // The failures of its stream's next ops, whose places failed without them; none for a stream
  // whose client left, since the next client starts a stream of its own.
  std::deque<Status> owed;
  bool left = false;  // its submitting client left, and no other has come
};

struct ClientServer::State : std::enable_shared_from_this<ClientServer::State> {
  State(asio::io_context& io, net::UniqueFd listener, net::ClientAccess access_in,
        proto::DaemonHello hello_in, proto::GroupPlan plan_in, OpRunner run_in,
        StatusSource status_in)
      : acceptor(io),
        backoff(io),
        access(access_in),
        hello(std::move(hello_in)),
        plan(std::move(plan_in)),
        run(std::move(run_in)),
        status_source(std::move(status_in)),
        locals(static_cast<std::size_t>(std::max(hello.local_ranks(), 1))),
        gather_timer(io) {
    acceptor.assign(stream_protocol(), listener.release());
  }

  // "local rank 1 (rank 5)"
  std::string name_of(int local_rank) const {
    return "local rank " + std::to_string(local_rank) + " (rank " +
           std::to_string(hello.rank() + local_rank) + ")";
  }

  void accept() {
    accept_forever(acceptor, backoff, "a client", shared_from_this(),
                   [this](stream_protocol::socket socket) { take(std::move(socket)); });
  }

  void take(stream_protocol::socket socket) {
    const net::PeerCredentials peer = net::peer_credentials(socket.native_handle());
    if (const Status refused = refusal(peer, socket.native_handle()); !refused.ok()) {
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

  // Why a client may not use this rank, if it may not. Another user's, not named by `access`:
  // the socket file is the daemon user's (and the group's), so such a client was let in by hand,
  // and would read and write the group's tensors. A process that holds kMaxConnectionsPerClient
  // connections already.
  Status refusal(const net::PeerCredentials& peer, int fd) const {
    const long own = static_cast<long>(::geteuid());
    const bool served =
        peer.uid == own || peer.uid == 0 || (access.uid >= 0 && peer.uid == access.uid) ||
        (access.gid >= 0 &&
         (peer.gid == access.gid || net::peer_has_supplementary_group(fd, access.gid)));
    if (!served) {
      return Status(ErrorCode::unauthenticated,
                    "host " + std::to_string(hello.host()) + "'s daemon runs as uid " +
                        std::to_string(own) + " and serves no client of uid " +
                        std::to_string(peer.uid) + " (pid " + std::to_string(peer.pid) +
                        "; --client-uid names one more user to serve, --client-gid a group)");
    }
    // A connection the process has closed, whose end this daemon has not read yet, is not held.
    const auto held = std::count_if(sessions.begin(), sessions.end(), [&](const auto& entry) {
      return entry.second->pid() == peer.pid &&
             !net::peer_has_closed(entry.second->socket().native_handle());
    });
    if (held >= kMaxConnectionsPerClient) {
      return Status(ErrorCode::invalid_argument,
                    "pid " + std::to_string(peer.pid) + " already holds " + std::to_string(held) +
                        " connections to host " + std::to_string(hello.host()) +
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

  // Serves every message the client has sent and every op in its queue; then waits for its next
  // message (a doorbell, when the server sleeps).
  void take_messages(const std::shared_ptr<ClientSession>& session) {
    bool first = true;
    if (!serve_messages(session,
                        [&] { return std::exchange(first, false) || session->buffered(); })) {
      return;
    }
    serve_queue(session);
    if (!sessions.contains(session.get())) return;
    stay_awake();
    read(session);
  }

  // Serves the client's messages on the socket while `more()` says there are; false when the
  // client is dropped.
  template <typename More>
  bool serve_messages(const std::shared_ptr<ClientSession>& session, More&& more) {
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

  // Serves the ops the client has published in its queue, at most a queue's worth before the
  // event loop's next turn; true if there were any.
  bool serve_queue(const std::shared_ptr<ClientSession>& session) {
    bool served = false;
    for (std::uint32_t turn = 0; turn < net::kOpQueueSlots; ++turn) {
      if (!session->queue() || !sessions.contains(session.get())) return served;
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
      if (!serve_messages(
              session, [&] { return session->messages_read() < queued.socket_messages_before; })) {
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

  void drop(const std::shared_ptr<ClientSession>& session, const std::string& why) {
    spdlog::warn("dropped a client (pid {}): {}", session->pid(), why);
    end(session);
  }

  // After serving a client the server spins on the op queues for hello.spin_us(), so that an op
  // that comes soon needs no doorbell; then it says in each queue that it sleeps.
  void stay_awake() {
    awake_until = net::Clock::now() + std::chrono::microseconds(hello.spin_us());
    if (spinning) return;
    spinning = true;
    set_queues_asleep(false);
    spin_once();
  }

  void spin_once() {
    std::vector<std::shared_ptr<ClientSession>> published;
    for (ClientSession* session : queued_sessions) {
      if (session->queue()->has_ops()) published.push_back(sessions.at(session));
    }
    bool served = false;
    for (const auto& session : published) served = serve_queue(session) || served;
    if (served) stay_awake();  // spinning already: only the end moves
    if (net::Clock::now() < awake_until) {
      std::this_thread::yield();  // a client may share this CPU
      post([](State& self) { self.spin_once(); });
      return;
    }
    spinning = false;
    // An op published before its client could see the flag rings no doorbell.
    if (set_queues_asleep(true)) post([](State& self) { self.stay_awake(); });
  }

  // Says in every op queue whether the server sleeps; true if one holds an op.
  bool set_queues_asleep(bool asleep) {
    bool published = false;
    for (ClientSession* session : queued_sessions) {
      session->queue()->set_asleep(asleep);
      published = published || session->queue()->has_ops();
    }
    return published;
  }

  // Runs `work` on the event loop's next turn, so that sockets and timers are served between.
  template <typename Work>
  void post(Work work) {
    asio::post(acceptor.get_executor(), [weak = weak_from_this(), work] {
      if (const auto self = weak.lock()) work(*self);
    });
  }

  // False: the client is to be dropped.
  bool serve(const std::shared_ptr<ClientSession>& session, const proto::ClientToDaemon& message,
             net::UniqueFd attached) {
    proto::DaemonToClient reply;
    if (message.has_hello()) {
      if (Status refused = take_local_rank(*session, message.hello()); !refused.ok()) {
        to_proto(refused, *reply.mutable_refused());
        (void)session->reply(reply);
        return false;
      }
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
      status.set_submitter_pid(locals[0].submitter != nullptr ? locals[0].submitter_pid : 0);
      return session->reply(reply);
    } else if (message.has_attach()) {
      // Any client may hand over memory; only the rank's submitting client runs ops on it, and a
      // refused one keeps its regions for when the rank is free.
      attach(*session, message.attach(), std::move(attached));
    } else if (message.has_submit()) {
      return submit(session, message.submit(), false);
    } else if (message.has_doorbell()) {
      // Its queue is served once the socket has been read.
    } else {
      spdlog::warn("dropped a client that sent an empty message");
      return false;
    }
    return true;
  }

  // Takes an op of the client's stream; false: the client is to be dropped.
  bool submit(const std::shared_ptr<ClientSession>& session, const proto::SubmitOp& submitted,
              bool queued) {
    PendingOp op{session, submitted, nullptr, 0, session->local_rank, queued};
    Status claimed = claim(session);
    if (claimed.ok() && session->generation != hello.generation()) {
      claimed = Status(ErrorCode::group_changed,
                       "the group changed from generation " + std::to_string(session->generation) +
                           " to " + std::to_string(hello.generation()) + ": this is now rank " +
                           std::to_string(hello.rank() + session->local_rank) + " of " +
                           std::to_string(hello.world_size()) +
                           "; take note of it (Client::group()) to go on");
    }
    LocalRank& local = locals[session->local_rank];
    if (claimed.ok()) {
      op.stream_sequence = ++local.submitted;
      if (!local.owed.empty()) {
        claimed = local.owed.front();
        local.owed.pop_front();
      }
    }
    if (!claimed.ok()) return session->answer(op, failure(op, claimed));
    if (const auto found = session->regions().find(op.op.region_id());
        found != session->regions().end()) {
      op.region = found->second;
    }
    local.waiting.push_back(std::move(op));
    return run_ready(session.get());
  }

  // Answers a hello: the client takes note of the group as it is now.
  bool greet(ClientSession& session) {
    proto::DaemonToClient reply;
    proto::DaemonHello& answer = *reply.mutable_hello();
    answer = hello;
    answer.set_rank(hello.rank() + session.local_rank);
    answer.set_local_rank(session.local_rank);
    answer.set_op_queue(session.queue().has_value());
    session.generation = hello.generation();
    return session.reply(reply);
  }

  // The local rank a hello names: one the daemon serves, and for a submitting client the one it
  // submits as.
  Status take_local_rank(ClientSession& session, const proto::ClientHello& request) const {
    const int local_rank = request.has_local_rank() ? request.local_rank() : 0;
    if (local_rank < 0 || local_rank >= static_cast<int>(locals.size())) {
      return Status(ErrorCode::invalid_argument,
                    "local rank " + std::to_string(local_rank) + " is not one of the " +
                        std::to_string(locals.size()) + " that host " +
                        std::to_string(hello.host()) + "'s daemon serves (0 to " +
                        std::to_string(locals.size() - 1) + "; gradsyncd worker --local-ranks)");
    }
    if (local_rank != session.local_rank && locals[session.local_rank].submitter == &session) {
      return Status(ErrorCode::invalid_argument,
                    "the client submits as " + name_of(session.local_rank) +
                        " and cannot become local rank " + std::to_string(local_rank));
    }
    session.local_rank = local_rank;
    return {};
  }

  static proto::DaemonToClient failure(const PendingOp& op, const Status& why) {
    proto::DaemonToClient reply;
    proto::OpResult& result = *reply.mutable_result();
    result.set_request_id(op.op.request_id());
    to_proto(why, *result.mutable_status());
    return reply;
  }

  bool every_local_rank_waits() const {
    return std::all_of(locals.begin(), locals.end(),
                       [](const LocalRank& local) { return !local.waiting.empty(); });
  }
  bool some_local_rank_waits() const {
    return std::any_of(locals.begin(), locals.end(),
                       [](const LocalRank& local) { return !local.waiting.empty(); });
  }

  // Runs every op that every local rank has submitted; false when `current`, the client just
  // read, is to be dropped.
  bool run_ready(const ClientSession* current) {
    bool current_ok = true;
    while (every_local_rank_waits()) {
      LocalOps batch;
      for (LocalRank& local : locals) {
        batch.ops.push_back(std::move(local.waiting.front()));
        local.waiting.pop_front();
      }
      current_ok = run_batch(batch, current) && current_ok;
    }
    arm_gather_timer();
    return current_ok;
  }

  // Runs `batch` and replies; false when `current` is to be dropped. Any other client that fails
  // to take its reply is dropped here.
  bool run_batch(const LocalOps& batch, const ClientSession* current) {
    ++batches;
    const std::vector<proto::DaemonToClient> replies = run(batch);
    bool current_ok = true;
    for (std::size_t index = 0; index < batch.ops.size(); ++index) {
      const std::shared_ptr<ClientSession>& session = batch.ops[index].session;
      if (session->answer(batch.ops[index], replies[index])) continue;
      if (session.get() == current) {
        current_ok = false;
      } else if (sessions.contains(session.get())) {
        end(session);
      }
    }
    return current_ok;
  }

  // Some local rank has submitted an op the others have not: it may wait for them as long as its
  // timeout, then its place fails.
  void arm_gather_timer() {
    if (!some_local_rank_waits() || gather_armed_for == batches) return;
    gather_armed_for = batches;
    std::uint32_t timeout_ms = 0;
    for (const LocalRank& local : locals) {
      if (!local.waiting.empty()) timeout_ms = local.waiting.front().op.timeout_ms();
    }
    if (timeout_ms == 0) timeout_ms = knobs::kOpTimeoutMs.default_value;
    gather_timer.expires_after(std::chrono::milliseconds(timeout_ms));
    gather_timer.async_wait([weak = weak_from_this(), batch = batches,
                             timeout_ms](const asio::error_code& error) {
      const auto self = weak.lock();
      if (error || !self || self->batches != batch) return;
      self->fail_incomplete(
          ErrorCode::deadline_exceeded,
          "submitted no op within " + std::to_string(timeout_ms) + " ms of the other local ranks");
    });
  }

  // Fails the place in the streams that some local ranks have reached and others have not
  // (`why` says what the others did), on every rank; the others' ops at that place fail when
  // they come.
  void fail_incomplete(ErrorCode code, const std::string& why) {
    if (every_local_rank_waits() || !some_local_rank_waits()) return;
    LocalOps batch;
    std::string missing;
    std::vector<int> late;
    for (int index = 0; index < static_cast<int>(locals.size()); ++index) {
      LocalRank& local = locals[index];
      if (local.waiting.empty()) {
        missing += (missing.empty() ? "" : ", ") + name_of(index);
        late.push_back(index);
        continue;
      }
      batch.ops.push_back(std::move(local.waiting.front()));
      local.waiting.pop_front();
    }
    const std::uint64_t place = batch.ops.front().stream_sequence;
    batch.missing = Status(code, "op " + std::to_string(place) + " of the streams of host " +
                                     std::to_string(hello.host()) + ": " + missing + " " + why);
    for (const int index : late) {
      if (locals[index].left) continue;
      locals[index].owed.push_back(Status(
          code, "this op's place failed on every rank without it: " + batch.missing.message()));
    }
    run_batch(batch, nullptr);
    arm_gather_timer();
  }

  void attach(ClientSession& session, const proto::AttachRegion& request, net::UniqueFd attached) {
    if (request.op_queue()) {
      attach_queue(session, request, std::move(attached));
      return;
    }
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

  // A connection has one op queue, of the layout's size at least. Without one its hello says so,
  // and the client library gives up with that.
  void attach_queue(ClientSession& session, const proto::AttachRegion& request,
                    net::UniqueFd attached) {
    net::SharedRegion region;
    const Status mapped =
        session.queue() ? Status(ErrorCode::invalid_argument, "the connection has one already")
        : request.bytes() < sizeof(net::OpQueueLayout)
            ? Status(ErrorCode::invalid_argument, "it has " + std::to_string(request.bytes()) +
                                                      " bytes, and a queue takes " +
                                                      std::to_string(sizeof(net::OpQueueLayout)))
        : attached.valid() ? net::SharedRegion::map(std::move(attached), request.bytes(), region)
                           : Status(ErrorCode::invalid_argument, "no descriptor came with it");
    if (!mapped.ok()) {
      spdlog::warn("a client's op queue (pid {}) is unusable: {}", session.pid(), mapped.message());
      return;
    }
    session.take_queue(std::move(region));
    session.queue()->set_asleep(!spinning);
    queued_sessions.insert(&session);
  }

  // Makes `session` its local rank's submitting client, unless another one is.
  Status claim(const std::shared_ptr<ClientSession>& session) {
    LocalRank& local = locals[session->local_rank];
    if (local.submitter == session.get()) return {};
    // A client that has just gone may not have been read to its end yet: a training process
    // that restarts must not be refused because of its own previous life.
    if (local.submitter != nullptr &&
        net::peer_has_closed(local.submitter->socket().native_handle())) {
      end(sessions.at(local.submitter));
    }
    const int rank = hello.rank() + session->local_rank;
    if (local.submitter != nullptr) {
      return Status(ErrorCode::invalid_argument,
                    "rank " + std::to_string(rank) + " already has a submitting client (pid " +
                        std::to_string(local.submitter_pid) + ", since " +
                        clock_time(local.submitter_since) +
                        "); a rank takes ops from one client at a time, so that every rank "
                        "pairs the same ops");
    }
    local.submitter = session.get();
    local.submitted = 0;
    if (local.left) local.owed.clear();
    local.left = false;
    local.submitter_pid = net::peer_credentials(session->socket().native_handle()).pid;
    local.submitter_since = std::chrono::system_clock::now();
    spdlog::info("rank {}: ops now come from the client with pid {}", rank, local.submitter_pid);
    return {};
  }

  void end(const std::shared_ptr<ClientSession>& session) {
    for (int index = 0; index < static_cast<int>(locals.size()); ++index) {
      LocalRank& local = locals[index];
      if (local.submitter != session.get()) continue;
      spdlog::info("rank {}: the submitting client (pid {}) left", hello.rank() + index,
                   local.submitter_pid);
      local.submitter = nullptr;
      local.left = true;
      // The other local ranks' ops that wait for one of its own fail now, not at their timeout.
      if (local.waiting.empty() && some_local_rank_waits()) {
        asio::post(acceptor.get_executor(), [weak = weak_from_this(), index,
                                             pid = local.submitter_pid] {
          const auto self = weak.lock();
          if (!self || self->locals[index].submitter != nullptr) return;
          self->fail_incomplete(ErrorCode::aborted, "left (its client, pid " + std::to_string(pid) +
                                                        ", went) before submitting it");
        });
      }
    }
    asio::error_code ignored;
    session->socket().close(ignored);
    queued_sessions.erase(session.get());
    sessions.erase(session.get());
  }

  void stop() {
    asio::error_code ignored;
    acceptor.close(ignored);
    backoff.cancel();
    for (auto& [key, session] : sessions) session->socket().close(ignored);
    queued_sessions.clear();
    sessions.clear();
  }

  stream_protocol::acceptor acceptor;
  asio::steady_timer backoff;      // between accepts that failed
  const net::ClientAccess access;  // served besides the daemon's own user and root
  proto::DaemonHello hello;        // of the current generation
  proto::GroupPlan plan;
  bool between_generations = false;
  std::vector<std::weak_ptr<ClientSession>> awaiting_hello;  // until the next generation
  const OpRunner run;
  const StatusSource status_source;
  std::map<const ClientSession*, std::shared_ptr<ClientSession>> sessions;
  std::vector<LocalRank> locals;
  std::uint64_t batches = 0;        // places of the streams run or failed, in all generations
  asio::steady_timer gather_timer;  // for the place some local ranks have reached
  std::set<ClientSession*> queued_sessions;  // those with an op queue
  bool spinning = false;                     // on the op queues (stay_awake)
  net::Clock::time_point awake_until;
  std::uint64_t gather_armed_for = ~std::uint64_t{0};  // the value of `batches` it was armed at
};

ClientServer::ClientServer(asio::io_context& io, net::UniqueFd listener, net::ClientAccess access,
                           proto::DaemonHello hello, proto::GroupPlan plan, OpRunner run,
                           StatusSource status)
    : state_(std::make_shared<State>(io, std::move(listener), access, std::move(hello),
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
  // The submitting clients' streams start again: ops pair by their place in them. An op that
  // waited for the other local ranks' fails: its place belonged to the generation before.
  ++state_->batches;
  for (LocalRank& local : state_->locals) {
    local.submitted = 0;
    local.owed.clear();
    local.left = false;
    for (const PendingOp& op : std::exchange(local.waiting, {})) {
      (void)op.session->answer(
          op, State::failure(op, Status(ErrorCode::group_changed,
                                        "the group moved to generation " +
                                            std::to_string(state_->hello.generation()) +
                                            " while this op waited for the other local ranks'")));
    }
  }
  for (const auto& waiting : std::exchange(state_->awaiting_hello, {})) {
    const std::shared_ptr<ClientSession> session = waiting.lock();
    if (session && state_->sessions.contains(session.get()) && !state_->greet(*session)) {
      state_->end(session);
    }
  }
}

}  // namespace gradsync::daemon
