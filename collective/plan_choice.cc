#include "collective/plan_choice.h"

#include <cstdio>
#include <limits>
#include <vector>

#include "collective/algorithms.h"

namespace gradsync {

namespace {

// Candidates priced at `time_us` of their ranges, with the model's tie-breaker as cheapest() wants.
std::vector<Candidate> priced(const std::vector<Candidate>& tie_breakers,
                              const std::vector<PredictedRange>& ranges,
                              double PredictedRange::*time_us) {
  std::vector<Candidate> candidates = tie_breakers;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    candidates[i].cost = CostEstimate{};
    candidates[i].cost.time_us = ranges[i].*time_us;
  }
  return candidates;
}

std::string milliseconds(double time_us) {
  char text[32];
  std::snprintf(text, sizeof text, time_us >= 1000 ? "%.2f ms" : "%.0f us",
                time_us >= 1000 ? time_us / 1000 : time_us);
  return text;
}

std::string range_text(const PredictedRange& range) {
  if (range.low_us == range.high_us) return milliseconds(range.median_us);
  return milliseconds(range.median_us) + " (quartiles " + milliseconds(range.low_us) + " - " +
         milliseconds(range.high_us) + ")";
}

// The range where the model says `modelled_us` (only all-reduce is calibrated).
PredictedRange calibrated_range(const GroupPlan& plan, const OpShape& shape, Algorithm algorithm,
                                double modelled_us) {
  if (shape.collective != Collective::allreduce) return {modelled_us, modelled_us, modelled_us};
  const std::uint64_t bytes = shape.count * shape.element_size;
  return {calibrated_us(plan.calibration, algorithm, bytes, modelled_us, Quartile::low),
          calibrated_us(plan.calibration, algorithm, bytes, modelled_us, Quartile::median),
          calibrated_us(plan.calibration, algorithm, bytes, modelled_us, Quartile::high)};
}

// Where `algorithm` is among the candidates (it is: they are every algorithm that can run the op).
std::size_t index_of(const std::vector<Candidate>& candidates, Algorithm algorithm) {
  std::size_t i = 0;
  while (candidates[i].algorithm != algorithm) ++i;
  return i;
}

// Whether `algorithm` was calibrated at `bytes` or a larger size.
bool timed_at_or_beyond(const GroupPlan& plan, Algorithm algorithm, std::uint64_t bytes) {
  for (const CalibrationSample& sample : plan.calibration) {
    if (sample.algorithm == algorithm && sample.bytes >= bytes) return true;
  }
  return false;
}

// Whether `algorithm` is clear of `model_choice` at the sizes `algorithm` was calibrated at
// nearest below and above the shape's (where those are not the shape's own size).
bool clear_around(const GroupPlan& plan, const OpShape& shape, Algorithm algorithm,
                  Algorithm model_choice) {
  const std::uint64_t bytes = shape.count * shape.element_size;
  std::uint64_t below = 0;
  std::uint64_t above = std::numeric_limits<std::uint64_t>::max();
  for (const CalibrationSample& sample : plan.calibration) {
    if (sample.algorithm != algorithm) continue;
    if (sample.bytes <= bytes) below = std::max(below, sample.bytes);
    if (sample.bytes >= bytes) above = std::min(above, sample.bytes);
  }
  for (const std::uint64_t around : {below, above}) {
    if (around == bytes || around == 0 || around == std::numeric_limits<std::uint64_t>::max()) {
      continue;
    }
    const OpShape there{shape.collective, shape.world_size, around / shape.element_size,
                        shape.element_size};
    if (predicted_range(plan, there, algorithm).high_us >=
        predicted_range(plan, there, model_choice).low_us) {
      return false;
    }
  }
  return true;
}

// The model's choice against measurements: the model of the slowest link (cost_model.h: links
// probed one at a time are not the links of a busy op).
Algorithm slowest_link_choice(const std::vector<Candidate>& model) {
  std::vector<PredictedRange> slowest_link;
  for (const Candidate& candidate : model) {
    slowest_link.push_back({candidate.modelled_us, candidate.modelled_us, candidate.modelled_us});
  }
  return cheapest(priced(model, slowest_link, &PredictedRange::median_us));
}

// Where the measured medians put `fastest` ahead of the model's choice in `choice`: the fastest
// algorithm clear of the model's choice replaces it; if none is, `fastest` is named as overruled.
void weigh_measurements(const GroupPlan& plan, const OpShape& shape,
                        const std::vector<Candidate>& model,
                        const std::vector<PredictedRange>& ranges, Algorithm fastest,
                        AlgorithmChoice& choice) {
  // Of the algorithms clear of the model's choice, the fastest. Only measured times count as
  // evidence: beyond the largest size an algorithm was timed at, its prediction is an
  // extrapolation whose spread nobody measured (on loopback p = 8 the tree's, from 1 MiB, put it
  // 1.6x too fast at 4 MiB, and beyond).
  const std::uint64_t bytes = shape.count * shape.element_size;
  if (!timed_at_or_beyond(plan, choice.model_choice, bytes)) {
    choice.overruled = fastest;
    choice.overruled_predicted = ranges[index_of(model, fastest)];
    choice.beyond_timed_sizes = true;
    return;
  }
  // Between calibrated sizes the ranges are interpolated, over a factor of 16: the algorithm must
  // be clear of the model's choice at the calibrated sizes on either side too (on the emulated
  // LAN, p = 4, halving-doubling interpolated clear of the hypercube at 16 KiB from 4 and 64 KiB,
  // and ran 1.5x slower there).
  std::vector<Candidate> clear;
  std::vector<PredictedRange> clear_ranges;
  for (std::size_t i = 0; i < model.size(); ++i) {
    if (ranges[i].high_us < choice.model_predicted.low_us &&
        timed_at_or_beyond(plan, model[i].algorithm, bytes) &&
        clear_around(plan, shape, model[i].algorithm, choice.model_choice)) {
      clear.push_back(model[i]);
      clear_ranges.push_back(ranges[i]);
    }
  }
  if (clear.empty()) {
    choice.overruled = fastest;
    choice.overruled_predicted = ranges[index_of(model, fastest)];
    choice.beyond_timed_sizes = !timed_at_or_beyond(plan, fastest, bytes);
    return;
  }
  choice.algorithm = cheapest(priced(clear, clear_ranges, &PredictedRange::median_us));
  choice.basis = ChoiceBasis::measured;
  choice.predicted = ranges[index_of(model, choice.algorithm)];
}

}  // namespace

PredictedRange predicted_range(const GroupPlan& plan, const OpShape& shape, Algorithm algorithm) {
  return calibrated_range(plan, shape, algorithm,
                          estimate_cost(shape, algorithm, plan.network).time_us);
}

AlgorithmChoice choose_algorithm(const GroupPlan& plan, const OpShape& shape) {
  // Each estimate once: at p = 1024 an estimate builds a thousand schedules.
  const std::vector<Candidate> model = estimate_candidates(
      shape,
      [&plan](const OpShape& op, Algorithm algorithm) {
        return estimate_cost(op, algorithm, plan.network).time_us;
      },
      plan.network);
  std::vector<PredictedRange> ranges;
  for (const Candidate& candidate : model) {
    ranges.push_back(calibrated_range(plan, shape, candidate.algorithm, candidate.cost.time_us));
  }
  AlgorithmChoice choice;
  if (shape.collective != Collective::allreduce || plan.calibration.empty()) {
    // Nothing measured: the model alone, link by link.
    choice.algorithm = choice.model_choice = cheapest(model);
    choice.predicted = choice.model_predicted = ranges[index_of(model, choice.algorithm)];
    return choice;
  }
  choice.model_choice = slowest_link_choice(model);
  choice.model_predicted = ranges[index_of(model, choice.model_choice)];
  choice.algorithm = choice.model_choice;
  choice.predicted = choice.model_predicted;
  const Algorithm fastest = cheapest(priced(model, ranges, &PredictedRange::median_us));
  if (fastest != choice.model_choice)
    weigh_measurements(plan, shape, model, ranges, fastest, choice);
  return choice;
}

std::string explain(const AlgorithmChoice& choice) {
  const std::string chosen =
      std::string(name(choice.algorithm)) + " " + range_text(choice.predicted);
  if (choice.basis == ChoiceBasis::measured) {
    return "measured: " + chosen + " is clear of the model's choice, " +
           std::string(name(choice.model_choice)) + " " + range_text(choice.model_predicted);
  }
  if (!choice.overruled) return "model: " + chosen;
  return "model: " + chosen + "; " + std::string(name(*choice.overruled)) + " " +
         range_text(choice.overruled_predicted) +
         (choice.beyond_timed_sizes
              ? " predicted faster, beyond the sizes timed"
              : " measured faster, within the spread here or at the sizes timed around");
}

AlgorithmTable build_table(const GroupPlan& plan) {
  return AlgorithmTable::build(plan.world_size, [&plan](const OpShape& shape) {
    return choose_algorithm(plan, shape).algorithm;
  });
}

int size_log2(std::uint64_t bytes) {
  int log2 = 0;
  while (bytes > 1) {
    bytes >>= 1;
    ++log2;
  }
  return log2;
}

Algorithm algorithm_for_op(const GroupPlan& plan, Collective collective, std::uint64_t bytes,
                           std::uint64_t op_id) {
  if (collective == Collective::allreduce && !plan.trials.empty()) {
    const int bucket = size_log2(bytes);
    std::uint64_t salt = 0;
    for (const TableTrial& trial : plan.trials) {
      ++salt;
      if (trial.size_log2 != bucket) continue;
      // splitmix64: op ids are consecutive, and a training step's ops repeat with its period.
      std::uint64_t mixed = op_id * 0x9e3779b97f4a7c15ull + salt;
      mixed = (mixed ^ (mixed >> 30)) * 0xbf58476d1ce4e5b9ull;
      mixed = (mixed ^ (mixed >> 27)) * 0x94d049bb133111ebull;
      mixed ^= mixed >> 31;
      if (mixed % static_cast<std::uint64_t>(trial.every) == 0) return trial.algorithm;
    }
  }
  return plan.table.lookup(collective, bytes);
}

}  // namespace gradsync
