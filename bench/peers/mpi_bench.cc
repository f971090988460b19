// Open MPI's MPI_Allreduce (float sum, in place) over the sweep, in gradsync bench's columns.
// Launch with mpirun; the transport is the launcher's choice (`--mca btl tcp,self` for TCP only).
#include <mpi.h>

#include <algorithm>

#include "cli/bench_report.h"
#include "sweep.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const auto options = gradsync::peers::parse_sweep(argc, argv, "mpi_allreduce");
  const std::string label = options.algorithm.empty() ? "mpi" : "mpi:" + options.algorithm;
  std::vector<gradsync::cli::BenchRow> rows;
  for (std::uint64_t count : gradsync::peers::sweep_counts(options)) {
    auto times = gradsync::peers::time_iterations(
        count, rank, world_size, options,
        [](float* data, std::uint64_t n) {
          MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                        MPI_COMM_WORLD);
        },
        [] { MPI_Barrier(MPI_COMM_WORLD); });
    std::vector<double> slowest(times.us.size());
    MPI_Reduce(times.us.data(), slowest.data(), static_cast<int>(times.us.size()), MPI_DOUBLE,
               MPI_MAX, 0, MPI_COMM_WORLD);
    int wrong = 0;
    MPI_Reduce(&times.wrong, &wrong, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    auto row = gradsync::cli::make_row(count * 4, count, label, gradsync::cli::median(slowest),
                                       world_size);
    row.wrong = wrong;
    row.iterations = static_cast<int>(slowest.size());
    rows.push_back(row);
  }
  if (rank == 0) {
    const gradsync::cli::BenchSetup setup{
        "Open MPI MPI_Allreduce", world_size,     "f32", "sum", "", options.iters,
        options.small_iters,      options.warmup, ""};
    gradsync::cli::print_bench_table(setup, rows);
    if (!options.json_path.empty()) gradsync::cli::write_bench_json(options.json_path, setup, rows);
  }
  MPI_Finalize();
  return 0;
}
