// Gloo (libgloo-dev) all-reduce, float sum in place, over the sweep, in gradsync bench's columns:
// --algorithm default (gloo::allreduce), ring_chunked (AllreduceRingChunked) or halving_doubling
// (AllreduceHalvingDoubling). One process per rank; RANK, WORLD_SIZE, GLOO_STORE (a directory all
// ranks share for the rendezvous) and GLOO_HOSTNAME (the address to use, default 127.0.0.1).
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "cli/bench_report.h"
#include "sweep.h"

namespace {

std::string environment(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  if (value != nullptr) return value;
  if (fallback != nullptr) return fallback;
  std::fprintf(stderr, "gloo_allreduce: set %s\n", name);
  std::exit(2);
}

// The old-style algorithms bind their buffer when built: keep one per (buffer, count).
template <typename Algorithm>
class Cached {
 public:
  void run(const std::shared_ptr<gloo::Context>& context, float* data, std::uint64_t count) {
    if (data != data_ || count != count_) {
      algorithm_ =
          std::make_unique<Algorithm>(context, std::vector<float*>{data}, static_cast<int>(count));
      data_ = data;
      count_ = count;
    }
    algorithm_->run();
  }

 private:
  std::unique_ptr<Algorithm> algorithm_;
  float* data_ = nullptr;
  std::uint64_t count_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const auto options = gradsync::peers::parse_sweep(argc, argv, "gloo_allreduce");
  if (options.collective != "allreduce") {
    std::fprintf(stderr, "gloo_allreduce: times allreduce only\n");
    return 2;
  }
  const std::string algorithm = options.algorithm.empty() ? "default" : options.algorithm;
  if (algorithm != "default" && algorithm != "ring_chunked" && algorithm != "halving_doubling") {
    std::fprintf(stderr, "gloo_allreduce: --algorithm default, ring_chunked or halving_doubling\n");
    return 2;
  }
  const int rank = std::atoi(environment("RANK", nullptr).c_str());
  const int world_size = std::atoi(environment("WORLD_SIZE", nullptr).c_str());
  gloo::transport::tcp::attr attr;
  attr.hostname = environment("GLOO_HOSTNAME", "127.0.0.1");
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, world_size);
  gloo::rendezvous::FileStore store(environment("GLOO_STORE", nullptr));
  context->connectFullMesh(store, device);

  Cached<gloo::AllreduceRingChunked<float>> ring_chunked;
  Cached<gloo::AllreduceHalvingDoubling<float>> halving_doubling;
  const auto allreduce = [&](float* data, std::uint64_t count) {
    if (algorithm == "ring_chunked") return ring_chunked.run(context, data, count);
    if (algorithm == "halving_doubling") return halving_doubling.run(context, data, count);
    gloo::AllreduceOptions reduce(context);
    reduce.setOutput(data, count);
    reduce.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    gloo::allreduce(reduce);
  };

  std::vector<gradsync::cli::BenchRow> rows;
  for (std::uint64_t count : gradsync::peers::sweep_counts(options)) {
    auto times = gradsync::peers::time_iterations(count, rank, world_size, options, allreduce, [&] {
      gloo::BarrierOptions barrier(context);
      gloo::barrier(barrier);
    });
    std::vector<double> reduced = gradsync::peers::span_reduction_input(times);
    // The new-style call, as the timed ops: an old-style algorithm built between them (as this
    // was) made every later size of gloo::allreduce slower, up to 200x at 4 MiB.
    gloo::AllreduceOptions gather(context);
    gather.setOutput(reduced.data(), reduced.size());
    gather.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<double>));
    gloo::allreduce(gather);
    int wrong_anywhere = 0;
    std::vector<double> spans = gradsync::peers::spans_of_reduction(reduced, wrong_anywhere);
    auto row = gradsync::cli::make_row(count * 4, count, "gloo:" + algorithm,
                                       gradsync::cli::median(spans), world_size);
    row.wrong = wrong_anywhere;
    row.iterations = static_cast<int>(spans.size());
    rows.push_back(row);
  }
  if (rank == 0) {
    const gradsync::cli::BenchSetup setup{
        "Gloo allreduce", world_size,          "f32",          "sum", "",
        options.iters,    options.small_iters, options.warmup, ""};
    gradsync::cli::print_bench_table(setup, rows);
    if (!options.json_path.empty()) gradsync::cli::write_bench_json(options.json_path, setup, rows);
  }
  return 0;
}
