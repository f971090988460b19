#include "cli/bench_options.h"

#include <CLI/CLI.hpp>

#include "cli/size_list.h"
#include "collective/algorithms.h"
#include "collective/wire_type.h"

namespace gradsync::cli {

std::pair<std::uint64_t, std::uint64_t> size_range(const BenchOptions& options) {
  const auto min_bytes = parse_size(options.min_bytes);
  const auto max_bytes = parse_size(options.max_bytes);
  if (!min_bytes || *min_bytes == 0) {
    throw CLI::ValidationError("--min-bytes", "'" + options.min_bytes + "' is not a size > 0");
  }
  if (!max_bytes || *max_bytes < *min_bytes) {
    throw CLI::ValidationError("--max-bytes",
                               "'" + options.max_bytes + "' is not a size >= --min-bytes");
  }
  return {*min_bytes, *max_bytes};
}

std::optional<DataType> wire_type(const BenchOptions& options, Collective collective, DataType type,
                                  ReduceOp op) {
  if (options.wire.empty()) return std::nullopt;
  if (collective != Collective::allreduce) {
    throw CLI::ValidationError("--wire",
                               "the bench measures a wire type's error on allreduce only");
  }
  const std::optional<DataType> wire = parse_data_type(options.wire);
  if (Status status = check_wire_type(Collective::allreduce, type, op, *wire); !status.ok()) {
    throw CLI::ValidationError("--wire", status.message());
  }
  return wire;
}

std::vector<std::optional<Algorithm>> algorithms_to_run(const std::string& algorithm,
                                                        Collective collective) {
  std::vector<std::optional<Algorithm>> algorithms;
  if (algorithm == "all" || algorithm == "auto") algorithms.push_back(std::nullopt);
  if (algorithm == "all") {
    for (Algorithm each : algorithms_for(collective)) algorithms.push_back(each);
  } else if (algorithm != "auto") {
    const Algorithm forced = *parse_algorithm(algorithm);
    if (!supports(collective, forced)) {
      throw CLI::ValidationError("--algorithm",
                                 algorithm + " cannot run " + std::string(name(collective)));
    }
    algorithms.push_back(forced);
  }
  return algorithms;
}

}  // namespace gradsync::cli
