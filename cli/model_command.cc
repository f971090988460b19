#include "cli/model_command.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/prediction_table.h"
#include "cli/size_list.h"
#include "collective/cost_model.h"
#include "config/cli_knobs.h"

namespace gradsync::cli {

namespace {

struct ModelOptions {
  int ranks = 0;
  double alpha_us = 0;
  double beta_us_per_byte = 0;
  std::string sizes_text;
  std::string dtype_text = "f32";
  bool json = false;
};

void print_header(const ModelOptions& options) {
  std::printf("all-reduce, p = %d, alpha = %g us, beta = %g us/byte (%.3g GB/s), %s\n",
              options.ranks, options.alpha_us, options.beta_us_per_byte,
              options.beta_us_per_byte > 0 ? 1e-3 / options.beta_us_per_byte : INFINITY,
              options.dtype_text.c_str());
  std::printf("predicted time in us; * marks the algorithm the model chooses\n\n");
}

int run_model(const ModelOptions& options) {
  const DataType type = *parse_data_type(options.dtype_text);
  const std::size_t size = element_size(type);
  std::string error;
  const auto sizes = parse_size_list(options.sizes_text, error);
  if (!sizes) throw CLI::ValidationError("--sizes", error);
  for (std::uint64_t bytes : *sizes) {
    if (bytes % size != 0) {
      throw CLI::ValidationError("--sizes", std::to_string(bytes) +
                                                " bytes is not a whole number of " +
                                                options.dtype_text + " elements (" +
                                                std::to_string(size) + " bytes each)");
    }
  }
  const NetworkModel network = NetworkModel::uniform(options.alpha_us, options.beta_us_per_byte);
  const std::vector<PredictionRow> rows = predict_allreduce(
      options.ranks,
      [&network](const OpShape& shape, Algorithm algorithm) {
        return estimate_cost(shape, algorithm, network).time_us;
      },
      network, *sizes, size);
  if (options.json) {
    std::cout << prediction_json(rows).dump(2) << "\n";
  } else {
    print_header(options);
    print_prediction_table(rows);
  }
  return 0;
}

}  // namespace

void add_model_command(CLI::App& app, std::function<int()>& action) {
  auto options = std::make_shared<ModelOptions>();
  CLI::App* command = app.add_subcommand(
      "model", "Print the alpha-beta model's predicted all-reduce time of every algorithm");
  command->add_option("--ranks,-p", options->ranks, "Number of ranks")
      ->required()
      ->check(CLI::Range(1, 4096));
  config::add_network_model(*command, options->alpha_us, options->beta_us_per_byte)->required();
  command
      ->add_option("--sizes", options->sizes_text,
                   "Comma-separated message sizes in bytes, e.g. 1000,64KiB,4MiB")
      ->required();
  command->add_option("--dtype", options->dtype_text, "Element type: f32 f64 f16 bf16 i32 i64 u8")
      ->check(CLI::IsMember(config::names_of(kAllDataTypes)));
  command->add_flag("--json", options->json,
                    "Print a JSON array, one object per (size, algorithm)");
  command->callback([options, &action] { action = [options] { return run_model(*options); }; });
}

}  // namespace gradsync::cli
