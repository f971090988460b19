// Open MPI's collectives over the sweep, in gradsync bench's columns: --collective allreduce
// (MPI_Allreduce in place, the default), reduce_scatter (MPI_Reduce_scatter), allgather
// (MPI_Allgatherv), broadcast (MPI_Bcast), alltoall (MPI_Alltoall), reduce (MPI_Reduce, in place
// on the root), gather (MPI_Gatherv), scatter (MPI_Scatterv), each f32 sum with --root for the
// rooted ones, on the tensors and checks of gradsync bench (cli/bench_op.h); the v forms give the
// balanced chunks gradsync's collectives use; --collective pingpong: MPI_Send from rank 0 to rank 1
// and back with MPI_Recv, half the round trip timed. Launch with mpirun; the transport is the
// launcher's choice (`--mca btl tcp,self` for TCP only).
#include <mpi.h>

#include <algorithm>
#include <cstdio>

#include "cli/bench_op.h"
#include "cli/bench_options.h"
#include "cli/bench_report.h"
#include "collective/partition.h"
#include "sweep.h"

namespace {

using gradsync::Collective;

// Each rank's chunk of the balanced partition of `count`, and where it starts, as MPI's v forms
// take them.
struct Chunks {
  std::vector<int> counts;
  std::vector<int> offsets;
};

Chunks balanced_chunks(std::uint64_t count, int world_size) {
  Chunks chunks;
  for (int rank = 0; rank < world_size; ++rank) {
    const gradsync::Chunk chunk = gradsync::balanced_chunk(count, world_size, rank);
    chunks.counts.push_back(static_cast<int>(chunk.count));
    chunks.offsets.push_back(static_cast<int>(chunk.offset));
  }
  return chunks;
}

// Blocks of `counts` elements, back to back.
Chunks blocks_of(const std::vector<std::uint64_t>& counts) {
  Chunks chunks;
  int offset = 0;
  for (const std::uint64_t count : counts) {
    chunks.counts.push_back(static_cast<int>(count));
    chunks.offsets.push_back(offset);
    offset += static_cast<int>(count);
  }
  return chunks;
}

// gradsync bench's ping-pong (cli::kPingPong): rank 0's bytes to rank 1 and back.
void ping_pong(const gradsync::cli::BenchOp& op, int rank, float* data) {
  const int count = static_cast<int>(op.count());
  if (rank == 0) {
    MPI_Send(data, count, MPI_FLOAT, 1, 0, MPI_COMM_WORLD);
    MPI_Recv(data, count, MPI_FLOAT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  } else if (rank == 1) {
    MPI_Recv(data, count, MPI_FLOAT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Send(data, count, MPI_FLOAT, 0, 0, MPI_COMM_WORLD);
  }
}

void run_op(const gradsync::cli::BenchOp& op, int rank, int root, const Chunks& chunks, float* data,
            float* output) {
  const int count = static_cast<int>(op.count());
  switch (op.collective()) {
    case Collective::allreduce:
      MPI_Allreduce(MPI_IN_PLACE, data, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case Collective::reduce_scatter:
      MPI_Reduce_scatter(data, output, chunks.counts.data(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case Collective::allgather:
      MPI_Allgatherv(data, chunks.counts[rank], MPI_FLOAT, output, chunks.counts.data(),
                     chunks.offsets.data(), MPI_FLOAT, MPI_COMM_WORLD);
      break;
    case Collective::broadcast:
      MPI_Bcast(data, count, MPI_FLOAT, root, MPI_COMM_WORLD);
      break;
    case Collective::alltoall:
      MPI_Alltoall(data, count, MPI_FLOAT, output, count, MPI_FLOAT, MPI_COMM_WORLD);
      break;
    case Collective::reduce:
      MPI_Reduce(rank == root ? MPI_IN_PLACE : data, rank == root ? data : nullptr, count,
                 MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD);
      break;
    case Collective::gather:
      MPI_Gatherv(data, chunks.counts[rank], MPI_FLOAT, output, chunks.counts.data(),
                  chunks.offsets.data(), MPI_FLOAT, root, MPI_COMM_WORLD);
      break;
    case Collective::scatter:
      MPI_Scatterv(data, chunks.counts.data(), chunks.offsets.data(), MPI_FLOAT, output,
                   chunks.counts[rank], MPI_FLOAT, root, MPI_COMM_WORLD);
      break;
    case Collective::alltoallv: {
      const Chunks sent = blocks_of(op.send_counts());
      const Chunks received = blocks_of(op.recv_counts());
      MPI_Alltoallv(data, sent.counts.data(), sent.offsets.data(), MPI_FLOAT, output,
                    received.counts.data(), received.offsets.data(), MPI_FLOAT, MPI_COMM_WORLD);
      break;
    }
    case Collective::barrier:
      break;
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const auto options = gradsync::peers::parse_sweep(argc, argv, "mpi_bench");
  const bool pinging = options.collective == gradsync::cli::kPingPong;
  // The ping-pong's tensors and check are a broadcast's from rank 0, on ranks 0 and 1.
  const auto collective =
      pinging ? Collective::broadcast : gradsync::parse_collective(options.collective);
  if (!collective || *collective == Collective::barrier || options.root >= world_size ||
      (pinging && (world_size < 2 || options.root != 0))) {
    if (rank == 0) {
      std::fprintf(stderr,
                   "mpi_bench: --collective %s --root %d: not a collective with a size, "
                   "or not a rank of %d\n",
                   options.collective.c_str(), options.root, world_size);
    }
    MPI_Finalize();
    return 2;
  }
  const std::string label = options.algorithm.empty() ? "mpi" : "mpi:" + options.algorithm;
  std::vector<gradsync::cli::BenchRow> rows;
  for (const std::uint64_t count : gradsync::peers::sweep_counts(options)) {
    const gradsync::cli::BenchOp op(*collective, gradsync::DataType::f32, gradsync::ReduceOp::sum,
                                    options.root, rank, world_size, count);
    const Chunks chunks = balanced_chunks(count, world_size);
    std::vector<float> data(op.data_bytes() / sizeof(float) + 1);
    std::vector<float> output(op.output_bytes() / sizeof(float) + 1);
    auto* data_bytes = reinterpret_cast<std::byte*>(data.data());
    auto* output_bytes = reinterpret_cast<std::byte*>(output.data());
    const int timed =
        gradsync::cli::timed_iterations(count * sizeof(float), options.iters, options.small_iters);
    gradsync::peers::RankTimes times;
    for (int iteration = 0; iteration < options.warmup + timed; ++iteration) {
      op.refill(data_bytes, output_bytes);
      MPI_Barrier(MPI_COMM_WORLD);
      const double start = gradsync::cli::wall_clock_us();
      if (pinging) {
        ping_pong(op, rank, data.data());
      } else {
        run_op(op, rank, options.root, chunks, data.data(), output.data());
      }
      const double stop = gradsync::cli::wall_clock_us();
      if (iteration < options.warmup) continue;
      times.starts_us.push_back(start);
      times.stops_us.push_back(stop);
      if ((!pinging || rank < 2) && !op.right(data_bytes, output_bytes)) ++times.wrong;
    }
    // The wrong results of every rank count; MAX keeps one rank's, which says as much: wrong.
    const std::vector<double> input = gradsync::peers::span_reduction_input(times);
    std::vector<double> reduced(input.size());
    MPI_Allreduce(input.data(), reduced.data(), static_cast<int>(input.size()), MPI_DOUBLE, MPI_MAX,
                  MPI_COMM_WORLD);
    int wrong = 0;
    std::vector<double> spans = gradsync::peers::spans_of_reduction(reduced, wrong);
    auto row = gradsync::cli::make_row(count * 4, count, label,
                                       gradsync::cli::median(spans) / (pinging ? 2 : 1),
                                       world_size, *collective);
    row.wrong = wrong;
    row.iterations = static_cast<int>(spans.size());
    rows.push_back(row);
  }
  if (rank == 0) {
    gradsync::cli::BenchSetup setup;
    setup.system = "Open MPI";
    setup.world_size = world_size;
    setup.iters = options.iters;
    setup.small_iters = options.small_iters;
    setup.warmup = options.warmup;
    setup.collective = options.collective;
    gradsync::cli::print_bench_table(setup, rows);
    if (!options.json_path.empty()) gradsync::cli::write_bench_json(options.json_path, setup, rows);
  }
  MPI_Finalize();
  return 0;
}
