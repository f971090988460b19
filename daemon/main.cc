// gradsyncd: the coordinator and the worker daemon, one binary with two subcommands. Every flag
// also reads a GRADSYNC_* environment variable; the knobs other processes share come from the
// knob table (config/knobs.h), and the start-up log line and --dry-run print what was parsed.
#include <google/protobuf/stubs/logging.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <string>
#include <vector>

#include "collective/algorithms.h"
#include "collective/group_plan.h"
#include "config/cli_knobs.h"
#include "daemon/coordinator.h"
#include "daemon/worker.h"
#include "net/cpu_affinity.h"
#include "net/group_secret.h"

namespace {

using gradsync::Status;
using gradsync::config::add_knob;
namespace knobs = gradsync::knobs;

gradsync::net::HostPort parse_address(const std::string& flag, const std::string& text) {
  gradsync::net::HostPort address;
  if (Status status = gradsync::net::parse_host_port(text, address); !status.ok()) {
    throw CLI::ValidationError(flag, status.message());
  }
  return address;
}

// --start-allreduce ALGORITHM:BYTES
gradsync::daemon::StartAllreduce parse_start_allreduce(const std::string& text) {
  const auto colon = text.find(':');
  const auto algorithm = gradsync::parse_algorithm(std::string_view(text).substr(0, colon));
  std::uint64_t bytes = 0;
  const char* digits = colon == std::string::npos ? nullptr : text.c_str() + colon + 1;
  char* end = nullptr;
  if (digits != nullptr && *digits >= '0' && *digits <= '9')
    bytes = std::strtoull(digits, &end, 10);
  if (!algorithm || !gradsync::supports(gradsync::Collective::allreduce, *algorithm) ||
      end == nullptr || *end != '\0' || bytes >= (1ull << 62)) {
    throw CLI::ValidationError("--start-allreduce",
                               "'" + text +
                                   "' is not ALGORITHM:BYTES with an all-reduce algorithm and a "
                                   "byte count below 2^62");
  }
  return {*algorithm, bytes};
}

void bind_to_cpus(const std::string& flag, const std::string& text) {
  std::vector<int> cpus;
  Status status = gradsync::net::parse_cpu_list(text, cpus);
  if (status.ok()) status = gradsync::net::bind_thread_to_cpus(cpus);
  if (!status.ok()) throw CLI::ValidationError(flag, status.message());
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// The group secret of a daemon that listens on `listen`. Without one, it may listen only on
// loopback, unless the user says --insecure: anyone who reaches the port could join the group.
gradsync::net::GroupSecret group_secret(const std::string& path,
                                        const gradsync::net::HostPort& listen, bool insecure) {
  gradsync::net::GroupSecret secret;
  if (!path.empty()) {
    std::string warning;
    if (Status status = gradsync::net::GroupSecret::load(path, secret, warning); !status.ok()) {
      throw CLI::ValidationError(std::string(knobs::kSecretFile.flag), status.message());
    }
    if (!warning.empty()) spdlog::warn("{}", warning);
  } else if (!is_loopback(listen.host)) {
    if (!insecure) {
      throw CLI::ValidationError(
          "--listen", listen.host +
                          " is not a loopback address and there is no group secret: make one "
                          "(head -c 32 /dev/urandom | base64 > FILE; chmod 600 FILE) and give "
                          "every coordinator and worker of the group --secret-file FILE, or pass "
                          "--insecure to let anyone who reaches the port in");
    }
    spdlog::warn(
        "--insecure: listening on {} without a group secret; anyone who reaches the "
        "port may join the group and read its tensors",
        listen.host);
  }
  return secret;
}

// Protobuf logs every string field that is not UTF-8 on stderr before the parse fails, so a
// hostile client could fill the log with one line per message. The daemon reports the failed parse
// itself (and drops its sender); protobuf's own lines go to the debug level.
void quiet_protobuf_logs() {
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel, const char* file, int line, const std::string& message) {
        spdlog::debug("protobuf {}:{}: {}", file, line, message);
      });
}

}  // namespace

int main(int argc, char** argv) {
  quiet_protobuf_logs();
  CLI::App app{"gradsyncd: the gradsync coordinator and worker daemon"};
  app.require_subcommand(1);
  bool dry_run = false;
  app.add_flag("--dry-run", dry_run,
               "Check the configuration (flags and GRADSYNC_* variables), log it and exit")
      ->envname("GRADSYNC_DRY_RUN");

  std::string listen;
  int world_size = 0;
  std::string ready_file;
  double alpha_us = 0;
  double beta_us_per_byte = 0;
  int heartbeat_timeout_ms = 0;
  int calibration_ms = 0;
  std::string secret_file;
  bool insecure = false;
  CLI::App* coordinator = app.add_subcommand("coordinator", "Admit workers and assign ranks");
  coordinator->add_option("--listen", listen, "HOST:PORT to listen on (port 0: any)")
      ->envname("GRADSYNC_LISTEN")
      ->required();
  coordinator->add_option("--world-size", world_size, "Number of workers in the group")
      ->envname("GRADSYNC_WORLD_SIZE")
      ->required()
      ->check(CLI::Range(1, gradsync::kMaxWorldSize));
  int min_workers = 0;
  coordinator
      ->add_option("--min-workers", min_workers,
                   "After a loss, a generation may form with this many workers (default: "
                   "--world-size, the group never shrinks); it grows again when workers join")
      ->envname("GRADSYNC_MIN_WORKERS")
      ->check(CLI::Range(1, gradsync::kMaxWorldSize));
  coordinator->add_option("--ready-file", ready_file, "Write the bound HOST:PORT here")
      ->envname("GRADSYNC_READY_FILE");
  CLI::Option* alpha_option =
      coordinator
          ->add_option("--alpha-us", alpha_us,
                       "Latency per message (us) for the algorithm table, instead of measuring "
                       "(with --beta-us-per-byte)")
          ->envname("GRADSYNC_ALPHA_US")
          ->check(CLI::PositiveNumber);
  coordinator
      ->add_option("--beta-us-per-byte", beta_us_per_byte,
                   "Time per byte (us) for the algorithm table, instead of measuring (with "
                   "--alpha-us)")
      ->envname("GRADSYNC_BETA_US_PER_BYTE")
      ->check(CLI::PositiveNumber)
      ->needs(alpha_option);
  alpha_option->needs("--beta-us-per-byte");
  add_knob(*coordinator, knobs::kHeartbeatTimeoutMs, heartbeat_timeout_ms);
  add_knob(*coordinator, knobs::kSecretFile, secret_file);
  const std::string insecure_help =
      "Listen on a non-loopback address without a group secret (anyone who reaches the port may "
      "join)";
  coordinator->add_flag("--insecure", insecure, insecure_help)->envname("GRADSYNC_INSECURE");
  add_knob(*coordinator, knobs::kCalibrationMs, calibration_ms);
  int explore_every = 0;
  add_knob(*coordinator, knobs::kExploreEvery, explore_every);
  std::string start_allreduce;
  coordinator
      ->add_option("--start-allreduce", start_allreduce,
                   "ALGORITHM:BYTES: the first table runs ALGORITHM for all-reduce from BYTES on, "
                   "whatever it measured (to watch the table correct itself)")
      ->envname("GRADSYNC_START_ALLREDUCE");

  std::string coordinator_address;
  std::string advertise;
  std::string socket_path;
  int rank = -1;
  std::string algorithm = "auto";
  std::size_t segment_bytes = 0;
  int join_timeout_ms = 0;
  int coordinator_timeout_ms = 0;
  bool no_rejoin = false;
  int spin_us = 0;
  int stall_timeout_ms = 0;
  int client_uid = 0;
  int client_gid = 0;
  int local_ranks = 0;
  std::string cpus;
  CLI::App* worker = app.add_subcommand("worker", "Run collectives for local clients");
  worker->add_option("--coordinator", coordinator_address, "The coordinator's HOST:PORT")
      ->envname("GRADSYNC_COORDINATOR")
      ->required();
  worker->add_option("--listen", listen, "HOST:PORT for data connections (port 0: any)")
      ->envname("GRADSYNC_LISTEN")
      ->required();
  worker
      ->add_option("--advertise", advertise,
                   "Host other workers reach this one at (default: the local address of the "
                   "connection to the coordinator)")
      ->envname("GRADSYNC_ADVERTISE");
  worker->add_option("--socket", socket_path, "Unix socket for local clients")
      ->envname("GRADSYNC_SOCKET")
      ->required();
  worker->add_option("--rank", rank, "Ask for this rank (-1: any)")
      ->envname("GRADSYNC_RANK")
      ->capture_default_str()
      ->check(CLI::Range(-1, gradsync::kMaxWorldSize - 1));
  worker->add_option("--algorithm", algorithm, "Force an algorithm for ops that ask for auto")
      ->envname("GRADSYNC_ALGORITHM")
      ->check(CLI::IsMember(gradsync::config::algorithm_choices({"auto"})))
      ->capture_default_str();
  add_knob(*worker, knobs::kSegmentBytes, segment_bytes);
  add_knob(*worker, knobs::kSpinUs, spin_us);
  add_knob(*worker, knobs::kStallTimeoutMs, stall_timeout_ms);
  add_knob(*worker, knobs::kClientUid, client_uid);
  add_knob(*worker, knobs::kClientGid, client_gid);
  add_knob(*worker, knobs::kLocalRanks, local_ranks);
  add_knob(*worker, knobs::kSecretFile, secret_file);
  worker->add_flag("--insecure", insecure, insecure_help)->envname("GRADSYNC_INSECURE");
  worker
      ->add_option("--cpus", cpus,
                   "Run only on these CPUs, as taskset lists them (e.g. 0 or 0-3,6; default: "
                   "any); local clients can bind beside them")
      ->envname("GRADSYNC_CPUS");
  add_knob(*worker, knobs::kJoinTimeoutMs, join_timeout_ms);
  add_knob(*worker, knobs::kCoordinatorTimeoutMs, coordinator_timeout_ms);
  worker
      ->add_flag("--no-rejoin", no_rejoin,
                 "Exit (status 2) when the group's generation ends, instead of joining the next "
                 "one; for a supervisor that restarts workers itself")
      ->envname("GRADSYNC_NO_REJOIN");

  try {
    app.parse(argc, argv);
    if (coordinator->parsed()) {
      gradsync::daemon::CoordinatorConfig config;
      config.listen = parse_address("--listen", listen);
      config.ready_file = ready_file;
      config.membership.world_size = world_size;
      if (min_workers > world_size) {
        throw CLI::ValidationError("--min-workers", "is " + std::to_string(min_workers) +
                                                        ", more than --world-size " +
                                                        std::to_string(world_size));
      }
      config.membership.min_workers = min_workers;
      config.membership.heartbeat_timeout = std::chrono::milliseconds(heartbeat_timeout_ms);
      config.membership.calibration_budget = std::chrono::milliseconds(calibration_ms);
      config.membership.explore_every = explore_every;
      if (!start_allreduce.empty()) {
        config.membership.start_allreduce = parse_start_allreduce(start_allreduce);
      }
      if (alpha_option->count() > 0) {
        config.membership.network = gradsync::NetworkModel::uniform(alpha_us, beta_us_per_byte);
      }
      spdlog::set_pattern("[%H:%M:%S.%e] [coordinator] [%l] %v");
      spdlog::info("{}", gradsync::config::describe_options(*coordinator));
      config.membership.secret = group_secret(secret_file, config.listen, insecure);
      if (dry_run) return 0;
      return gradsync::daemon::run_coordinator(config);
    }
    gradsync::daemon::WorkerConfig config;
    config.coordinator = parse_address("--coordinator", coordinator_address);
    config.listen = parse_address("--listen", listen);
    config.advertise_host = advertise;
    config.socket_path = socket_path;
    config.requested_rank = rank;
    config.algorithm = gradsync::parse_algorithm(algorithm);
    config.segment_bytes = segment_bytes;
    config.join_timeout = std::chrono::milliseconds(join_timeout_ms);
    config.coordinator_timeout = std::chrono::milliseconds(coordinator_timeout_ms);
    config.rejoin = !no_rejoin;
    config.spin = std::chrono::microseconds(spin_us);
    config.stall_timeout = std::chrono::milliseconds(stall_timeout_ms);
    config.clients = {client_uid, client_gid};
    config.local_ranks = local_ranks;
    // Before any thread starts, so that every thread of the worker inherits the binding.
    if (!cpus.empty()) bind_to_cpus("--cpus", cpus);
    spdlog::set_pattern("[%H:%M:%S.%e] [worker " + socket_path + "] [%l] %v");
    spdlog::info("{} (running on CPUs {})", gradsync::config::describe_options(*worker),
                 gradsync::net::format_cpu_list(gradsync::net::allowed_cpus()));
    config.secret = group_secret(secret_file, config.listen, insecure);
    if (dry_run) return 0;
    return gradsync::daemon::run_worker(config);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  }
}
