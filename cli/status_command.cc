#include "cli/status_command.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/connect_clients.h"
#include "config/cli_knobs.h"

namespace gradsync::cli {

namespace {

struct StatusOptions {
  std::string sockets;
  bool json = false;
  int connect_timeout_ms = 0;
};

nlohmann::json status_json(const DaemonStatus& status) {
  return {{"rank", status.rank},
          {"world_size", status.world_size},
          {"generation", status.generation},
          {"data_address", status.data_addresses.at(status.rank)},
          {"clients", status.clients},
          {"job", status.job},
          {"submitter_pid", status.submitter_pid},
          {"ops_served", status.ops_served},
          {"ops_failed", status.ops_failed},
          {"heartbeat_age_ms", status.heartbeat_age_ms},
          {"coordinator", status.coordinator.ok() ? "connected" : status.coordinator.to_string()},
          {"uptime_s", status.uptime_s}};
}

void print_table(const std::vector<DaemonStatus>& statuses) {
  const DaemonStatus& first = statuses.front();
  std::printf("group of %d, generation %llu; %zu of its daemons asked\n", first.world_size,
              static_cast<unsigned long long>(first.generation), statuses.size());
  std::printf("%4s  %-24s %7s %10s %10s %8s %12s  %-12s %s\n", "rank", "data address", "clients",
              "submitter", "ops", "failed", "heartbeat", "coordinator", "job");
  for (const DaemonStatus& status : statuses) {
    const std::string submitter =
        status.submitter_pid > 0 ? "pid " + std::to_string(status.submitter_pid) : "-";
    const std::string heartbeat =
        std::to_string(static_cast<long long>(status.heartbeat_age_ms + 0.5)) + " ms ago";
    std::printf("%4d  %-24s %7d %10s %10llu %8llu %12s  %-12s %s\n", status.rank,
                status.data_addresses.at(status.rank).c_str(), status.clients, submitter.c_str(),
                static_cast<unsigned long long>(status.ops_served),
                static_cast<unsigned long long>(status.ops_failed), heartbeat.c_str(),
                status.coordinator.ok() ? "connected" : status.coordinator.to_string().c_str(),
                status.job.empty() ? "-" : status.job.c_str());
  }
}

int run_status(const StatusOptions& options) {
  const std::vector<std::string> paths = socket_paths(options.sockets, "--sockets");
  std::vector<DaemonStatus> statuses;
  try {
    for (Client& client :
         connect_clients(paths, std::chrono::milliseconds(options.connect_timeout_ms))) {
      statuses.push_back(client.status());
    }
  } catch (const ClientError& failure) {
    std::fprintf(stderr, "gradsync status: %s\n", failure.what());
    return 1;
  }
  if (options.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const DaemonStatus& status : statuses) rows.push_back(status_json(status));
    std::cout << rows.dump(2) << "\n";
  } else {
    print_table(statuses);
  }
  return 0;
}

}  // namespace

void add_status_command(CLI::App& app, std::function<int()>& action) {
  auto options = std::make_shared<StatusOptions>();
  CLI::App* command =
      app.add_subcommand("status", "Show each daemon's rank, address, clients, ops and heartbeat");
  command
      ->add_option("--sockets", options->sockets,
                   "Daemon sockets to ask, comma-separated (gradsync local sets GRADSYNC_SOCKETS)")
      ->envname("GRADSYNC_SOCKETS");
  command->add_flag("--json", options->json, "Print a JSON array, one object per daemon");
  config::add_knob(*command, knobs::kConnectTimeoutMs, options->connect_timeout_ms);
  command->callback([options, &action] { action = [options] { return run_status(*options); }; });
}

}  // namespace gradsync::cli
