// gradsyncd worker: its flags, and the configuration they make.
#include "collective/group_plan.h"
#include "config/cli_knobs.h"
#include "daemon/daemon_flags.h"
#include "net/cpu_affinity.h"

namespace gradsync::daemon {

WorkerFlags::WorkerFlags(CLI::App& app)
    : command_(app.add_subcommand("worker", "Run collectives for local clients")) {
  command_->add_option("--coordinator", coordinator_, "The coordinator's HOST:PORT")
      ->envname("GRADSYNC_COORDINATOR")
      ->required();
  command_->add_option("--listen", listen_, "HOST:PORT for data connections (port 0: any)")
      ->envname("GRADSYNC_LISTEN")
      ->required();
  command_
      ->add_option("--advertise", advertise_,
                   "Host other workers reach this one at (default: the local address of the "
                   "connection to the coordinator)")
      ->envname("GRADSYNC_ADVERTISE");
  command_->add_option("--socket", socket_path_, "Unix socket for local clients")
      ->envname("GRADSYNC_SOCKET")
      ->required();
  command_->add_option("--rank", rank_, "Ask for this rank (-1: any)")
      ->envname("GRADSYNC_RANK")
      ->capture_default_str()
      ->check(CLI::Range(-1, kMaxWorldSize - 1));
  command_->add_option("--algorithm", algorithm_, "Force an algorithm for ops that ask for auto")
      ->envname("GRADSYNC_ALGORITHM")
      ->check(CLI::IsMember(config::algorithm_choices({"auto"})))
      ->capture_default_str();
  config::add_knob(*command_, knobs::kSegmentBytes, segment_bytes_);
  config::add_knob(*command_, knobs::kSpinUs, spin_us_);
  config::add_knob(*command_, knobs::kStallTimeoutMs, stall_timeout_ms_);
  config::add_knob(*command_, knobs::kClientUid, client_uid_);
  config::add_knob(*command_, knobs::kClientGid, client_gid_);
  config::add_knob(*command_, knobs::kLocalRanks, local_ranks_);
  trust_.add_to(*command_);
  command_
      ->add_option("--cpus", cpus_,
                   "Run only on these CPUs, as taskset lists them (e.g. 0 or 0-3,6; default: "
                   "any); local clients can bind beside them")
      ->envname("GRADSYNC_CPUS");
  config::add_knob(*command_, knobs::kJoinTimeoutMs, join_timeout_ms_);
  config::add_knob(*command_, knobs::kCoordinatorTimeoutMs, coordinator_timeout_ms_);
  command_
      ->add_flag("--no-rejoin", no_rejoin_,
                 "Exit (status 2) when the group's generation ends, instead of joining the next "
                 "one; for a supervisor that restarts workers itself")
      ->envname("GRADSYNC_NO_REJOIN");
}

WorkerConfig WorkerFlags::config() const {
  WorkerConfig config;
  config.coordinator = parse_address("--coordinator", coordinator_);
  config.listen = parse_address("--listen", listen_);
  config.advertise_host = advertise_;
  config.socket_path = socket_path_;
  config.requested_rank = rank_;
  config.algorithm = parse_algorithm(algorithm_);
  config.segment_bytes = segment_bytes_;
  config.join_timeout = std::chrono::milliseconds(join_timeout_ms_);
  config.coordinator_timeout = std::chrono::milliseconds(coordinator_timeout_ms_);
  config.rejoin = !no_rejoin_;
  config.spin = std::chrono::microseconds(spin_us_);
  config.stall_timeout = std::chrono::milliseconds(stall_timeout_ms_);
  config.clients = {client_uid_, client_gid_};
  config.local_ranks = local_ranks_;
  return config;
}

void WorkerFlags::bind_to_cpus() const {
  if (cpus_.empty()) return;
  std::vector<int> cpus;
  Status status = net::parse_cpu_list(cpus_, cpus);
  if (status.ok()) status = net::bind_thread_to_cpus(cpus);
  if (!status.ok()) throw CLI::ValidationError("--cpus", status.message());
}

}  // namespace gradsync::daemon
