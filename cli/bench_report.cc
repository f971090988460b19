#include "cli/bench_report.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace gradsync::cli {

double wall_clock_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::vector<double> op_spans(const std::vector<std::vector<double>>& starts,
                             const std::vector<std::vector<double>>& stops) {
  std::vector<double> spans;
  for (std::size_t iteration = 0; !starts.empty() && iteration < starts[0].size(); ++iteration) {
    double first_start = starts[0][iteration];
    double last_stop = stops[0][iteration];
    for (std::size_t rank = 1; rank < starts.size(); ++rank) {
      first_start = std::min(first_start, starts[rank][iteration]);
      last_stop = std::max(last_stop, stops[rank][iteration]);
    }
    spans.push_back(last_stop - first_start);
  }
  return spans;
}

double bus_factor(Collective collective, int world_size) {
  const double p = world_size;
  switch (collective) {
    case Collective::allreduce:
      return 2 * (p - 1) / p;
    case Collective::broadcast:
    case Collective::reduce:
      return 1;
    default:
      return (p - 1) / p;
  }
}

BenchRow make_row(std::uint64_t bytes, std::uint64_t count, std::string algorithm, double time_us,
                  int world_size, Collective collective) {
  BenchRow row;
  row.bytes = bytes;
  row.count = count;
  row.algorithm = std::move(algorithm);
  row.time_us = time_us;
  row.algbw = time_us > 0 ? static_cast<double>(bytes) / time_us / 1e3 : 0;
  row.busbw = row.algbw * bus_factor(collective, world_size);
  return row;
}

int timed_iterations(std::uint64_t bytes, int iters, int small_iters) {
  return bytes <= kSmallRowMaxBytes ? small_iters : iters;
}

void print_bench_table(const BenchSetup& setup, const std::vector<BenchRow>& rows) {
  std::string iterations = std::to_string(setup.iters) + " iterations";
  if (setup.small_iters != setup.iters) {
    iterations += " (" + std::to_string(setup.small_iters) + " up to " +
                  std::to_string(kSmallRowMaxBytes >> 10) + " KiB)";
  }
  const std::string wire = setup.wire.empty() ? "" : " sent as " + setup.wire;
  std::printf(
      "# %s: %s, %d ranks, %s %s%s, %s after %d warm-up; time is the median, from the first "
      "rank's start to the last rank's end\n",
      setup.system.c_str(), setup.collective.c_str(), setup.world_size, setup.dtype.c_str(),
      setup.op.c_str(), wire.c_str(), iterations.c_str(), setup.warmup);
  if (!setup.note.empty()) std::printf("# %s\n", setup.note.c_str());
  const bool errors = !setup.wire.empty();
  std::printf("%12s %12s %6s %6s %-24s %12s %8s %8s %12s %7s%s\n", "size(B)", "count", "type",
              "redop", "algorithm", "time(us)", "algbw", "busbw", "predicted", "#wrong",
              errors ? "      error" : "");
  for (const BenchRow& row : rows) {
    char predicted[32] = "-";
    if (row.predicted_us >= 0) std::snprintf(predicted, sizeof predicted, "%.1f", row.predicted_us);
    char error[32] = "";
    if (errors) std::snprintf(error, sizeof error, " %10.3g", row.error);
    std::printf("%12llu %12llu %6s %6s %-24s %12.1f %8.3f %8.3f %12s %7d%s\n",
                static_cast<unsigned long long>(row.bytes),
                static_cast<unsigned long long>(row.count), setup.dtype.c_str(), setup.op.c_str(),
                row.algorithm.c_str(), row.time_us, row.algbw, row.busbw, predicted, row.wrong,
                error);
  }
  std::fflush(stdout);
}

void write_bench_json(const std::string& path, const BenchSetup& setup,
                      const std::vector<BenchRow>& rows) {
  nlohmann::ordered_json entries = nlohmann::ordered_json::array();
  for (const BenchRow& row : rows) {
    nlohmann::ordered_json entry = {{"system", setup.system},
                                    {"collective", setup.collective},
                                    {"ranks", setup.world_size},
                                    {"bytes", row.bytes},
                                    {"count", row.count},
                                    {"dtype", setup.dtype},
                                    {"op", setup.op},
                                    {"algorithm", row.algorithm},
                                    {"time_us", row.time_us},
                                    {"algbw_gbps", row.algbw},
                                    {"busbw_gbps", row.busbw},
                                    {"wrong", row.wrong},
                                    {"iterations", row.iterations}};
    if (row.predicted_us >= 0) entry["predicted_us"] = row.predicted_us;
    if (!setup.wire.empty()) entry["wire"] = setup.wire;
    if (row.error >= 0) {
      entry["error"] = row.error;
      entry["error_bound"] = setup.error_bound;
    }
    entries.push_back(std::move(entry));
  }
  std::ofstream(path) << entries.dump(2) << "\n";
}

double median(std::vector<double>& values) {
  if (values.empty()) return 0;
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

}  // namespace gradsync::cli
