#include "cli/submit_command.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/npy.h"
#include "client/gradsync_client.h"
#include "collective/algorithms.h"
#include "collective/partition.h"
#include "collective/types.h"
#include "config/cli_knobs.h"

namespace gradsync::cli {

namespace {

struct SubmitOptions {
  std::string socket_path;
  std::string collective_text = "allreduce";
  std::string op_text = "sum";
  std::string algorithm_text = "auto";
  std::string in_path;
  std::string out_path;
  std::string dtype_text;
  std::uint64_t count = 0;
  std::uint64_t total = 0;
  int root = 0;
  int timeout_ms = 0;
  bool verbose = false;
  // Which of the optional flags the command line gave.
  bool raw = false;  // --dtype and --count
  bool has_op = false;
  bool has_root = false;
  bool has_total = false;
  // alltoallv: elements to and from each rank (both required with it, refused otherwise).
  std::vector<std::uint64_t> send_counts;
  std::vector<std::uint64_t> recv_counts;
};

// The collectives whose input is a chunk of a tensor (or, on scatter's root, the tensor) that
// only --total says the size of on every rank.
bool takes_total(Collective collective) {
  return collective == Collective::allgather || collective == Collective::gather ||
         collective == Collective::scatter;
}

// The checks that need nothing but the command line.
void check_flags(const SubmitOptions& options, Collective collective) {
  const std::string collective_flag = "--collective " + options.collective_text;
  if (options.has_op && !reduces(collective)) {
    throw CLI::ValidationError("--op", collective_flag + " does not reduce");
  }
  if (options.has_root && !has_root(collective)) {
    throw CLI::ValidationError("--root", collective_flag + " has no root");
  }
  if (takes_total(collective) && !options.has_total) {
    throw CLI::ValidationError("--total", "required with " + collective_flag +
                                              " (the element count it gathers or scatters)");
  }
  if (options.has_total && !takes_total(collective)) {
    throw CLI::ValidationError("--total",
                               "only --collective allgather, gather and scatter take a total");
  }
  const bool counted = !options.send_counts.empty() || !options.recv_counts.empty();
  if (collective == Collective::alltoallv &&
      (options.send_counts.empty() || options.recv_counts.empty())) {
    throw CLI::ValidationError(
        "--send-counts", "--send-counts and --recv-counts are required with " + collective_flag);
  }
  if (counted && collective != Collective::alltoallv) {
    throw CLI::ValidationError("--send-counts",
                               "only --collective alltoallv takes send and receive counts");
  }
  if (options.algorithm_text != "auto") {
    const Algorithm algorithm = *parse_algorithm(options.algorithm_text);
    if (!supports(collective, algorithm)) {
      std::string choices = "auto";
      for (Algorithm candidate : algorithms_for(collective)) {
        choices += " " + std::string(name(candidate));
      }
      throw CLI::ValidationError("--algorithm", options.algorithm_text + " cannot run " +
                                                    options.collective_text + " (choose from " +
                                                    choices + ")");
    }
  }
}

NpyArray read_input(const SubmitOptions& options) {
  NpyArray input;
  const Status status = options.raw
                            ? read_raw_file(options.in_path, *parse_data_type(options.dtype_text),
                                            options.count, input)
                            : read_npy_file(options.in_path, input);
  if (!status.ok()) throw CLI::ValidationError("--in", status.message());
  return input;
}

// Checked before connecting: the op costs every rank, and a mistyped --out should not waste it.
void check_output_path(const std::string& path) {
  std::filesystem::path directory = std::filesystem::path(path).parent_path();
  if (directory.empty()) directory = ".";
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    throw CLI::ValidationError("--out", path + " is a directory");
  }
  if (!std::filesystem::is_directory(directory, error)) {
    throw CLI::ValidationError("--out", path + ": there is no directory " + directory.string());
  }
  if (access(directory.c_str(), W_OK) != 0) {
    throw CLI::ValidationError(
        "--out", path + ": cannot write in " + directory.string() + ": " + std::strerror(errno));
  }
}

void check_root(const SubmitOptions& options, std::uint64_t world_size) {
  if (static_cast<std::uint64_t>(options.root) >= world_size) {
    throw CLI::ValidationError("--root", "rank " + std::to_string(options.root) +
                                             " does not exist in a group of " +
                                             std::to_string(world_size) + " ranks");
  }
}

// The output's element count on this rank, once the group's size and this rank are known
// (client/gradsync_client.h).
std::uint64_t output_count(const SubmitOptions& options, Collective collective,
                           std::uint64_t input_count, const Client& client) {
  const auto world_size = static_cast<std::uint64_t>(client.world_size());
  const auto rank = static_cast<std::uint64_t>(client.rank());
  const std::string group = std::to_string(world_size) + " ranks";
  switch (collective) {
    case Collective::allreduce:
      return input_count;
    case Collective::alltoallv: {
      const auto sum = [](const std::vector<std::uint64_t>& counts) {
        return std::accumulate(counts.begin(), counts.end(), std::uint64_t{0});
      };
      if (sum(options.send_counts) != input_count) {
        throw CLI::ValidationError(
            "--send-counts", "add up to " + std::to_string(sum(options.send_counts)) +
                                 ", but --in holds " + std::to_string(input_count) + " elements");
      }
      return sum(options.recv_counts);
    }
    case Collective::alltoall:
      if (input_count % world_size != 0) {
        throw CLI::ValidationError(
            "--in", "holds " + std::to_string(input_count) +
                        " elements, which do not split into one equal block for each of the " +
                        group);
      }
      return input_count;
    case Collective::broadcast:
    case Collective::reduce:
      check_root(options, world_size);
      return input_count;
    case Collective::reduce_scatter:
      return balanced_chunk(input_count, world_size, rank).count;
    case Collective::scatter:
      check_root(options, world_size);
      if (rank == static_cast<std::uint64_t>(options.root) && input_count != options.total) {
        throw CLI::ValidationError("--in", "holds " + std::to_string(input_count) +
                                               " elements, but the root scatters --total " +
                                               std::to_string(options.total));
      }
      return balanced_chunk(options.total, world_size, rank).count;
    case Collective::gather:
      check_root(options, world_size);
      [[fallthrough]];
    case Collective::allgather: {
      const std::uint64_t chunk = balanced_chunk(options.total, world_size, rank).count;
      if (input_count != chunk) {
        throw CLI::ValidationError("--in", "holds " + std::to_string(input_count) +
                                               " elements, but rank " + std::to_string(rank) +
                                               "'s chunk of --total " +
                                               std::to_string(options.total) + " over " + group +
                                               " is " + std::to_string(chunk));
      }
      return options.total;
    }
    case Collective::barrier:
      break;  // --collective does not offer it: it has no tensor
  }
  throw std::logic_error("gradsync submit: unexpected collective");
}

struct Result {
  std::vector<std::byte> data;
  Algorithm algorithm = Algorithm::tree;
  double elapsed_us = 0;
};

// All-reduce, broadcast and reduce work in place; the others write a separate output.
bool in_place(Collective collective) {
  return collective == Collective::allreduce || collective == Collective::broadcast ||
         collective == Collective::reduce;
}

// Whether this rank has a result to write: a reduce's or a gather's is the root's alone.
bool has_result(Collective collective, int rank, int root) {
  return (collective != Collective::reduce && collective != Collective::gather) || rank == root;
}

// Through the async calls, whose Handle reports the algorithm and the time.
// options.total: the tensor a scatter's root scatters (the other ranks' input is not read).
Result run_op(Client& client, Collective collective, NpyArray& input, std::uint64_t out_count,
              const SubmitOptions& options, const OpOptions& op_options) {
  const std::uint64_t count = element_count(input.shape);
  Result result;
  if (!in_place(collective)) result.data.resize(out_count * element_size(input.type));
  Handle handle;
  switch (collective) {
    case Collective::allreduce:
      handle = client.allreduce_async(input.data.data(), count, input.type, op_options);
      break;
    case Collective::broadcast:
      handle = client.broadcast_async(input.data.data(), count, input.type, op_options);
      break;
    case Collective::reduce_scatter:
      handle = client.reduce_scatter_async(input.data.data(), count, result.data.data(), input.type,
                                           op_options);
      break;
    case Collective::allgather:
      handle = client.allgather_async(input.data.data(), result.data.data(), out_count, input.type,
                                      op_options);
      break;
    case Collective::alltoall:
      handle = client.alltoall_async(input.data.data(), result.data.data(),
                                     count / static_cast<std::uint64_t>(client.world_size()),
                                     input.type, op_options);
      break;
    case Collective::alltoallv:
      handle = client.alltoallv_async(input.data.data(), options.send_counts, result.data.data(),
                                      options.recv_counts, input.type, op_options);
      break;
    case Collective::reduce:
      handle = client.reduce_async(input.data.data(), count, input.type, op_options);
      break;
    case Collective::gather:
      handle = client.gather_async(input.data.data(), result.data.data(), out_count, input.type,
                                   op_options);
      break;
    case Collective::scatter:
      handle = client.scatter_async(input.data.data(), result.data.data(), options.total,
                                    input.type, op_options);
      break;
    case Collective::barrier:
      throw std::logic_error("gradsync submit: unexpected collective");
  }
  handle.wait();
  if (in_place(collective)) result.data = std::move(input.data);
  result.algorithm = handle.algorithm();
  result.elapsed_us = handle.elapsed_us();
  return result;
}

int run_submit(const SubmitOptions& options) {
  const Collective collective = *parse_collective(options.collective_text);
  check_flags(options, collective);
  NpyArray input = read_input(options);
  const std::uint64_t input_count = element_count(input.shape);
  if ((collective == Collective::allgather || collective == Collective::gather) &&
      input_count > options.total) {
    throw CLI::ValidationError("--in", "holds " + std::to_string(input_count) +
                                           " elements, more than --total " +
                                           std::to_string(options.total));
  }
  check_output_path(options.out_path);

  OpOptions op_options;
  op_options.op = *parse_reduce_op(options.op_text);
  if (options.algorithm_text != "auto") {
    op_options.algorithm = parse_algorithm(options.algorithm_text);
  }
  op_options.timeout = std::chrono::milliseconds(options.timeout_ms);
  op_options.root = options.root;
  Result result;
  int rank = 0;
  std::uint64_t out_count = 0;
  try {
    Client client = Client::connect(options.socket_path, op_options.timeout);
    rank = client.rank();
    out_count = output_count(options, collective, input_count, client);
    result = run_op(client, collective, input, out_count, options, op_options);
  } catch (const ClientError& error) {
    std::fprintf(stderr, "gradsync submit: %s\n", error.what());
    return 1;
  }

  if (!has_result(collective, rank, options.root)) {
    if (options.verbose) {
      std::printf("rank %d: %s ran %s in %.1f us; the result is rank %d's, no --out written\n",
                  rank, options.collective_text.c_str(),
                  std::string(name(result.algorithm)).c_str(), result.elapsed_us, options.root);
    }
    return 0;
  }
  NpyArray output;
  output.type = input.type;
  output.shape = out_count == input_count ? input.shape : std::vector<std::uint64_t>{out_count};
  output.data = std::move(result.data);
  const Status status = options.raw ? write_raw_file(options.out_path, output.data)
                                    : write_npy_file(options.out_path, output);
  if (!status.ok()) throw CLI::ValidationError("--out", status.message());
  if (options.verbose) {
    std::printf("rank %d: %s ran %s in %.1f us\n", rank, options.collective_text.c_str(),
                std::string(name(result.algorithm)).c_str(), result.elapsed_us);
  }
  return 0;
}

// Decimal digits only: CLI11 would read "-1" as 2^64 - 1 and "010" as octal.
const CLI::Validator kElementCount(
    [](std::string& text) -> std::string {
      std::uint64_t value = 0;
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
        return "'" + text + "' is not a number of elements";
      }
      text = std::to_string(value);
      return {};
    },
    "COUNT");

}  // namespace

void add_submit_command(CLI::App& app, std::function<int()>& action) {
  auto options = std::make_shared<SubmitOptions>();
  CLI::App* command = app.add_subcommand(
      "submit", "Run one collective on a tensor through the local daemon, file to file");
  command->add_option("--socket", options->socket_path, "The daemon's client socket")->required();
  command
      ->add_option("--collective", options->collective_text,
                   "The collective to run (default allreduce)")
      ->check(CLI::IsMember(config::names_of(kAllCollectives, {Collective::barrier})));
  CLI::Option* op = command->add_option("--op", options->op_text, "The reduction (default sum)")
                        ->check(CLI::IsMember(config::names_of(kAllReduceOps)));
  command
      ->add_option("--algorithm", options->algorithm_text,
                   "auto (default) lets the group's algorithm table choose")
      ->check(CLI::IsMember(config::algorithm_choices({"auto"})));
  command->add_option("--in", options->in_path, "Input tensor, a .npy file (raw with --dtype)")
      ->required();
  command->add_option("--out", options->out_path, "Output tensor, written in the input's format")
      ->required();
  CLI::Option* dtype =
      command
          ->add_option("--dtype", options->dtype_text,
                       "Element type of raw little-endian --in and --out files (the only way to "
                       "pass bf16)")
          ->check(CLI::IsMember(config::names_of(kAllDataTypes)));
  CLI::Option* count =
      command->add_option("--count", options->count, "Element count of the raw input file")
          ->check(kElementCount);
  dtype->needs(count);
  count->needs(dtype);
  CLI::Option* total =
      command
          ->add_option("--total", options->total,
                       "allgather and gather: element count of the gathered tensor (the input "
                       "is this rank's balanced chunk of it); scatter: of the scattered one "
                       "(the root's input; the output is this rank's chunk)")
          ->check(kElementCount);
  CLI::Option* root =
      command
          ->add_option("--root", options->root,
                       "broadcast, reduce, gather and scatter: the root rank (default 0); "
                       "reduce and gather write --out on the root only")
          ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  command
      ->add_option("--send-counts", options->send_counts,
                   "alltoallv: the elements of --in for each rank in turn, comma-separated")
      ->delimiter(',');
  command
      ->add_option("--recv-counts", options->recv_counts,
                   "alltoallv: the elements --out receives from each rank in turn, "
                   "comma-separated")
      ->delimiter(',');
  config::add_knob(*command, knobs::kOpTimeoutMs, options->timeout_ms);
  command->add_flag("--verbose", options->verbose,
                    "Print the rank, the algorithm and the elapsed time");
  command->callback([options, &action, op, count, total, root] {
    options->raw = count->count() > 0;
    options->has_op = op->count() > 0;
    options->has_root = root->count() > 0;
    options->has_total = total->count() > 0;
    action = [options] { return run_submit(*options); };
  });
}

}  // namespace gradsync::cli
