// The cost model's predicted all-reduce time of every algorithm for a list of sizes, and which one
// is chosen: `gradsync model` (a network given on the command line) and `gradsync plan` (the
// group's measured network and its algorithm table) print the same table.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "collective/cost_model.h"

namespace gradsync::cli {

struct PredictionRow {
  std::uint64_t bytes = 0;
  std::vector<Candidate> candidates;
  Algorithm chosen = Algorithm::tree;  // the cheapest candidate unless the caller says otherwise
};

// Sizes must be whole numbers of elements of `element_size` bytes.
// `network` breaks ties as cheapest() says.
std::vector<PredictionRow> predict_allreduce(int ranks, const CostFunction& cost,
                                             const NetworkModel& network,
                                             const std::vector<std::uint64_t>& sizes,
                                             std::size_t element_size);

// Time in µs per algorithm, one row per size; * marks the chosen one.
void print_prediction_table(const std::vector<PredictionRow>& rows);

// One object per (size, algorithm):
// {"bytes": 1000, "algorithm": "ring", "predicted_us": 2520.2, "chosen": false}.
nlohmann::ordered_json prediction_json(const std::vector<PredictionRow>& rows);

}  // namespace gradsync::cli
