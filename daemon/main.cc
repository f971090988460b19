// gradsyncd: the coordinator and the worker daemon, one binary with two subcommands. Every flag
// also reads a GRADSYNC_* environment variable (daemon/daemon_flags.h), and the start-up log line
// and --dry-run print what was parsed.
#include <google/protobuf/stubs/logging.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <string>

#include "config/cli_knobs.h"
#include "daemon/daemon_flags.h"
#include "net/cpu_affinity.h"

namespace {

// Protobuf logs every string field that is not UTF-8 on stderr before the parse fails, so a
// hostile client could fill the log with one line per message. The daemon reports the failed parse
// itself (and drops its sender); protobuf's own lines go to the debug level.
void quiet_protobuf_logs() {
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel, const char* file, int line, const std::string& message) {
        spdlog::debug("protobuf {}:{}: {}", file, line, message);
      });
}

int run_coordinator(const gradsync::daemon::CoordinatorFlags& flags, bool dry_run) {
  gradsync::daemon::CoordinatorConfig config = flags.config();
  spdlog::set_pattern("[%H:%M:%S.%e] [coordinator] [%l] %v");
  spdlog::info("{}", gradsync::config::describe_options(flags.command()));
  config.membership.secret = flags.secret(config.listen);
  if (dry_run) return 0;
  return gradsync::daemon::run_coordinator(config);
}

int run_worker(const gradsync::daemon::WorkerFlags& flags, bool dry_run) {
  gradsync::daemon::WorkerConfig config = flags.config();
  flags.bind_to_cpus();
  spdlog::set_pattern("[%H:%M:%S.%e] [worker " + config.socket_path + "] [%l] %v");
  spdlog::info("{} (running on CPUs {})", gradsync::config::describe_options(flags.command()),
               gradsync::net::format_cpu_list(gradsync::net::allowed_cpus()));
  config.secret = flags.secret(config.listen);
  if (dry_run) return 0;
  return gradsync::daemon::run_worker(config);
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
  gradsync::daemon::CoordinatorFlags coordinator(app);
  gradsync::daemon::WorkerFlags worker(app);
  try {
    app.parse(argc, argv);
    if (coordinator.command().parsed()) return run_coordinator(coordinator, dry_run);
    return run_worker(worker, dry_run);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  }
}
