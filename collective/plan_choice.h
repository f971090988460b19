// How auto picks an algorithm from the group's plan (docs/architecture.md §9), and why.
//
// The model decides, unless a measurement clearly says otherwise. The model knows rounds and bytes
// (the hypercube moves log₂p·n bytes per rank, the ring 2n(p−1)/p) but not what a host adds; a
// calibration measures that, with noise: one descheduled rank can double a small op's time, and on
// a busy host a whole group's measurements can rank two close algorithms either way. So a
// measured prediction replaces the model's choice only where it is faster by more than its own
// spread: the faster algorithm's upper quartile lies below the lower quartile of the model's
// choice (calibration.h interpolates the quartiles between calibrated sizes as it does the
// medians), both were timed at this size or a larger one (an extrapolation is no evidence), and
// it is clear at the calibrated sizes on either side as well (nor is a long interpolation).
// Otherwise the model's order stands, and the same host gives the same table from one group to
// the next. Against measurements, the model is that of the slowest link (cost_model.h says why).
#pragma once

#include <optional>
#include <string>

#include "collective/algorithm_table.h"
#include "collective/group_plan.h"

namespace gradsync {

// A predicted time and its spread (low and high are the median where nothing was measured).
struct PredictedRange {
  double low_us = 0;
  double median_us = 0;
  double high_us = 0;
};

PredictedRange predicted_range(const GroupPlan& plan, const OpShape& shape, Algorithm algorithm);

enum class ChoiceBasis {
  model,     // the model's choice; measurements agree or do not separate it from the others
  measured,  // a measured prediction faster than the model's choice by more than its spread
};

struct AlgorithmChoice {
  Algorithm algorithm = Algorithm::ring;
  ChoiceBasis basis = ChoiceBasis::model;
  PredictedRange predicted;  // of `algorithm`
  // The model's own choice and its prediction (`algorithm` where the basis is the model).
  Algorithm model_choice = Algorithm::ring;
  PredictedRange model_predicted;
  // Where the basis is the model: the algorithm with the least predicted median, if that is
  // another, which the spread did not let win, or which was not timed at this size or beyond.
  std::optional<Algorithm> overruled;
  PredictedRange overruled_predicted;
  bool beyond_timed_sizes = false;
};

AlgorithmChoice choose_algorithm(const GroupPlan& plan, const OpShape& shape);

// One line on why: "model: ring 1.2 ms (measured 1.1-1.3), ..." (for gradsync plan).
std::string explain(const AlgorithmChoice& choice);

// The algorithm table of choose_algorithm() (algorithm_table.h).
AlgorithmTable build_table(const GroupPlan& plan);

// The size bucket of `bytes`: floor(log2(bytes)), 0 for 0 and 1.
int size_log2(std::uint64_t bytes);

// What auto runs for op `op_id` of `collective` with `bytes` on the wire: the plan's table, or a
// trial of the plan (one op in its `every`, picked by a hash of the op id, which every rank of the
// op shares, so every rank picks the same).
Algorithm algorithm_for_op(const GroupPlan& plan, Collective collective, std::uint64_t bytes,
                           std::uint64_t op_id);

}  // namespace gradsync
