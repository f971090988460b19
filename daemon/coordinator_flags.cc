// gradsyncd coordinator: its flags, and the configuration they make.
#include <cstdlib>

#include "collective/algorithms.h"
#include "collective/group_plan.h"
#include "config/cli_knobs.h"
#include "daemon/daemon_flags.h"

namespace gradsync::daemon {

namespace {

// --start-allreduce ALGORITHM:BYTES
StartAllreduce parse_start_allreduce(const std::string& text) {
  const auto colon = text.find(':');
  const auto algorithm = parse_algorithm(std::string_view(text).substr(0, colon));
  std::uint64_t bytes = 0;
  const char* digits = colon == std::string::npos ? nullptr : text.c_str() + colon + 1;
  char* end = nullptr;
  if (digits != nullptr && *digits >= '0' && *digits <= '9')
    bytes = std::strtoull(digits, &end, 10);
  if (!algorithm || !supports(Collective::allreduce, *algorithm) || end == nullptr ||
      *end != '\0' || bytes >= (1ull << 62)) {
    throw CLI::ValidationError("--start-allreduce",
                               "'" + text +
                                   "' is not ALGORITHM:BYTES with an all-reduce algorithm and a "
                                   "byte count below 2^62");
  }
  return {*algorithm, bytes};
}

}  // namespace

CoordinatorFlags::CoordinatorFlags(CLI::App& app)
    : command_(app.add_subcommand("coordinator", "Admit workers and assign ranks")) {
  command_->add_option("--listen", listen_, "HOST:PORT to listen on (port 0: any)")
      ->envname("GRADSYNC_LISTEN")
      ->required();
  command_->add_option("--world-size", world_size_, "Number of workers in the group")
      ->envname("GRADSYNC_WORLD_SIZE")
      ->required()
      ->check(CLI::Range(1, kMaxWorldSize));
  command_
      ->add_option("--min-workers", min_workers_,
                   "After a loss, a generation may form with this many workers (default: "
                   "--world-size, the group never shrinks); it grows again when workers join")
      ->envname("GRADSYNC_MIN_WORKERS")
      ->check(CLI::Range(1, kMaxWorldSize));
  command_->add_option("--ready-file", ready_file_, "Write the bound HOST:PORT here")
      ->envname("GRADSYNC_READY_FILE");
  alpha_option_ = config::add_network_model(*command_, alpha_us_, beta_us_per_byte_);
  config::add_knob(*command_, knobs::kHeartbeatTimeoutMs, heartbeat_timeout_ms_);
  trust_.add_to(*command_);
  config::add_knob(*command_, knobs::kCalibrationMs, calibration_ms_);
  config::add_knob(*command_, knobs::kExploreEvery, explore_every_);
  command_
      ->add_option("--start-allreduce", start_allreduce_,
                   "ALGORITHM:BYTES: the first table runs ALGORITHM for all-reduce from BYTES on, "
                   "whatever it measured (to watch the table correct itself)")
      ->envname("GRADSYNC_START_ALLREDUCE");
}

CoordinatorConfig CoordinatorFlags::config() const {
  CoordinatorConfig config;
  config.listen = parse_address("--listen", listen_);
  config.ready_file = ready_file_;
  config.membership.world_size = world_size_;
  if (min_workers_ > world_size_) {
    throw CLI::ValidationError("--min-workers", "is " + std::to_string(min_workers_) +
                                                    ", more than --world-size " +
                                                    std::to_string(world_size_));
  }
  config.membership.min_workers = min_workers_;
  config.membership.heartbeat_timeout = std::chrono::milliseconds(heartbeat_timeout_ms_);
  config.membership.calibration_budget = std::chrono::milliseconds(calibration_ms_);
  config.membership.explore_every = explore_every_;
  if (!start_allreduce_.empty()) {
    config.membership.start_allreduce = parse_start_allreduce(start_allreduce_);
  }
  if (alpha_option_->count() > 0) {
    config.membership.network = NetworkModel::uniform(alpha_us_, beta_us_per_byte_);
  }
  return config;
}

}  // namespace gradsync::daemon
