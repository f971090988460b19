#include "daemon/op_thread.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <asio/post.hpp>

#include "net/cpu_affinity.h"
#include "proto/convert.h"

namespace gradsync::daemon {

namespace {

// Local rank 0's hello in generation `assignment` of `layout`, spinning `spin` on op queues.
proto::DaemonHello hello_for(const proto::Assignment& assignment, const HostLayout& layout,
                             std::chrono::microseconds spin) {
  proto::DaemonHello hello;
  hello.set_rank(layout.first_rank(assignment.rank()));
  hello.set_world_size(layout.world_size());
  hello.set_local_ranks(layout.local_ranks(assignment.rank()));
  hello.set_host(assignment.rank());
  hello.set_hosts(layout.hosts());
  hello.set_generation(assignment.generation());
  for (const int cpu : net::allowed_cpus()) hello.add_cpus(cpu);
  hello.set_spin_us(static_cast<std::int32_t>(spin.count()));
  return hello;
}

}  // namespace

OpThread::OpThread(const WorkerConfig& config, asio::io_context& op_io, WorkerShared shared)
    : config_(config),
      op_io_(op_io),
      shared_(shared),
      lifecycle_(LifecycleConfig{config.rejoin, config.coordinator_timeout}),
      runner_(
          config, shared.abort, shared.watch, shared.table_gate, shared.op_times,
          [this](proto::GroupPlan plan) { server_->new_plan(std::move(plan)); },
          [this] {
            asio::post(shared_.control_io,
                       [this] { shared_.link.report_op_times(shared_.op_times); });
          },
          [this](std::vector<engine::MessageDone> done) {
            asio::post(op_io_, [this, done = std::move(done)] {
              if (server_) server_->messages_done(done);
            });
          }) {}

void OpThread::channel_lost(std::uint64_t channel) {
  asio::post(op_io_, [this, channel] { on_channel_lost(channel); });
}

void OpThread::ping() {
  asio::post(op_io_, [this] { shared_.watch.alive(); });
}

int OpThread::run(Generation first, net::UniqueFd client_listener, GenerationFormer& former) {
  former_ = &former;
  serving_since_ = std::chrono::steady_clock::now();
  ServerHooks hooks;
  hooks.run = [this](const LocalOps& ops) { return runner_.run(ops); };
  hooks.stream_ended = [this](const engine::OpKey& stream, const Status& why) {
    runner_.stream_ended(stream, why);
  };
  hooks.status = [this] { return describe_self(); };
  hooks.post_message = [this](engine::PostedMessage message) {
    runner_.post_message(std::move(message));
  };
  hooks.client_left = [this](const engine::OpKey& stream, int rank, const std::string& why) {
    runner_.client_left(stream, rank, why);
  };
  server_.emplace(op_io_, std::move(client_listener), config_.clients,
                  hello_for(first.assignment, first.layout, config_.spin), first.plan_message,
                  std::move(hooks));
  install(std::move(first));
  op_io_.run();
  former.wait();
  server_.reset();
  former_ = nullptr;
  ::unlink(config_.socket_path.c_str());
  spdlog::info("worker rank {}: {}", runner_.rank(), shared_.abort.reason().message());
  return exit_status_;
}

void OpThread::install(Generation formed) {
  lifecycle_.formed(formed.assignment, formed.channel);
  proto::GroupPlan plan_message = std::move(formed.plan_message);
  const std::uint64_t channel = formed.channel;
  runner_.install(formed);
  server_->new_generation(hello(), std::move(plan_message));
  spdlog::info("worker rank {}: serving clients on {} (generation {})", runner_.rank(),
               config_.socket_path, runner_.assignment().generation());
  serve_channel(channel);
}

void OpThread::serve_channel(std::uint64_t channel) {
  const proto::Assignment& served = runner_.assignment();
  const bool lost = shared_.link.serve(channel, served.rank(), served.generation(),
                                       static_cast<int>(served.world_size()));
  if (lost || shared_.abort.raised()) on_channel_lost(channel);
}

void OpThread::on_channel_lost(std::uint64_t channel) {
  LossFacts facts;
  facts.stopping = shared_.link.stopping();
  facts.aborted = shared_.abort.raised();
  facts.table_unsettled = shared_.table_gate.unsettled();
  take(lifecycle_.channel_lost(channel, facts, std::chrono::steady_clock::now()));
}

void OpThread::take(const LifecycleStep& step) {
  switch (step.kind) {
    case LifecycleStep::Kind::none:
      return;
    case LifecycleStep::Kind::end_generation:
      if (!step.raise.ok()) shared_.abort.raise(step.raise);
      end_generation();
      return;
    case LifecycleStep::Kind::reattach:
      spdlog::warn(
          "worker rank {}: lost the coordinator; generation {} runs on while it is found "
          "again (for up to {} ms)",
          step.running.rank(), step.running.generation(), config_.coordinator_timeout.count());
      former_->reattach_beside(step.running, net::Deadline(step.deadline),
                               [this](std::optional<std::uint64_t> channel) {
                                 asio::post(op_io_, [this, channel] {
                                   if (channel) {
                                     lifecycle_.taken_back(*channel);
                                     serve_channel(*channel);
                                   } else {
                                     take(lifecycle_.not_taken_back(shared_.link.stopping()));
                                   }
                                 });
                               });
      return;
    case LifecycleStep::Kind::form_next:
      spdlog::warn("worker rank {}: generation {} ended ({}); joining the next", runner_.rank(),
                   runner_.assignment().generation(), shared_.abort.reason().message());
      former_->form_beside(step.previous_rank,
                           [this](const Status& status, std::shared_ptr<Generation> formed) {
                             asio::post(op_io_, [this, status, formed] {
                               if (status.ok()) {
                                 install(std::move(*formed));
                               } else {
                                 take(lifecycle_.formation_failed(status));
                               }
                             });
                           });
      return;
    case LifecycleStep::Kind::exit:
      exit(step.failure);
      return;
  }
}

void OpThread::end_generation() {
  const Status why = shared_.abort.reason();
  runner_.end(why);
  server_->generation_ended();
  take(lifecycle_.ended(why));
}

void OpThread::exit(const std::string& failure) {
  exit_status_ = shared_.link.exit_status(failure);
  op_io_.stop();
}

proto::DaemonHello OpThread::hello() const {
  return hello_for(runner_.assignment(), runner_.layout(), config_.spin);
}

proto::DaemonStatus OpThread::describe_self() const {
  proto::DaemonStatus status;
  const proto::Assignment& assignment = runner_.assignment();
  status.set_rank(assignment.rank());
  status.set_world_size(assignment.world_size());
  status.set_generation(assignment.generation());
  *status.mutable_peers() = assignment.peers();
  status.set_ops_served(runner_.ops_served());
  status.set_ops_failed(runner_.ops_failed());
  std::chrono::steady_clock::duration heartbeat_age{};
  to_proto(shared_.link.state(heartbeat_age), *status.mutable_coordinator());
  status.set_heartbeat_age_ms(std::chrono::duration<double, std::milli>(heartbeat_age).count());
  status.set_uptime_s(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - serving_since_).count());
  return status;
}

}  // namespace gradsync::daemon
