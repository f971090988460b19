// The α-β-γ cost model (docs/architecture.md §9), read off schedules.
//
// A round costs, on each rank, α per message plus β per byte, taking the larger of what the rank
// sends and what it receives (links are full duplex), plus γ per byte it reduces; the round lasts
// as long as its slowest rank, and an op as long as its rounds added up. Where links were measured
// one by one, each message pays its own link's α and β, and a rank's messages add up (they share
// its network interface), so one slow link slows exactly the rounds that use it. The closed forms
// of docs/architecture.md §3.2 are kept beside it for documentation and as a cross-check: where a
// closed form is exact, the two agree.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "collective/schedule.h"
#include "collective/types.h"

namespace gradsync {

// One direction of a link between two ranks.
struct LinkCost {
  double alpha_us = 0;          // latency per message
  double beta_us_per_byte = 0;  // time per byte
  friend bool operator==(const LinkCost&, const LinkCost&) = default;
};

struct NetworkModel {
  // Latency per message and time per byte on every link `links` does not cover; a measured
  // network sets them to its slowest link's.
  double alpha_us = 0;
  double beta_us_per_byte = 0;
  double gamma_us_per_byte = 0;  // time per byte reduced (on every rank)
  // Measured links, from * world_size + to; empty: every link costs alpha_us and beta_us_per_byte.
  int world_size = 0;
  std::vector<LinkCost> links;

  // A network whose links all cost the same.
  static NetworkModel uniform(double alpha_us, double beta_us_per_byte,
                              double gamma_us_per_byte = 0);
  bool per_link() const { return !links.empty(); }
  LinkCost link(int from, int to) const;
  friend bool operator==(const NetworkModel&, const NetworkModel&) = default;
};

struct CostEstimate {
  double time_us = 0;      // latency_us + transfer_us
  double latency_us = 0;   // the α terms on the critical path
  double transfer_us = 0;  // the β and γ terms on the critical path
  int rounds = 0;
  std::uint64_t max_bytes_sent = 0;  // by the busiest rank, over the whole op
};

// Builds every rank's schedule for `shape` and reads the cost off them. A per-link `network` must
// be of `shape.world_size` ranks.
CostEstimate estimate_cost(const OpShape& shape, Algorithm algorithm, const NetworkModel& network);

struct Candidate {
  Algorithm algorithm;
  CostEstimate cost;
  double modelled_us = 0;  // the α-β-γ model's time alone, which breaks ties
};

// Every algorithm that can run the op, with its estimate, in the order of algorithms_for().
std::vector<Candidate> estimate_candidates(const OpShape& shape, const NetworkModel& network);

// The predicted time of an op of `shape` run with `algorithm` (the model's, or a plan's).
using CostFunction = std::function<double(const OpShape& shape, Algorithm algorithm)>;

// Every algorithm that can run the op, with `cost`'s time (only) and, to break its ties, the model
// time on a network whose every link costs what `network`'s slowest does, in the order of
// algorithms_for(). Not the per-link model: links are probed one at a time, so pairs that share a
// CPU probe faster than they run once every rank is busy, and ties broken by it chose badly
// (docs/benchmarks/BENCHMARKS-EXPERIMENTS.md, "Figures behind rules in the code").
std::vector<Candidate> estimate_candidates(const OpShape& shape, const CostFunction& cost,
                                           const NetworkModel& network);

// Predictions closer than this are a tie: calibration measures with about this much noise, and
// on both test networks the earlier algorithm of such a pair was never the slower one by more
// (docs/benchmarks/BENCHMARKS-EXPERIMENTS.md, "Figures behind rules in the code").
inline constexpr double kTieTolerance = 0.05;

// Of the candidates within kTieTolerance of the least estimated time, the one the model alone
// prefers; where the model's times too are within kTieTolerance, the first in the order of
// algorithms_for(). Calibration measures what the model cannot see but cannot separate close
// candidates; the model still knows rounds and bytes (a calibrated tie between a tree and the ring,
// or between halving-doubling and the hypercube at small sizes, hid a real difference: see
// docs/benchmarks/BENCHMARKS-EXPERIMENTS.md, "Figures behind rules in the code"). The ring and
// halving-doubling move the same bytes, and their model times differ by a few latencies: at large
// sizes that is a tie.
Algorithm cheapest(const std::vector<Candidate>& candidates);

Algorithm choose_algorithm(const OpShape& shape, const NetworkModel& network);

// docs/architecture.md §3.2's formulas for p ranks and n bytes per rank (for all-to-all: bytes per
// destination). Non-power-of-two p pays the fold's two extra rounds of α + βn in hypercube and
// halving_doubling.
double closed_form_time_us(Collective collective, Algorithm algorithm, int world_size, double bytes,
                           const NetworkModel& network);

}  // namespace gradsync
