#include "cli/prediction_table.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "collective/algorithms.h"

namespace gradsync::cli {

namespace {

// One decimal is below the model's own precision; more digits only make the table harder to read.
double rounded(double us) { return std::round(us * 10.0) / 10.0; }

}  // namespace

std::vector<PredictionRow> predict_allreduce(int ranks, const CostFunction& cost,
                                             const NetworkModel& network,
                                             const std::vector<std::uint64_t>& sizes,
                                             std::size_t element_size) {
  std::vector<PredictionRow> rows;
  for (std::uint64_t bytes : sizes) {
    const OpShape shape{Collective::allreduce, ranks, bytes / element_size, element_size};
    std::vector<Candidate> candidates = estimate_candidates(shape, cost, network);
    const Algorithm chosen = cheapest(candidates);
    rows.push_back({bytes, std::move(candidates), chosen});
  }
  return rows;
}

void print_prediction_table(const std::vector<PredictionRow>& rows) {
  std::printf("%14s", "bytes");
  for (Algorithm algorithm : algorithms_for(Collective::allreduce)) {
    std::printf("  %17s", std::string(name(algorithm)).c_str());
  }
  std::printf("  %s\n", "chosen");
  for (const PredictionRow& row : rows) {
    std::printf("%14llu", static_cast<unsigned long long>(row.bytes));
    for (const Candidate& candidate : row.candidates) {
      std::printf("  %16.1f%c", rounded(candidate.cost.time_us),
                  candidate.algorithm == row.chosen ? '*' : ' ');
    }
    std::printf("  %s\n", std::string(name(row.chosen)).c_str());
  }
}

nlohmann::ordered_json prediction_json(const std::vector<PredictionRow>& rows) {
  nlohmann::ordered_json entries = nlohmann::ordered_json::array();
  for (const PredictionRow& row : rows) {
    for (const Candidate& candidate : row.candidates) {
      entries.push_back({{"bytes", row.bytes},
                         {"algorithm", name(candidate.algorithm)},
                         {"predicted_us", rounded(candidate.cost.time_us)},
                         {"chosen", candidate.algorithm == row.chosen}});
    }
  }
  return entries;
}

}  // namespace gradsync::cli
