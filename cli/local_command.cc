#include "cli/local_command.h"

#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/local_cluster.h"
#include "config/cli_knobs.h"

namespace gradsync::cli {

namespace {

struct LocalOptions {
  LocalClusterOptions cluster;
  int local_ranks = knobs::kLocalRanks.default_value;  // every worker's
  std::vector<std::string> command;
};

std::string joined(const std::vector<std::string>& parts) {
  std::string text;
  for (const std::string& part : parts) text += (text.empty() ? "" : ",") + part;
  return text;
}

int run_local(const LocalOptions& options) {
  // Ctrl-C reaches the command (same process group); this process waits for it, then cleans up.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigprocmask(SIG_BLOCK, &signals, nullptr);

  std::unique_ptr<LocalCluster> cluster;
  LocalClusterOptions cluster_options = options.cluster;
  cluster_options.local_ranks.assign(cluster_options.workers, options.local_ranks);
  if (Status status = LocalCluster::start(cluster_options, cluster); !status.ok()) {
    std::fprintf(stderr, "gradsync local: %s\n", status.message().c_str());
    return 1;
  }
  const std::vector<std::string> by_rank = cluster->rank_sockets();
  for (std::size_t rank = 0; rank < by_rank.size(); ++rank) {
    std::printf("rank %zu: %s\n", rank, by_rank[rank].c_str());
  }
  std::fflush(stdout);
  const std::string sockets = "GRADSYNC_SOCKETS=" + joined(by_rank);
  if (options.command.empty()) {
    std::printf("gradsync local: %d workers ready (%d ranks); export %s (and GRADSYNC_JOB, one "
                "name per run, for a job of several processes); Ctrl-C stops them\n",
                options.cluster.workers, static_cast<int>(by_rank.size()), sockets.c_str());
    std::fflush(stdout);
    int received = 0;
    sigwait(&signals, &received);
    return 0;
  }
  // The command is one job, whatever processes it starts; a job named by the caller stays its.
  std::vector<std::string> environment{sockets};
  if (const char* job = std::getenv("GRADSYNC_JOB"); job == nullptr || *job == '\0') {
    environment.push_back("GRADSYNC_JOB=local " + std::to_string(::getpid()) + " at " +
                          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count()));
  }
  ChildProcess command = ChildProcess::start(options.command, "", environment);
  return command.wait();
}

}  // namespace

void add_local_command(CLI::App& app, std::function<int()>& action) {
  auto options = std::make_shared<LocalOptions>();
  CLI::App* command = app.add_subcommand(
      "local", "Start a coordinator and N workers on loopback; run CMD with GRADSYNC_SOCKETS set");
  command->add_option("--workers,-n,--hosts", options->cluster.workers, "Number of workers")
      ->required()
      ->check(CLI::Range(1, 64));
  command
      ->add_option(std::string(knobs::kLocalRanks.flag) + ",--ranks-per-host", options->local_ranks,
                   std::string(knobs::kLocalRanks.help) +
                       "; each worker serves this many (GRADSYNC_SOCKETS lists its socket once "
                       "for each)")
      ->check(CLI::Range(knobs::kLocalRanks.min, knobs::kLocalRanks.max));
  command
      ->add_option("--algorithm", options->cluster.algorithm,
                   "Force an algorithm for every op that asks for auto")
      ->check(CLI::IsMember(config::algorithm_choices({})));
  // The workers' own knobs, given on to them; unset, the workers' defaults hold, except the spin,
  // which follows the rule in spin_us_for().
  command
      ->add_option(std::string(knobs::kSegmentBytes.flag), options->cluster.segment_bytes,
                   std::string(knobs::kSegmentBytes.help) + " of the workers")
      ->check(CLI::Range(knobs::kSegmentBytes.min, knobs::kSegmentBytes.max));
  command
      ->add_option(std::string(knobs::kSpinUs.flag), options->cluster.spin_us,
                   std::string(knobs::kSpinUs.help) +
                       " (default: " + std::to_string(kSpinUsWithOwnCpu) +
                       " while every worker can have a CPU of its own, else 0)")
      ->check(CLI::Range(knobs::kSpinUs.min, knobs::kSpinUs.max));
  command->add_flag("!--no-bind-cpus", options->cluster.bind_cpus,
                    "Let the workers run on any CPU (default: worker r on CPU r mod the number of "
                    "CPUs, its bench thread beside it)");
  command->add_flag("--verbose", options->cluster.verbose, "Show the daemons' logs");
  command->add_option("command", options->command, "CMD ARGS... (after --)");
  command->positionals_at_end();
  command->callback([options, &action] { action = [options] { return run_local(*options); }; });
}

}  // namespace gradsync::cli
