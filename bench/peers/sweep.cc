#include "sweep.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "cli/bench_report.h"
#include "cli/size_list.h"

namespace gradsync::peers {

namespace {

[[noreturn]] void usage(const std::string& program, const std::string& problem) {
  std::fprintf(stderr,
               "%s: %s\nusage: %s [--min-bytes N] [--max-bytes N] [--step-factor F] [--iters N] "
               "[--small-iters N] [--warmup N] [--json FILE] [--algorithm A] [--collective C] "
               "[--root R]\n",
               program.c_str(), problem.c_str(), program.c_str());
  std::exit(2);
}

std::vector<float> pattern(int rank, std::uint64_t count) {
  std::vector<float> values(count);
  for (std::uint64_t i = 0; i < count; ++i) {
    values[i] = static_cast<float>((static_cast<std::uint64_t>(rank) + i) % 4);
  }
  return values;
}

// The exact sum of every rank's pattern, computed once per size: the check after each op is then
// one memcmp, as cheap as gradsync bench's, so that neither side's checking steals more CPU from
// a rank still inside its op.
std::vector<float> exact_sum(std::uint64_t count, int world_size) {
  std::vector<float> sum(count, 0.0f);
  for (int rank = 0; rank < world_size; ++rank) {
    const std::vector<float> values = pattern(rank, count);
    for (std::uint64_t i = 0; i < count; ++i) sum[i] += values[i];
  }
  return sum;
}

}  // namespace

SweepOptions parse_sweep(int argc, char** argv, const std::string& program) {
  SweepOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (i + 1 >= argc) usage(program, "'" + std::string(flag) + "' needs a value");
    const std::string value = argv[++i];
    const auto size = cli::parse_size(value);
    if (flag == "--min-bytes" && size && *size > 0) {
      options.min_bytes = *size;
    } else if (flag == "--max-bytes" && size) {
      options.max_bytes = *size;
    } else if (flag == "--step-factor" && std::atof(value.c_str()) > 1.0) {
      options.step_factor = std::atof(value.c_str());
    } else if (flag == "--iters" && std::atoi(value.c_str()) > 0) {
      options.iters = std::atoi(value.c_str());
    } else if (flag == "--small-iters" && std::atoi(value.c_str()) > 0) {
      options.small_iters = std::atoi(value.c_str());
    } else if (flag == "--warmup" && std::atoi(value.c_str()) >= 0) {
      options.warmup = std::atoi(value.c_str());
    } else if (flag == "--json") {
      options.json_path = value;
    } else if (flag == "--algorithm") {
      options.algorithm = value;
    } else if (flag == "--collective") {
      options.collective = value;
    } else if (flag == "--root" && std::atoi(value.c_str()) >= 0) {
      options.root = std::atoi(value.c_str());
    } else {
      usage(program, "bad option '" + std::string(flag) + " " + value + "'");
    }
  }
  if (options.small_iters == 0) options.small_iters = options.iters;
  return options;
}

std::vector<std::uint64_t> sweep_counts(const SweepOptions& options) {
  std::vector<std::uint64_t> counts;
  for (double bytes = static_cast<double>(options.min_bytes);
       bytes <= static_cast<double>(options.max_bytes); bytes *= options.step_factor) {
    counts.push_back(std::max<std::uint64_t>(static_cast<std::uint64_t>(bytes) / 4, 1));
  }
  return counts;
}

RankTimes time_iterations(std::uint64_t count, int rank, int world_size,
                          const SweepOptions& options,
                          const std::function<void(float*, std::uint64_t)>& allreduce,
                          const std::function<void()>& barrier) {
  const std::vector<float> pristine = pattern(rank, count);
  const std::vector<float> expected = exact_sum(count, world_size);
  std::vector<float> data;
  const int timed =
      cli::timed_iterations(count * sizeof(float), options.iters, options.small_iters);
  RankTimes times;
  for (int iteration = 0; iteration < options.warmup + timed; ++iteration) {
    data = pristine;
    barrier();
    const double start = cli::wall_clock_us();
    allreduce(data.data(), count);
    const double stop = cli::wall_clock_us();
    if (iteration < options.warmup) continue;
    times.starts_us.push_back(start);
    times.stops_us.push_back(stop);
    if (std::memcmp(data.data(), expected.data(), count * sizeof(float)) != 0) ++times.wrong;
  }
  return times;
}

std::vector<double> span_reduction_input(const RankTimes& times) {
  std::vector<double> input = times.stops_us;
  for (const double start : times.starts_us) input.push_back(-start);
  input.push_back(times.wrong);
  return input;
}

std::vector<double> spans_of_reduction(const std::vector<double>& reduced, int& wrong) {
  const std::size_t iterations = (reduced.size() - 1) / 2;
  std::vector<double> spans;
  for (std::size_t i = 0; i < iterations; ++i)
    spans.push_back(reduced[i] + reduced[iterations + i]);
  wrong = static_cast<int>(reduced.back());
  return spans;
}

}  // namespace gradsync::peers
