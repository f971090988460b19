#include "cli/bench_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "cli/bench_op.h"
#include "cli/bench_options.h"
#include "cli/bench_report.h"
#include "cli/connect_clients.h"
#include "cli/wire_error.h"
#include "client/full_plan.h"
#include "collective/cost_model.h"
#include "collective/reduce_kernels.h"
#include "collective/wire_type.h"
#include "config/cli_knobs.h"

namespace gradsync::cli {

namespace {

Handle submit(Client& client, const BenchOp& op, std::byte* data, std::byte* output,
              const OpOptions& options) {
  const std::uint64_t count = op.count();
  const DataType type = op.type();
  switch (op.collective()) {
    case Collective::allreduce:
      return client.allreduce_async(data, count, type, options);
    case Collective::reduce:
      return client.reduce_async(data, count, type, options);
    case Collective::reduce_scatter:
      return client.reduce_scatter_async(data, count, output, type, options);
    case Collective::allgather:
      return client.allgather_async(data, output, count, type, options);
    case Collective::gather:
      return client.gather_async(data, output, count, type, options);
    case Collective::scatter:
      return client.scatter_async(data, output, count, type, options);
    case Collective::broadcast:
      return client.broadcast_async(data, count, type, options);
    case Collective::alltoall:
      return client.alltoall_async(data, output, count, type, options);
    case Collective::alltoallv:
      return client.alltoallv_async(data, op.send_counts(), output, op.recv_counts(), type,
                                    options);
    case Collective::barrier:
      break;
  }
  throw ClientError(Status(ErrorCode::invalid_argument, "gradsync bench does not time barriers"));
}

// The algorithm that ran the most ops of `used`; `fallback` if none did.
Algorithm most_used(const std::map<Algorithm, int>& used, Algorithm fallback) {
  Algorithm ran = fallback;
  int most = 0;
  for (const auto& [algorithm, ops] : used) {
    if (ops > most) std::tie(ran, most) = std::pair{algorithm, ops};
  }
  return ran;
}

// The ping-pong's op (kPingPong) on one rank: rank 0 sends `data` to rank 1 and receives it back
// into `data`; rank 1 receives it into `data` and sends it back; the others take no part. Both end
// with rank 0's bytes, as a broadcast from rank 0 would leave them.
void ping_pong(Client& client, const BenchOp& op, std::byte* data, const OpOptions& options) {
  const std::uint64_t count = op.count();
  if (client.rank() == 0) {
    Handle echo = client.receive_async(data, count, op.type(), 1, 0, options);
    client.send(data, count, op.type(), 1, 0, options);
    echo.wait();
  } else if (client.rank() == 1) {
    client.receive(data, count, op.type(), 0, 0, options);
    client.send(data, count, op.type(), 0, 0, options);
  }
}

class Bench {
 public:
  // `collective`: Collective::broadcast for the ping-pong, whose tensors and check are a
  // broadcast's from rank 0 on ranks 0 and 1.
  Bench(const BenchOptions& options, std::vector<Client> clients, GroupPlan plan,
        Collective collective, DataType type, ReduceOp op, std::optional<DataType> wire)
      : options_(options),
        clients_(std::move(clients)),
        plan_(std::move(plan)),
        collective_(collective),
        type_(type),
        op_(op),
        wire_(wire),
        ping_pong_(options.collective == kPingPong) {}

  // One row per algorithm (nullopt: auto). Every rank runs warmup + timed ops, the algorithms
  // taking turns (one op of each, then the next, each iteration starting one further along), so
  // that what slows a stretch of time (another process, a busy core) or follows a particular
  // algorithm slows them all alike and their rows compare like with like. A row's time is the
  // median over iterations of the op's time, from the first rank's start to the last rank's end
  // (op_spans).
  std::vector<BenchRow> measure(std::uint64_t bytes,
                                const std::vector<std::optional<Algorithm>>& algorithms) {
    const std::uint64_t count = std::max<std::uint64_t>(bytes / element_size(type_), 1);
    const SizeRun run{count, algorithms,
                      timed_iterations(bytes, options_.iters, options_.small_iters)};
    Tally tally(clients_.size(), algorithms.size());
    std::vector<std::thread> threads;
    for (int i = 0; i < static_cast<int>(clients_.size()); ++i) {
      threads.emplace_back([&, i] { run_rank(i, run, tally); });
    }
    for (auto& thread : threads) thread.join();
    for (const std::string& error : tally.errors) {
      if (!error.empty()) throw ClientError(Status(ErrorCode::internal, error));
    }
    std::vector<BenchRow> rows;
    for (std::size_t k = 0; k < algorithms.size(); ++k) rows.push_back(row_of(k, run, tally));
    return rows;
  }

 private:
  // One size, as every rank's thread reads it.
  struct SizeRun {
    std::uint64_t count;
    const std::vector<std::optional<Algorithm>>& algorithms;  // one row each
    int timed;                                                // iterations after the warmup
  };

  // What the ranks' threads record of one size, each thread in its own slots.
  struct Tally {
    Tally(std::size_t local, std::size_t kinds)
        : starts(kinds, std::vector<std::vector<double>>(local)),
          stops(kinds, std::vector<std::vector<double>>(local)),
          wrong(local, std::vector<int>(kinds, 0)),
          errors(local),
          used(kinds) {}

    // [algorithm][rank]: when each timed iteration's op began and ended (wall_clock_us)
    std::vector<std::vector<std::vector<double>>> starts;
    std::vector<std::vector<std::vector<double>>> stops;
    std::vector<std::vector<int>> wrong;  // [rank][algorithm]: its wrong results
    std::vector<std::string> errors;
    // What rank 0's ops of each row ran: auto's may vary, as the table explores and refines.
    std::vector<std::map<Algorithm, int>> used;
    double wire_error = -1;  // with a wire type, on the process that drives rank 0
  };

  // The thread of clients_[i]: its buffers, every iteration's ops, then (with a wire type) the
  // error of one more op. A client's failure ends the thread and is kept in tally.errors[i].
  void run_rank(int i, const SizeRun& run, Tally& tally) {
    Client& client = clients_[i];
    // Beside a daemon bound with --cpus (gradsync local binds them), this thread's wake-ups
    // land on the core the daemon just wrote the result from.
    client.bind_thread_beside_daemon();
    const BenchOp op(collective_, type_, op_, options_.root, client.rank(), client.world_size(),
                     run.count);
    // Shared memory unless --copy: what a training framework that allocates its gradient
    // buckets with Client::allocate gets. An output (a collective that is not in place) is
    // the caller's memory, as a framework's would be.
    std::vector<std::byte> private_copy;
    std::vector<std::byte> output(op.output_bytes());
    SharedTensor shared;
    std::byte* data = nullptr;
    try {
      if (options_.copy) {
        private_copy.resize(op.data_bytes());
        data = private_copy.data();
      } else if (op.data_bytes() > 0) {
        shared = client.allocate(op.data_bytes());
        data = shared.data();
      }
      time_ops(i, op, data, output.data(), run, tally);
      share_times(client, i, tally);
      if (wire_) {
        const double error = measure_wire_error(client, type_, op_, *wire_, run.count);
        if (client.rank() == 0) tally.wire_error = error;
      }
    } catch (const ClientError& error) {
      tally.errors[i] = error.what();
    }
  }

  // The warmup and timed iterations of clients_[i]'s `op` on `data` and `output`, both refilled
  // before every op.
  void time_ops(int i, const BenchOp& op, std::byte* data, std::byte* output, const SizeRun& run,
                Tally& tally) {
    Client& client = clients_[i];
    const std::size_t kinds = run.algorithms.size();
    OpOptions op_options;
    op_options.op = op_;
    op_options.wire = wire_;
    op_options.root = options_.root;
    for (int iteration = 0; iteration < options_.warmup + run.timed; ++iteration) {
      for (std::size_t turn = 0; turn < kinds; ++turn) {
        const std::size_t k = (turn + static_cast<std::size_t>(iteration)) % kinds;
        op_options.algorithm = run.algorithms[k];
        op.refill(data, output);
        // Every rank starts the timed op together: a row times the op, not the ranks (or
        // the other ranks' copies and checks) arriving at different times.
        client.barrier();
        const double start = wall_clock_us();
        if (ping_pong_) {
          ping_pong(client, op, data, op_options);
        } else {
          Handle handle = submit(client, op, data, output, op_options);
          handle.wait();
          if (i == 0) ++tally.used[k][handle.algorithm()];
        }
        const double stop = wall_clock_us();
        if (iteration < options_.warmup) continue;
        tally.starts[k][i].push_back(start);
        tally.stops[k][i].push_back(stop);
        if ((!ping_pong_ || client.rank() < 2) && !op.right(data, output)) ++tally.wrong[i][k];
      }
    }
  }

  // Makes clients_[i]'s starts and stops those of the whole group: the earliest start and the
  // latest stop of each iteration on any rank, whichever process drives it (under deploy/lan.sh
  // every host's process drives its own ranks).
  void share_times(Client& client, int i, Tally& tally) {
    std::vector<double> latest;
    for (const auto& stops : tally.stops)
      latest.insert(latest.end(), stops[i].begin(), stops[i].end());
    for (const auto& starts : tally.starts) {
      for (const double start : starts[i]) latest.push_back(-start);
    }
    OpOptions maximum;
    maximum.op = ReduceOp::max;
    client.allreduce(latest.data(), latest.size(), DataType::f64, maximum);
    auto next = latest.begin();
    for (auto& stops : tally.stops) {
      for (double& stop : stops[i]) stop = *next++;
    }
    for (auto& starts : tally.starts) {
      for (double& start : starts[i]) start = -*next++;
    }
  }

  // The row of algorithm k (for auto, named after what most of rank 0's ops ran).
  BenchRow row_of(std::size_t k, const SizeRun& run, const Tally& tally) const {
    const std::size_t size = element_size(type_);
    // Between hosts: a daemon's local ranks add no traffic to the network (docs/clusters.md, "Local
    // ranks").
    const int hosts = plan_.world_size;
    const std::optional<Algorithm>& forced = run.algorithms[k];
    const Algorithm ran = most_used(tally.used[k], forced.value_or(Algorithm::ring));
    std::vector<double> spans = op_spans(tally.starts[k], tally.stops[k]);
    const std::string label =
        ping_pong_ ? "direct"
                   : (forced ? std::string(name(*forced)) : "auto:" + std::string(name(ran)));
    // A ping-pong's row is one way: half the round trip.
    BenchRow row = make_row(run.count * size, run.count, label,
                            median(spans) / (ping_pong_ ? 2 : 1), hosts, collective_);
    // The model prices the bytes that cross the network.
    const std::size_t wire_size = wire_ ? element_size(*wire_) : size;
    const HostLayout layout = host_layout(plan_);
    if (ping_pong_) {
      const LinkCost link = plan_.network.link(layout.host_of(0), layout.host_of(1));
      row.predicted_us =
          layout.host_of(0) == layout.host_of(1)
              ? 0
              : link.alpha_us + static_cast<double>(run.count * size) * link.beta_us_per_byte;
    } else {
      row.predicted_us = predicted_us(
          plan_,
          bench_op_shape(collective_, hosts, run.count, wire_size, layout.host_of(options_.root)),
          ran);
    }
    row.iterations = static_cast<int>(spans.size());
    for (const auto& rank_wrong : tally.wrong) row.wrong += rank_wrong[k];
    // An op past the bound is wrong; the bound holds for any algorithm.
    row.error = tally.wire_error;
    if (wire_ &&
        tally.wire_error > wire_error_bound(*wire_, type_, clients_.front().world_size())) {
      ++row.wrong;
    }
    return row;
  }
  const BenchOptions& options_;
  std::vector<Client> clients_;
  GroupPlan plan_;  // for the predicted column
  Collective collective_;
  DataType type_;
  ReduceOp op_;
  std::optional<DataType> wire_;
  const bool ping_pong_;
};

// With --algorithm all: per size, auto's time over the best forced algorithm's, and the worst.
void print_auto_against_best(const std::vector<BenchRow>& rows) {
  double worst = 0;
  std::uint64_t worst_bytes = 0;
  for (std::size_t first = 0; first < rows.size();) {
    std::size_t end = first;
    double auto_us = 0;
    double best_us = INFINITY;
    for (; end < rows.size() && rows[end].bytes == rows[first].bytes; ++end) {
      if (rows[end].algorithm.rfind("auto", 0) == 0) {
        auto_us = rows[end].time_us;
      } else {
        best_us = std::min(best_us, rows[end].time_us);
      }
    }
    if (auto_us > 0 && std::isfinite(best_us) && auto_us / best_us > worst) {
      worst = auto_us / best_us;
      worst_bytes = rows[first].bytes;
    }
    first = end;
  }
  if (worst > 0) {
    std::printf("auto against the best forced algorithm: at worst %.2fx (at %llu bytes)\n", worst,
                static_cast<unsigned long long>(worst_bytes));
  }
}

// The line above the table: which model the predicted column is, how busbw counts hosts, and
// with a wire type the bound on a row's error.
std::string bench_note(const BenchOptions& options, const GroupPlan& plan, int world_size,
                       bool wire, double error_bound) {
  char model[160];
  std::snprintf(model, sizeof model,
                "predicted: %s, alpha up to %.1f us, beta up to %.3g us/byte, gamma %.3g us/byte",
                options.model_given        ? "the given model"
                : plan.calibration.empty() ? "the group's measured model"
                                           : "the group's measured model, calibrated",
                plan.network.alpha_us, plan.network.beta_us_per_byte,
                plan.network.gamma_us_per_byte);
  std::string note = model;
  if (plan.world_size != world_size) {
    note += "; " + host_layout(plan).describe() +
            ": busbw counts the links between hosts, algbw * 2(H - 1)/H";
  }
  if (wire) {
    char bound[200];
    std::snprintf(bound, sizeof bound,
                  "; error: of one more op on values in [-1, 1), the largest |result - sum| / "
                  "sum |x| (docs/clients.md \"Semantics\": at most %.3g here, or the row is wrong)",
                  error_bound);
    note += bound;
  }
  return note;
}

int run_bench(BenchOptions options) {
  const std::vector<std::string> sockets = socket_paths(options.sockets, "--sockets");
  const auto [min_bytes, max_bytes] = size_range(options);
  if (options.small_iters == 0) options.small_iters = options.iters;
  const bool ping_pong = options.collective == kPingPong;
  if (ping_pong && (!options.wire.empty() || options.algorithm != "auto" || options.root != 0)) {
    throw CLI::ValidationError("--collective",
                               "the ping-pong takes no --wire, --algorithm or --root");
  }
  const Collective collective =
      ping_pong ? Collective::broadcast : *parse_collective(options.collective);
  const DataType type = *parse_data_type(options.dtype);
  const ReduceOp op = *parse_reduce_op(options.op);
  if (const std::string_view why = why_op_cannot_reduce(type, op);
      reduces(collective) && !why.empty()) {
    throw CLI::ValidationError(
        "--op", options.op + " cannot reduce " + options.dtype + " values: " + std::string(why));
  }
  const std::optional<DataType> wire = wire_type(options, collective, type, op);
  const std::vector<std::optional<Algorithm>> algorithms =
      algorithms_to_run(options.algorithm, collective);
  if (options.dry_run) {
    std::printf("gradsync bench: %zu sockets, %s to %s, algorithm %s: the options are valid\n",
                sockets.size(), options.min_bytes.c_str(), options.max_bytes.c_str(),
                options.algorithm.c_str());
    return 0;
  }
  std::vector<Client> clients;
  GroupPlan plan;
  try {
    clients = connect_clients(sockets, std::chrono::milliseconds(options.connect_timeout_ms));
    plan = full_plan(clients.front());
  } catch (const ClientError& failure) {
    std::fprintf(stderr, "gradsync bench: %s\n", failure.what());
    return 1;
  }
  const bool prints = clients.front().rank() == 0;
  const int world_size = clients.front().world_size();
  if (ping_pong && world_size < 2) {
    std::fprintf(stderr, "gradsync bench: the ping-pong needs ranks 0 and 1; the group has 1\n");
    return 2;
  }
  if (options.root >= world_size) {
    std::fprintf(stderr, "gradsync bench: --root %d is not a rank of a group of %d\n", options.root,
                 world_size);
    return 2;
  }
  if (options.model_given) {
    plan.network = NetworkModel::uniform(options.alpha_us, options.beta_us_per_byte);
    plan.calibration.clear();
  }
  Bench bench(options, std::move(clients), plan, collective, type, op, wire);
  std::vector<BenchRow> rows;
  try {
    for (double bytes = static_cast<double>(min_bytes); bytes <= static_cast<double>(max_bytes);
         bytes *= options.step_factor) {
      for (BenchRow& row : bench.measure(static_cast<std::uint64_t>(bytes), algorithms)) {
        rows.push_back(std::move(row));
      }
    }
  } catch (const ClientError& failure) {
    std::fprintf(stderr, "gradsync bench: %s\n", failure.what());
    return 1;
  }
  if (prints) {
    const double error_bound = wire ? wire_error_bound(*wire, type, world_size) : -1;
    const std::string note = bench_note(options, plan, world_size, wire.has_value(), error_bound);
    const BenchSetup setup{"gradsync bench",    world_size,        options.dtype,
                           options.op,          options.wire,      options.iters,
                           options.small_iters, options.warmup,    note,
                           error_bound,         options.collective};
    print_bench_table(setup, rows);
    if (options.algorithm == "all") print_auto_against_best(rows);
    if (!options.json_path.empty()) write_bench_json(options.json_path, setup, rows);
  }
  const bool all_correct =
      std::all_of(rows.begin(), rows.end(), [](const BenchRow& row) { return row.wrong == 0; });
  return all_correct ? 0 : 3;
}

}  // namespace

void add_bench_command(CLI::App& app, std::function<int()>& action) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* command =
      app.add_subcommand("bench", "A collective over a sweep of sizes; a table on rank 0");
  command
      ->add_option("--sockets", options->sockets,
                   "Daemon sockets of the ranks this process drives, comma-separated "
                   "(gradsync local sets GRADSYNC_SOCKETS to every rank's)")
      ->envname("GRADSYNC_SOCKETS");
  command
      ->add_option("--collective", options->collective,
                   "The collective to time (a size is its count's bytes; all-to-all's blocks "
                   "are a world size's share of it), or pingpong: a send from rank 0 to rank 1 "
                   "and back, one way timed")
      ->check(CLI::IsMember([] {
        std::vector<std::string> names = config::names_of(kAllCollectives, {Collective::barrier});
        names.emplace_back(kPingPong);
        return names;
      }()));
  command->add_option("--root", options->root, "The root of broadcast, reduce, gather, scatter")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--dtype", options->dtype, "Element type")
      ->check(CLI::IsMember(config::names_of(kAllDataTypes)));
  command->add_option("--op", options->op, "Reduce op")
      ->check(CLI::IsMember(config::names_of(kAllReduceOps)));
  command
      ->add_option("--wire", options->wire,
                   "Send f32/f64 sums as this 16-bit type, adding in the dtype (default: as "
                   "the dtype)")
      ->check(CLI::IsMember({"bf16", "f16"}));
  command->add_option("--algorithm", options->algorithm, "auto, all, or one algorithm")
      ->check(CLI::IsMember(config::algorithm_choices({"auto", "all"})));
  command->add_option("--min-bytes", options->min_bytes, "Smallest size (e.g. 4, 64KiB)");
  command->add_option("--max-bytes", options->max_bytes, "Largest size (e.g. 64MiB)");
  command->add_option("--step-factor", options->step_factor, "Size multiplier between rows")
      ->check(CLI::Range(1.01, 1024.0));
  command->add_option("--iters", options->iters, "Timed iterations per row")
      ->check(CLI::Range(1, 100000));
  command
      ->add_option("--small-iters", options->small_iters,
                   "Timed iterations per row of at most 64 KiB (default: --iters)")
      ->check(CLI::Range(1, 100000));
  command->add_option("--warmup", options->warmup, "Untimed iterations per row")
      ->check(CLI::Range(0, 100000));
  command->add_option("--json", options->json_path, "Also write the rows as JSON here");
  // The predicted column's model: the group's measured one unless given.
  CLI::Option* model =
      config::add_network_model(*command, options->alpha_us, options->beta_us_per_byte);
  config::add_knob(*command, knobs::kConnectTimeoutMs, options->connect_timeout_ms);
  command->add_flag("--copy", options->copy,
                    "Submit from private memory (two copies per op) instead of shared tensors");
  command->add_flag("--dry-run", options->dry_run, "Check the options and exit without connecting");
  command->callback([options, model, &action] {
    options->model_given = model->count() > 0;
    action = [options] { return run_bench(*options); };
  });
}

}  // namespace gradsync::cli
