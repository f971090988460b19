#include "daemon/worker.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "collective/algorithms.h"
#include "daemon/calibrator.h"
#include "daemon/client_server.h"
#include "daemon/control_channel.h"
#include "daemon/data_mesh.h"
#include "daemon/host_op.h"
#include "daemon/join_proofs.h"
#include "daemon/link_prober.h"
#include "daemon/op_request.h"
#include "daemon/op_thread_watch.h"
#include "daemon/op_times.h"
#include "daemon/table_gate.h"
#include "engine/abort_signal.h"
#include "engine/executor.h"
#include "net/cpu_affinity.h"
#include "net/message_stream.h"
#include "net/socket_channels.h"
#include "proto/convert.h"

namespace gradsync::daemon {

namespace {

constexpr auto kMeshTimeout = std::chrono::seconds(30);
// The other ranks' probing, then the coordinator's answer.
constexpr auto kPlanTimeout = std::chrono::milliseconds(60'000);
// A spare waits for a place as long as its coordinator is there (its connection and heartbeats
// say so), which may be the group's whole life.
constexpr auto kSpareWait = std::chrono::hours(24 * 365);
// Between attempts to reach a coordinator that is gone, or restarting.
constexpr auto kReattachBackoff = std::chrono::milliseconds(100);

class Worker {
 public:
  explicit Worker(const WorkerConfig& config)
      : config_(config), op_watch_(config.stall_timeout), table_gate_(config.stall_timeout) {}

  // The main thread forms the group and then runs the ops; a second thread runs the control
  // event loop (the coordinator channel, the data port, signals) from start to end.
  int run() {
    asio::io_context control_io(1);
    auto keep_running = asio::make_work_guard(control_io);
    asio::signal_set signals(control_io, SIGINT, SIGTERM);
    signals.async_wait([this](const asio::error_code& error, int signal) {
      if (!error) stop("stopping on signal " + std::to_string(signal));
    });
    std::thread control_thread([&control_io] { control_io.run(); });
    const int status = serve(control_io);
    keep_running.reset();
    control_io.stop();
    control_thread.join();
    // They live on control_io, which ends with this function.
    watchdog_.reset();
    channel_.reset();
    return status;
  }

 private:
  // What forming a generation of the group yields.
  struct Generation {
    proto::Assignment assignment;
    std::unique_ptr<engine::PeerMesh> mesh;
    proto::GroupPlan plan_message;
    GroupPlan plan;
    HostLayout layout;
    std::uint64_t channel_serial = 0;  // which control channel's loss ends it
  };

  // Forms the first generation of the group, then serves clients on the op thread until the worker
  // stops. When the coordinator ends a generation (it lost a member) the next is formed on a
  // thread of its own while the op thread goes on answering clients: their ops fail at once,
  // naming what ended the generation, instead of waiting for the group. When only the
  // coordinator's connection is lost, the generation runs on while that thread finds the
  // coordinator again (reattach).
  int serve(asio::io_context& control_io) {
    net::UniqueFd data_listener;
    if (Status status = net::listen_tcp(config_.listen, data_listener); !status.ok()) {
      return fail("worker: " + status.message());
    }
    data_port_number_ = net::local_address(data_listener.get()).port;
    // Served from now on: a connection to the data port is read and judged while the group forms.
    DataPort data_port(control_io, std::move(data_listener), config_.secret);
    data_port_ = &data_port;
    control_io_ = &control_io;
    Generation first;
    if (Status status = form_next(-1, first); !status.ok()) {
      return fail("worker: " + status.message());
    }
    net::UniqueFd client_listener;
    if (Status status = net::listen_unix(config_.socket_path, client_listener, config_.clients.gid);
        !status.ok()) {
      return fail("worker: " + status.message());
    }
    serving_since_ = std::chrono::steady_clock::now();
    server_.emplace(
        op_io_, std::move(client_listener), config_.clients,
        hello_for(first.assignment, first.layout), first.plan_message,
        [this](const LocalOps& ops) { return run_ops(ops); }, [this] { return describe_self(); });
    install(std::move(first));
    watchdog_.emplace(control_io);
    watch_op_thread();
    op_io_.run();
    if (former_.joinable()) former_.join();
    server_.reset();
    ::unlink(config_.socket_path.c_str());
    spdlog::info("worker rank {}: {}", rank_, abort_.reason().message());
    return exit_status_;
  }

  // Forms the next generation, as the rank held in the one before (`previous_rank`, -1 for none);
  // one that ends while it forms is followed by the next. A join that is refused is not retried.
  Status form_next(int previous_rank, Generation& formed) {
    while (true) {
      bool assigned = false;
      const Status status = form_generation(previous_rank, formed, assigned);
      if (status.ok() || !assigned || !abort_.raised()) return status;
      std::lock_guard lock(stop_mutex_);
      if (stopping_) return status;
      spdlog::warn("worker: generation {} ended while it formed ({}); joining the next",
                   formed.assignment.generation(), abort_.reason().message());
      previous_rank = formed.assignment.rank();
      formed = Generation{};
      channel_.reset();
      data_port_->expect_new_plan();
      abort_.reset();
    }
  }

  // Joins the coordinator, takes the assignment (`assigned` says whether it came), connects the
  // data mesh and takes the plan.
  Status form_generation(int previous_rank, Generation& formed, bool& assigned) {
    net::UniqueFd control;
    if (Status status =
            join(control, previous_rank, nullptr, net::Deadline::after(config_.join_timeout));
        !status.ok()) {
      return status;
    }
    ControlChannel* channel = open_channel(
        std::move(control), ControlChannel::OnLoss::end_generation, formed.channel_serial);
    proto::CoordinatorToWorker message;
    Status status = channel->next(config_.join_timeout, "the group to form", message);
    while (status.ok() && message.has_spare()) {
      spdlog::info("worker: {}", message.spare().why());
      status = channel->next(kSpareWait, "a place in the group", message);
    }
    if (status.ok() && !message.has_assignment()) status = unexpected("an assignment");
    if (status.ok()) status = check_coordinator(message.assignment());
    MeshPlan plan;
    if (status.ok()) status = mesh_plan_from(message.assignment(), plan);
    if (status.ok() && plan.layout.local_ranks(plan.rank) != config_.local_ranks) {
      status = Status(
          ErrorCode::protocol_error,
          "the coordinator counts " + std::to_string(plan.layout.local_ranks(plan.rank)) +
              " local ranks for this worker, which serves " + std::to_string(config_.local_ranks));
    }
    if (!status.ok()) return status;
    formed.layout = plan.layout;
    assigned = true;
    formed.assignment = message.assignment();
    spdlog::info("worker: rank {} of {}, generation {}", plan.rank, plan.world_size,
                 plan.generation);
    const auto with_rank = [&](const Status& failed) {
      return Status(failed.code(), "rank " + std::to_string(plan.rank) + ": " + failed.message());
    };
    std::vector<net::UniqueFd> sockets;
    status = data_port_->form_mesh(plan, net::Deadline::after(kMeshTimeout), abort_.fd(), sockets);
    if (!status.ok()) return with_rank(status);
    formed.mesh = std::make_unique<engine::PeerMesh>(
        plan.rank, plan.world_size, plan.generation,
        std::make_unique<net::SocketChannels>(std::move(sockets)));
    if (Status ready = prepare_plan(formed, *channel); !ready.ok()) return with_rank(ready);
    spdlog::info("worker rank {}: generation {} plan:\n{}", plan.rank, plan.generation,
                 describe(formed.plan));
    return {};
  }

  // Local rank 0's hello (the server makes the others').
  proto::DaemonHello hello_for(const proto::Assignment& assignment,
                               const HostLayout& layout) const {
    proto::DaemonHello hello;
    hello.set_rank(layout.first_rank(assignment.rank()));
    hello.set_world_size(layout.world_size());
    hello.set_local_ranks(layout.local_ranks(assignment.rank()));
    hello.set_host(assignment.rank());
    hello.set_hosts(layout.hosts());
    hello.set_generation(assignment.generation());
    for (const int cpu : net::allowed_cpus()) hello.add_cpus(cpu);
    hello.set_spin_us(static_cast<std::int32_t>(config_.spin.count()));
    return hello;
  }

  // Makes `socket` the coordinator's channel; `serial` receives its number, which its loss
  // names.
  ControlChannel* open_channel(net::UniqueFd socket, ControlChannel::OnLoss on_loss,
                               std::uint64_t& serial) {
    std::lock_guard lock(stop_mutex_);
    serial = ++channel_serial_;
    channel_.emplace(
        *control_io_, std::move(socket), config_.heartbeat_interval, abort_,
        [this, serial = serial] {
          // An op waiting for a table version's decision waits no more (channel_lost says why).
          table_gate_.cancel();
          asio::post(op_io_, [this, serial] { channel_lost(serial); });
        },
        on_loss,
        [this, serial = serial](const proto::CoordinatorToWorker& message) {
          table_message(serial, message);
        });
    if (stopping_) channel_->interrupt(abort_.reason());
    return &*channel_;
  }

  // Makes `formed` the generation the op thread serves.
  void install(Generation formed) {
    assignment_ = std::move(formed.assignment);
    mesh_ = std::move(formed.mesh);
    plan_ = std::move(formed.plan);
    layout_ = std::move(formed.layout);
    rank_ = assignment_.rank();
    table_gate_.reset(assignment_.generation());
    op_times_.clear();
    ops_served_before_ = ops_served_;
    server_->new_generation(hello_for(assignment_, layout_), std::move(formed.plan_message));
    spdlog::info("worker rank {}: serving clients on {} (generation {})", rank_,
                 config_.socket_path, assignment_.generation());
    serve_channel(formed.channel_serial);
  }

  // Makes channel `serial` the one whose loss the op thread acts on, from now on keeping the
  // generation when only the connection is lost; a loss that came first is acted on now.
  void serve_channel(std::uint64_t serial) {
    serving_serial_ = serial;
    bool lost = false;
    {
      std::lock_guard lock(stop_mutex_);
      watched_serial_ = serial;
      watched_rank_ = rank_;
      watched_generation_ = assignment_.generation();
      if (channel_) {
        channel_->keep_generation_when_lost();
        std::chrono::steady_clock::duration unused;
        lost = !channel_->state(unused).ok();
      }
    }
    if (lost || abort_.raised()) channel_lost(serial);
  }

  // On the op thread, once control channel `serial` is lost. A channel lost while its generation
  // formed, or while it reattached, is that thread's to see.
  void channel_lost(std::uint64_t serial) {
    if (mesh_ == nullptr || serial != serving_serial_ || stopping()) return;
    serving_serial_ = 0;
    if (!abort_.raised() && table_gate_.unsettled()) {
      abort_.raise(Status(ErrorCode::aborted,
                          "lost the coordinator while it settled a new table version: the ranks "
                          "may not agree from which op it runs"));
    }
    if (abort_.raised()) {
      end_generation();
      return;
    }
    spdlog::warn(
        "worker rank {}: lost the coordinator; generation {} runs on while it is found "
        "again (for up to {} ms)",
        rank_, assignment_.generation(), config_.coordinator_timeout.count());
    beside_op_thread([this, running = assignment_] { reattach(running); });
  }

  // On the op thread: lets the generation go (abort_ says why) and forms the next on a thread of
  // its own, or ends the worker when it must not join again.
  void end_generation() {
    generation_end_ = abort_.reason();
    mesh_.reset();
    server_->generation_ended();
    if (!config_.rejoin) {
      exit_status_ = fail("worker rank " + std::to_string(rank_) + ": generation " +
                          std::to_string(assignment_.generation()) + " ended (" +
                          generation_end_.message() + "); not joining again (--no-rejoin)");
      op_io_.stop();
      return;
    }
    spdlog::warn("worker rank {}: generation {} ended ({}); joining the next", rank_,
                 assignment_.generation(), generation_end_.message());
    beside_op_thread([this, previous_rank = rank_] {
      {
        std::lock_guard lock(stop_mutex_);
        channel_.reset();
        data_port_->expect_new_plan();
        if (!stopping_) abort_.reset();
      }
      auto formed = std::make_shared<Generation>();
      const Status status = form_next(previous_rank, *formed);
      asio::post(op_io_, [this, formed, status] { next_generation_formed(status, *formed); });
    });
  }

  // On the control thread, at every heartbeat: pings the op thread, and leaves the generation
  // once the op thread is past what it may take (OpThreadWatch), so that the others go on.
  void watch_op_thread() {
    watchdog_->expires_after(config_.heartbeat_interval);
    watchdog_->async_wait([this](const asio::error_code& error) {
      if (error) return;
      const auto now = OpThreadWatch::Clock::now();
      // Late by more than a beat: the whole process was stopped (SIGSTOP, a swapped-out host), not
      // only the op thread, which gets the time back.
      if (const auto late = now - watchdog_->expiry(); late > config_.heartbeat_interval) {
        op_watch_.excuse(late);
      }
      asio::post(op_io_, [this] { op_watch_.alive(); });
      report_op_times();
      if (const auto stuck = op_watch_.stuck(now)) {
        std::lock_guard lock(stop_mutex_);
        // Only a generation the op thread serves is left; one that forms needs no op thread.
        if (channel_ && !stopping_ && watched_serial_ == channel_serial_ &&
            left_serial_ != channel_serial_) {
          left_serial_ = channel_serial_;
          spdlog::error("worker rank {}: {}; leaving the generation so that the group goes on",
                        watched_rank_, *stuck);
          channel_->leave(Status(ErrorCode::aborted, *stuck));
        }
      }
      watch_op_thread();
    });
  }

  // On the control thread: the times of the ops auto ran since the last beat, for the coordinator's
  // refinement of the table, while the op thread serves the channel's generation.
  void report_op_times() {
    std::lock_guard lock(stop_mutex_);
    if (!channel_ || stopping_ || watched_serial_ != channel_serial_) return;
    proto::WorkerToCoordinator report;
    if (op_times_.take_report(watched_generation_, *report.mutable_op_times())) {
      channel_->send(report);
    }
  }

  // On the control thread: a new table version's proposal or switch from channel `serial`'s
  // coordinator. Anything the gate cannot take leaves the generation: the ranks could otherwise
  // disagree on an op's algorithm.
  void table_message(std::uint64_t serial, const proto::CoordinatorToWorker& message) {
    std::lock_guard lock(stop_mutex_);
    if (!channel_ || serial != channel_serial_ || stopping_) return;
    Status status;
    if (message.has_table_proposal()) {
      proto::WorkerToCoordinator reply;
      proto::TableReady& ready = *reply.mutable_table_ready();
      std::uint64_t next_op = 0;
      status = table_gate_.propose(message.table_proposal().generation(),
                                   message.table_proposal().version(), next_op);
      ready.set_generation(message.table_proposal().generation());
      ready.set_version(message.table_proposal().version());
      ready.set_next_op(next_op);
      if (status.ok()) channel_->send(reply);
    } else {
      GroupPlan plan;
      status = from_proto(message.table_switch().plan(), plan);
      if (status.ok() && plan.world_size != static_cast<int>(assignment_.world_size())) {
        status = Status(ErrorCode::protocol_error,
                        "a table version for " + std::to_string(plan.world_size) + " ranks");
      }
      if (status.ok()) status = table_gate_.decide(message.table_switch().from_op(), plan);
    }
    if (!status.ok() && left_serial_ != channel_serial_) {
      left_serial_ = channel_serial_;
      spdlog::error("worker rank {}: {}; leaving the generation", watched_rank_, status.message());
      channel_->leave(status);
    }
  }

  // Runs `work` on the thread that forms generations, once the last work there has ended.
  void beside_op_thread(std::function<void()> work) {
    if (former_.joinable()) former_.join();
    former_ = std::thread(std::move(work));
  }

  void next_generation_formed(const Status& status, Generation& formed) {
    if (!status.ok()) {
      exit_status_ = fail("worker: " + status.message());
      op_io_.stop();
      return;
    }
    install(std::move(formed));
  }

  // Beside the op thread, while generation `running` runs on without its coordinator: joins the
  // coordinator again, asking it to take `running` back, until it does, refuses (it runs another
  // generation) or the coordinator timeout passes. The op thread then serves the new channel, or
  // ends the generation.
  void reattach(const proto::Assignment& running) {
    const auto deadline = net::Deadline::after(config_.coordinator_timeout);
    Status status;
    std::uint64_t serial = 0;
    while (!abort_.raised()) {
      status = take_back(running, deadline, serial);
      if (status.ok()) {
        spdlog::info("worker rank {}: the coordinator took generation {} back", running.rank(),
                     running.generation());
        asio::post(op_io_, [this, serial] { serve_channel(serial); });
        return;
      }
      if (abort_.raised() || deadline.expired()) break;
      spdlog::warn("worker rank {}: the coordinator did not take generation {} back yet: {}",
                   running.rank(), running.generation(), status.message());
      const net::Deadline pause(std::min(deadline.when(), net::Clock::now() + kReattachBackoff));
      (void)net::wait_unless_cancelled(-1, 0, pause, abort_.fd(), "a pause between attempts");
    }
    if (!abort_.raised()) {
      abort_.raise(
          Status(ErrorCode::aborted, "no coordinator at " + config_.coordinator.to_string() +
                                         " took the group back within " +
                                         std::to_string(config_.coordinator_timeout.count()) +
                                         " ms (last: " + status.message() + ")"));
    }
    asio::post(op_io_, [this] {
      if (!stopping()) end_generation();
    });
  }

  // One attempt of reattach(): joins with `running` and waits for the coordinator to hand the
  // same assignment back; `serial` receives the new channel's number.
  Status take_back(const proto::Assignment& running, net::Deadline deadline,
                   std::uint64_t& serial) {
    net::UniqueFd control;
    if (Status status = join(control, running.rank(), &running, deadline); !status.ok()) {
      return status;
    }
    ControlChannel* channel =
        open_channel(std::move(control), ControlChannel::OnLoss::keep_generation, serial);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline.when() - net::Clock::now());
    proto::CoordinatorToWorker message;
    Status status = channel->next(std::max(left, std::chrono::milliseconds(1)),
                                  "the coordinator to take the group back", message);
    if (status.ok() && !message.has_assignment()) status = unexpected("an assignment");
    if (status.ok()) status = check_coordinator(message.assignment());
    if (status.ok() && !same_group(message.assignment(), running)) {
      status = Status(ErrorCode::protocol_error,
                      "the coordinator handed back another assignment than generation " +
                          std::to_string(running.generation()) + "'s");
    }
    return status;
  }

  // Whether two assignments give the same rank of the same generation of the same group.
  static bool same_group(const proto::Assignment& a, const proto::Assignment& b) {
    if (a.generation() != b.generation() || a.rank() != b.rank() ||
        a.world_size() != b.world_size() || a.peers_size() != b.peers_size()) {
      return false;
    }
    for (int peer = 0; peer < a.peers_size(); ++peer) {
      if (a.peers(peer).rank() != b.peers(peer).rank() ||
          a.peers(peer).data_address() != b.peers(peer).data_address()) {
        return false;
      }
    }
    return true;
  }

  bool stopping() {
    std::lock_guard lock(stop_mutex_);
    return stopping_;
  }

  // What the worker knows of itself and its group, for `gradsync status`.
  proto::DaemonStatus describe_self() {
    proto::DaemonStatus status;
    status.set_rank(assignment_.rank());
    status.set_world_size(assignment_.world_size());
    status.set_generation(assignment_.generation());
    *status.mutable_peers() = assignment_.peers();
    status.set_ops_served(ops_served_);
    status.set_ops_failed(ops_failed_);
    std::chrono::steady_clock::duration heartbeat_age{};
    {
      std::lock_guard lock(stop_mutex_);
      const Status coordinator = channel_ ? channel_->state(heartbeat_age)
                                          : Status(ErrorCode::aborted, "the group is re-forming");
      to_proto(coordinator, *status.mutable_coordinator());
    }
    status.set_heartbeat_age_ms(std::chrono::duration<double, std::milli>(heartbeat_age).count());
    status.set_uptime_s(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - serving_since_).count());
    return status;
  }

  // Ends the worker from the control thread: whatever the main thread waits for ends at once
  // (an op in flight, the op loop, or a step of forming the group), and it returns 0.
  void stop(const std::string& why) {
    const Status reason(ErrorCode::aborted, "the worker is " + why);
    std::lock_guard lock(stop_mutex_);
    stopping_ = true;
    abort_.raise(reason);  // ops, probing and connecting watch it
    if (channel_) channel_->interrupt(reason);
    op_io_.stop();
  }

  // A step that failed because the worker is stopping is no error.
  int fail(const std::string& message) {
    std::lock_guard lock(stop_mutex_);
    if (stopping_) {
      spdlog::info("worker: {}", abort_.reason().message());
      return 0;
    }
    spdlog::error("{}", message);
    return 2;
  }

  static Status unexpected(const std::string& wanted) {
    return Status(ErrorCode::protocol_error, "the coordinator sent something other than " + wanted);
  }

  // Measures what the coordinator asks for (the links, then all-reduce itself) and takes the
  // group's plan, which decides what auto runs.
  Status prepare_plan(Generation& formed, ControlChannel& channel) {
    engine::PeerMesh& mesh = *formed.mesh;
    OwnOpSettings own_ops;
    own_ops.segment_bytes = config_.segment_bytes;
    own_ops.spin = config_.spin;
    own_ops.stall_timeout = config_.stall_timeout;
    if (formed.assignment.probe_links()) {
      proto::WorkerToCoordinator report;
      ProbeSettings settings;
      settings.ops = own_ops;
      Status status = probe_links(mesh, abort_, settings, *report.mutable_probe_report());
      if (!status.ok()) return status;
      channel.send(report);
      spdlog::info("worker rank {}: probed {} links in {:.0f} ms", mesh.rank(),
                   report.probe_report().links_size(), report.probe_report().probe_ms());
    }
    proto::CoordinatorToWorker message;
    if (Status status = channel.next(kPlanTimeout, "the group's plan", message); !status.ok()) {
      return status;
    }
    if (message.has_calibration_request()) {
      proto::WorkerToCoordinator report;
      Status status = calibrate(mesh, abort_, own_ops, message.calibration_request(),
                                *report.mutable_calibration_report());
      if (status.ok()) {
        channel.send(report);
        status = channel.next(kPlanTimeout, "the group's plan", message);
      }
      if (!status.ok()) return status;
    }
    if (!message.has_plan()) return unexpected("the group's plan");
    formed.plan_message = message.plan();
    GroupPlan& plan = formed.plan;
    if (Status status = from_proto(formed.plan_message, plan); !status.ok()) return status;
    if (plan.world_size != mesh.world_size() || plan.generation != mesh.generation()) {
      return Status(ErrorCode::protocol_error,
                    "the coordinator sent a plan for " + std::to_string(plan.world_size) +
                        " ranks of generation " + std::to_string(plan.generation));
    }
    return {};
  }

  // Connects to the coordinator and asks to join, proving the group secret if there is one: as a
  // newcomer, as `previous_rank` of the generation that ended (>= 0), or as the rank of `running`
  // (not null), which the worker still runs.
  Status join(net::UniqueFd& control, int previous_rank, const proto::Assignment* running,
              net::Deadline deadline) {
    if (Status status =
            net::connect_tcp_retrying(config_.coordinator, deadline, control, abort_.fd());
        !status.ok()) {
      return Status(status.code(), "cannot reach the coordinator at " +
                                       config_.coordinator.to_string() + ": " + status.message());
    }
    // The coordinator speaks first: the challenge this worker's join proves the secret over.
    // Nothing else comes before the join, so this reader takes nothing the channel's should.
    proto::CoordinatorToWorker first;
    if (Status status = net::MessageReader(control.get()).receive(first, deadline); !status.ok()) {
      return Status(status.code(), "the coordinator at " + config_.coordinator.to_string() +
                                       " sent no challenge: " + status.message());
    }
    if (!first.has_challenge()) return unexpected("a challenge");
    challenge_ = first.challenge().nonce();
    const std::string host = config_.advertise_host.empty() ? net::local_address(control.get()).host
                                                            : config_.advertise_host;
    proto::WorkerToCoordinator message;
    proto::JoinRequest& join = *message.mutable_join();
    join.set_data_address((host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                          std::to_string(data_port_number_));
    join.set_requested_rank(config_.requested_rank);
    join.set_local_ranks(config_.local_ranks);
    if (previous_rank >= 0) join.set_previous_rank(previous_rank);
    if (running != nullptr) {
      proto::Assignment& kept = *join.mutable_running();
      kept = *running;
      kept.clear_proof();
    }
    join.set_nonce(net::make_nonce());
    if (!config_.secret.empty()) {
      join.set_challenge_response(join_proof(config_.secret, challenge_, join));
    }
    nonce_ = join.nonce();
    spdlog::info("worker: joining {} with data address {}", config_.coordinator.to_string(),
                 join.data_address());
    return net::send_message(control.get(), message, deadline);
  }

  // With a group secret, the coordinator must prove it knows it too: an impostor would otherwise
  // hand this worker a peer table of its own.
  Status check_coordinator(const proto::Assignment& assignment) const {
    if (config_.secret.empty() ||
        net::same_proof(assignment.proof(),
                        assignment_proof(config_.secret, challenge_, nonce_, assignment))) {
      return {};
    }
    return Status(ErrorCode::unauthenticated,
                  "the coordinator at " + config_.coordinator.to_string() +
                      " does not prove the group secret (one without --secret-file, or with "
                      "another secret)");
  }

  // Runs one op of every local rank as one op between hosts (host_op.h).
  std::vector<proto::DaemonToClient> run_ops(const LocalOps& local_ops) {
    const auto start = net::Clock::now();
    if (mesh_ == nullptr) {
      // The group is between generations: the ops fail at once, saying why.
      return replies(local_ops,
                     Status(generation_end_.code(),
                            "host " + std::to_string(rank_) + ": generation " +
                                std::to_string(assignment_.generation()) + " ended (" +
                                generation_end_.message() + "); the group is forming the next"),
                     Algorithm::ring, start);
    }
    engine::PeerMesh& mesh = *mesh_;
    engine::ExecuteOptions options;
    options.op_id = mesh.next_op_id();
    options.segment_bytes = config_.segment_bytes;
    options.spin = config_.spin;
    options.stall_timeout = config_.stall_timeout;
    options.abort = &abort_;
    OpShape shape;
    std::uint64_t table_bytes = 0;
    std::optional<GroupPlan> switched;
    Status status = table_gate_.admit(options.op_id, switched);
    if (switched) take_table_version(std::move(*switched), options.op_id);
    if (status.ok()) status = local_ops.missing;
    if (status.ok()) status = prepare_local_ops(local_ops, options, shape, table_bytes);
    if (!status.ok()) {
      engine::announce_failure(mesh, options, status);
    } else if (abort_.raised()) {
      status = abort_.reason();
    } else {
      std::vector<std::byte*> regions;
      for (const PendingOp& op : local_ops.ops) {
        regions.push_back(op.region ? op.region->data() : nullptr);
      }
      HostOp host_op(shape, options.descriptor.dtype, options.descriptor.op, layout_, rank_,
                     std::move(regions), staging_);
      host_op.gather();
      op_watch_.op_began(options.deadline.when());
      const auto began = net::Clock::now();
      status = engine::execute(
          build_schedule(host_op.between_hosts(), options.descriptor.algorithm, mesh.rank()),
          host_op.buffers(), mesh, options);
      const double between_hosts_us =
          std::chrono::duration<double, std::micro>(net::Clock::now() - began).count();
      op_watch_.op_ended();
      if (status.ok()) host_op.scatter();
      if (status.ok() && table_bytes > 0 && shape.collective == Collective::allreduce &&
          op_times_.record(table_bytes, options.descriptor.algorithm, between_hosts_us)) {
        asio::post(*control_io_, [this] { report_op_times(); });
      }
    }
    ++ops_served_;
    if (!status.ok()) {
      ++ops_failed_;
      spdlog::warn("host {}: op {} '{}' ({}) failed: {}", rank_, options.op_id,
                   local_ops.ops.front().op.name(), options.descriptor.to_string(),
                   status.to_string());
    }
    return replies(local_ops, status, options.descriptor.algorithm, start);
  }

  // Checks every local rank's op and that they are the same op; fills the op's options, its
  // shape (of every host's ranks) and the bytes the table chose its algorithm by.
  Status prepare_local_ops(const LocalOps& local_ops, engine::ExecuteOptions& options,
                           OpShape& shape, std::uint64_t& table_bytes) const {
    const int first = layout_.first_rank(rank_);
    for (std::size_t index = 0; index < local_ops.ops.size(); ++index) {
      const PendingOp& op = local_ops.ops[index];
      const std::string rank = "rank " + std::to_string(first + op.local_rank);
      engine::ExecuteOptions mine = options;
      Status status = prepare_op(op, layout_, plan_, config_.algorithm, mine, shape, table_bytes);
      if (!status.ok()) return Status(status.code(), rank + ": " + status.message());
      if (index == 0) {
        options = mine;
      } else if (mine.descriptor != options.descriptor) {
        return Status(ErrorCode::mismatch,
                      "rank " + std::to_string(first + local_ops.ops.front().local_rank) +
                          " submitted " + options.descriptor.to_string() + ", " + rank +
                          " submitted " + mine.descriptor.to_string());
      }
    }
    return {};
  }

  static std::vector<proto::DaemonToClient> replies(const LocalOps& local_ops, const Status& status,
                                                    Algorithm algorithm,
                                                    net::Clock::time_point start) {
    const double elapsed_us =
        std::chrono::duration<double, std::micro>(net::Clock::now() - start).count();
    std::vector<proto::DaemonToClient> replies(local_ops.ops.size());
    for (std::size_t index = 0; index < replies.size(); ++index) {
      proto::OpResult& result = *replies[index].mutable_result();
      result.set_request_id(local_ops.ops[index].op.request_id());
      to_proto(status, *result.mutable_status());
      result.set_algorithm(to_proto(algorithm));
      result.set_elapsed_us(elapsed_us);
    }
    return replies;
  }

  // On the op thread: `plan`, a new table version, runs from op `op_id` on.
  void take_table_version(GroupPlan plan, std::uint64_t op_id) {
    plan_ = std::move(plan);
    proto::GroupPlan message;
    to_proto(plan_, message);
    server_->new_plan(std::move(message));
    spdlog::info("worker rank {}: table version {} from op {} (client op {} of the generation): {}",
                 rank_, plan_.table_version, op_id, ops_served_ - ops_served_before_ + 1,
                 plan_.history.empty() ? std::string() : plan_.history.back().why);
  }

  const WorkerConfig config_;
  asio::io_context op_io_{1};
  std::uint64_t ops_served_ = 0;  // the op thread's own counts
  std::uint64_t ops_failed_ = 0;
  std::uint64_t ops_served_before_ = 0;  // ops_served_ when the generation began
  std::mutex stop_mutex_;
  bool stopping_ = false;
  std::optional<ControlChannel> channel_;  // the generation's; set and reset under stop_mutex_
  // Raised when the worker stops or the generation ends; lowered for the next generation.
  engine::AbortSignal abort_;
  // Of the generation the op thread serves (or, between generations, of the one that ended).
  proto::Assignment assignment_;
  std::unique_ptr<engine::PeerMesh> mesh_;  // null between generations
  GroupPlan plan_;
  HostLayout layout_;
  std::vector<std::byte> staging_;  // for ops between hosts that cannot run in a client's region
  int rank_ = -1;
  Status generation_end_;                 // why the last generation ended
  std::uint64_t channel_serial_ = 0;      // counts control channels, under stop_mutex_
  std::uint64_t left_serial_ = 0;         // the channel the watchdog left, under stop_mutex_
  std::uint64_t watched_serial_ = 0;      // the channel of the generation served, under stop_mutex_
  int watched_rank_ = -1;                 // this worker's rank in it, under stop_mutex_
  std::uint64_t watched_generation_ = 0;  // and the generation, under stop_mutex_
  OpThreadWatch op_watch_;
  TableGate table_gate_;                        // where a new table version takes effect
  OpTimes op_times_;                            // what auto's ops took, for the coordinator
  std::optional<asio::steady_timer> watchdog_;  // on the control thread, from the first generation
  std::uint64_t serving_serial_ = 0;    // the channel of the generation the op thread serves
  std::optional<ClientServer> server_;  // from the first generation on
  std::thread former_;                  // forms the next generation
  asio::io_context* control_io_ = nullptr;
  DataPort* data_port_ = nullptr;
  std::uint16_t data_port_number_ = 0;
  int exit_status_ = 0;
  std::chrono::steady_clock::time_point serving_since_;
  std::string challenge_;  // the coordinator's, and this worker's nonce, of its join
  std::string nonce_;
};

}  // namespace

int run_worker(const WorkerConfig& config) { return Worker(config).run(); }

}  // namespace gradsync::daemon
