// gradsync bench's command line (cli/bench_command.h), and the checks of it that need no daemon:
// each throws CLI::ValidationError naming the flag and what is wrong with it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collective/types.h"

namespace gradsync::cli {

// --collective's one choice that is not a collective: a send from rank 0 to rank 1 and its echo
// back (Client::send and receive), each row half the round trip, as MPI's ping-pong times it.
inline constexpr std::string_view kPingPong = "pingpong";

struct BenchOptions {
  std::string sockets;  // comma-separated, rank order; default: $GRADSYNC_SOCKETS
  std::string collective = "allreduce";
  int root = 0;
  std::string dtype = "f32";
  std::string op = "sum";
  std::string wire;  // empty: the values travel as the dtype
  std::string algorithm = "auto";
  std::string min_bytes = "4";
  std::string max_bytes = "64MiB";
  double step_factor = 4;
  int iters = 20;
  int small_iters = 0;  // 0: as many as iters
  int warmup = 5;
  std::string json_path;
  // Given (both or neither): the predicted column uses them instead of the group's measured plan.
  double alpha_us = 0;
  double beta_us_per_byte = 0;
  int connect_timeout_ms = 0;
  bool dry_run = false;
  bool copy = false;

  bool model_given = false;
};

// --min-bytes and --max-bytes, checked.
std::pair<std::uint64_t, std::uint64_t> size_range(const BenchOptions& options);

// --wire, checked against the collective, dtype and op; nullopt: the values travel as the dtype.
std::optional<DataType> wire_type(const BenchOptions& options, Collective collective, DataType type,
                                  ReduceOp op);

// The rows of each size for --algorithm (auto, all, or one algorithm that runs `collective`);
// nullopt is auto.
std::vector<std::optional<Algorithm>> algorithms_to_run(const std::string& algorithm,
                                                        Collective collective);

}  // namespace gradsync::cli
