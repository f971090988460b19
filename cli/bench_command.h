// `gradsync bench`: all-reduce over a sweep of sizes on every rank, printed on rank 0 in the
// columns of nccl-tests (docs/architecture.md §16), every result checked.
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace gradsync::cli {

void add_bench_command(CLI::App& app, std::function<int()>& action);

}  // namespace gradsync::cli
