#include "cli/plan_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/connect_clients.h"
#include "cli/prediction_table.h"
#include "cli/size_list.h"
#include "client/full_plan.h"
#include "collective/plan_choice.h"
#include "config/cli_knobs.h"

namespace gradsync::cli {

namespace {

struct PlanOptions {
  std::string sockets;
  std::string sizes_text;  // empty: 4 B to 1 GiB, every factor of 4
  bool json = false;
  int connect_timeout_ms = 0;
};

// Why the table runs what it does from `threshold` on: the rule of plan_choice.h at its first size.
std::string why(const GroupPlan& plan, const Threshold& threshold) {
  const AlgorithmChoice choice =
      choose_algorithm(plan, table_shape(threshold.collective, plan.world_size,
                                         std::max<std::uint64_t>(threshold.min_bytes, 4)));
  std::string text = explain(choice);
  if (choice.algorithm != threshold.algorithm) {
    text += " [the table runs " + std::string(name(threshold.algorithm)) + "]";
  }
  return text;
}

double gigabytes_per_second(double beta_us_per_byte) {
  return beta_us_per_byte > 0 ? 1e-3 / beta_us_per_byte : 0.0;
}

// The first line: the group, its generation, and whether its model was measured.
void print_header(const GroupPlan& plan) {
  const HostLayout layout = host_layout(plan);
  std::printf("group of %d (%s), generation %llu: %s\n", layout.world_size(),
              layout.describe().c_str(), static_cast<unsigned long long>(plan.generation),
              plan.measured
                  ? ("measured by the workers; probing took " +
                     std::to_string(static_cast<int>(plan.probe_ms + 0.5)) + " ms, calibration " +
                     std::to_string(static_cast<int>(plan.calibration_ms + 0.5)) + " ms")
                        .c_str()
                  : "a model given to the coordinator, not measured");
}

// A matrix of links where they were measured one by one, else the one link every pair shares.
void print_links(const GroupPlan& plan) {
  if (!plan.network.per_link()) {
    std::printf("\nevery link: alpha %g us, beta %g us/byte (%.3g GB/s)\n", plan.network.alpha_us,
                plan.network.beta_us_per_byte, gigabytes_per_second(plan.network.beta_us_per_byte));
    return;
  }
  std::printf("\nlinks: alpha (us) / beta as GB/s, from the row's rank to the column's\n%6s", "");
  for (int to = 0; to < plan.world_size; ++to) std::printf("  %15d", to);
  std::printf("\n");
  for (int from = 0; from < plan.world_size; ++from) {
    std::printf("%6d", from);
    for (int to = 0; to < plan.world_size; ++to) {
      if (from == to) {
        std::printf("  %15s", "-");
        continue;
      }
      const LinkCost link = plan.network.link(from, to);
      char cell[32];
      std::snprintf(cell, sizeof cell, "%.1f / %.3g", link.alpha_us,
                    gigabytes_per_second(link.beta_us_per_byte));
      std::printf("  %15s", cell);
    }
    std::printf("\n");
  }
}

void print_gamma(const GroupPlan& plan) {
  if (plan.gamma_us_per_byte.empty()) return;
  std::printf("\ngamma, reduce (f32 sum) per byte:");
  for (std::size_t rank = 0; rank < plan.gamma_us_per_byte.size(); ++rank) {
    std::printf("  rank %zu %.3g us (%.3g GB/s)", rank, plan.gamma_us_per_byte[rank],
                gigabytes_per_second(plan.gamma_us_per_byte[rank]));
  }
  std::printf("\n");
}

void print_calibration(const GroupPlan& plan) {
  if (plan.calibration.empty()) return;
  std::printf(
      "\ncalibration: real all-reduce ops (median of the slowest rank's time, us) beside the "
      "model's "
      "latency and transfer terms\n");
  std::printf("%14s  %17s  %12s  %25s  %12s  %12s  %8s\n", "bytes", "algorithm", "measured",
              "quartiles (repetitions)", "latency", "transfer", "ratio");
  for (const CalibrationSample& sample : plan.calibration) {
    char quartiles[64];
    std::snprintf(quartiles, sizeof quartiles, "%.1f-%.1f (%d)", sample.low_us, sample.high_us,
                  sample.repetitions);
    std::printf("%14llu  %17s  %12.1f  %25s  %12.1f  %12.1f  %8.2f\n",
                static_cast<unsigned long long>(sample.bytes),
                std::string(name(sample.algorithm)).c_str(), sample.measured_us, quartiles,
                sample.modelled_latency_us, sample.modelled_transfer_us,
                sample.measured_us / sample.modelled_us());
  }
}

// The algorithm table with why each entry, its version and changes, and the trials exploring it.
void print_table(const GroupPlan& plan) {
  std::printf(
      "\nalgorithm table (what auto runs, by bytes per rank), and why: the model's order, unless a "
      "measurement is faster by more than its spread (its upper quartile below the lower quartile "
      "of the model's choice)\n");
  for (const Threshold& threshold : plan.table.thresholds()) {
    std::printf("%s >= %llu B: %s\n    %s\n", std::string(name(threshold.collective)).c_str(),
                static_cast<unsigned long long>(threshold.min_bytes),
                std::string(name(threshold.algorithm)).c_str(), why(plan, threshold).c_str());
  }
  std::printf("\ntable version %llu", static_cast<unsigned long long>(plan.table_version));
  std::printf(plan.history.empty() ? ", as the group formed\n" : "; its changes:\n");
  for (const TableChange& change : plan.history) {
    std::printf("  version %llu from op %llu: %s\n",
                static_cast<unsigned long long>(change.version),
                static_cast<unsigned long long>(change.from_op), change.why.c_str());
  }
  for (const TableTrial& trial : plan.trials) {
    std::printf("  exploring: %s for all-reduce of %llu B and up to twice that, 1 op in %d\n",
                std::string(name(trial.algorithm)).c_str(), 1ull << trial.size_log2, trial.every);
  }
}

void print_plan(const GroupPlan& plan, const std::vector<PredictionRow>& rows) {
  print_header(plan);
  print_links(plan);
  print_gamma(plan);
  print_calibration(plan);
  print_table(plan);
  std::printf(
      "\npredicted all-reduce time in us (f32): the calibrated measurements, the model beyond "
      "them; * marks what auto runs\n");
  print_prediction_table(rows);
}

nlohmann::ordered_json plan_json(const GroupPlan& plan, const std::vector<PredictionRow>& rows) {
  nlohmann::ordered_json links = nlohmann::ordered_json::array();
  for (int from = 0; from < plan.world_size; ++from) {
    for (int to = 0; to < plan.world_size; ++to) {
      if (from == to) continue;
      const LinkCost link = plan.network.link(from, to);
      links.push_back({{"from", from},
                       {"to", to},
                       {"alpha_us", link.alpha_us},
                       {"beta_us_per_byte", link.beta_us_per_byte}});
    }
  }
  nlohmann::ordered_json table = nlohmann::ordered_json::array();
  for (const Threshold& threshold : plan.table.thresholds()) {
    table.push_back({{"collective", name(threshold.collective)},
                     {"min_bytes", threshold.min_bytes},
                     {"algorithm", name(threshold.algorithm)},
                     {"why", why(plan, threshold)}});
  }
  nlohmann::ordered_json calibration = nlohmann::ordered_json::array();
  for (const CalibrationSample& sample : plan.calibration) {
    calibration.push_back({{"algorithm", name(sample.algorithm)},
                           {"bytes", sample.bytes},
                           {"measured_us", sample.measured_us},
                           {"modelled_latency_us", sample.modelled_latency_us},
                           {"modelled_transfer_us", sample.modelled_transfer_us},
                           {"low_us", sample.low_us},
                           {"high_us", sample.high_us},
                           {"repetitions", sample.repetitions}});
  }
  nlohmann::ordered_json history = nlohmann::ordered_json::array();
  for (const TableChange& change : plan.history) {
    history.push_back(
        {{"version", change.version}, {"from_op", change.from_op}, {"why", change.why}});
  }
  nlohmann::ordered_json trials = nlohmann::ordered_json::array();
  for (const TableTrial& trial : plan.trials) {
    trials.push_back({{"algorithm", name(trial.algorithm)},
                      {"min_bytes", 1ull << trial.size_log2},
                      {"every", trial.every}});
  }
  return {{"generation", plan.generation},
          {"world_size", host_layout(plan).world_size()},
          {"hosts", plan.world_size},
          {"local_ranks", host_layout(plan).by_host()},
          {"measured", plan.measured},
          {"probe_ms", plan.probe_ms},
          {"calibration_ms", plan.calibration_ms},
          {"links", links},
          {"gamma_us_per_byte", plan.gamma_us_per_byte},
          {"calibration", calibration},
          {"table", table},
          {"table_version", plan.table_version},
          {"history", history},
          {"trials", trials},
          {"predictions", prediction_json(rows)}};
}

int run_plan(const PlanOptions& options) {
  std::vector<std::uint64_t> sizes;
  if (options.sizes_text.empty()) {
    for (std::uint64_t bytes = 4; bytes <= (1ull << 30); bytes *= 4) sizes.push_back(bytes);
  } else {
    std::string error;
    const auto parsed = parse_size_list(options.sizes_text, error);
    if (!parsed) throw CLI::ValidationError("--sizes", error);
    for (std::uint64_t bytes : *parsed) {
      if (bytes % 4 != 0) {
        throw CLI::ValidationError(
            "--sizes", std::to_string(bytes) + " bytes is not a whole number of f32 elements");
      }
    }
    sizes = *parsed;
  }
  const std::vector<std::string> paths = socket_paths(options.sockets, "--sockets");
  std::vector<GroupPlan> plans;
  try {
    for (Client& client :
         connect_clients(paths, std::chrono::milliseconds(options.connect_timeout_ms))) {
      plans.push_back(full_plan(client));
    }
  } catch (const ClientError& failure) {
    std::fprintf(stderr, "gradsync plan: %s\n", failure.what());
    return 1;
  }
  // Every rank must hold the same plan, or ranks could pick different algorithms for one op.
  for (std::size_t i = 1; i < plans.size(); ++i) {
    if (!(plans[i] == plans.front())) {
      std::fprintf(stderr, "gradsync plan: the daemons at %s and %s hold different plans\n",
                   paths.front().c_str(), paths[i].c_str());
      return 1;
    }
  }
  const GroupPlan& plan = plans.front();
  std::vector<PredictionRow> rows = predict_allreduce(
      plan.world_size,
      [&plan](const OpShape& shape, Algorithm algorithm) {
        return predicted_us(plan, shape, algorithm);
      },
      plan.network, sizes, 4);
  for (PredictionRow& row : rows) row.chosen = plan.table.lookup(Collective::allreduce, row.bytes);
  if (options.json) {
    std::cout << plan_json(plan, rows).dump(2) << "\n";
  } else {
    print_plan(plan, rows);
    if (plans.size() > 1) std::printf("\nthe same plan on all %zu daemons asked\n", plans.size());
  }
  return 0;
}

}  // namespace

void add_plan_command(CLI::App& app, std::function<int()>& action) {
  auto options = std::make_shared<PlanOptions>();
  CLI::App* command = app.add_subcommand(
      "plan", "Show the group's measured network, its algorithm table and predicted times");
  command
      ->add_option("--sockets", options->sockets,
                   "Daemon sockets to ask, comma-separated; all must hold the same plan "
                   "(gradsync local sets GRADSYNC_SOCKETS)")
      ->envname("GRADSYNC_SOCKETS");
  command->add_option("--sizes", options->sizes_text,
                      "Comma-separated all-reduce sizes in bytes (default 4 B to 1 GiB, x4)");
  command->add_flag("--json", options->json, "Print one JSON object");
  config::add_knob(*command, knobs::kConnectTimeoutMs, options->connect_timeout_ms);
  command->callback([options, &action] { action = [options] { return run_plan(*options); }; });
}

}  // namespace gradsync::cli
