// `gradsync`: the command-line tool for scripts and benchmarks.
#include <CLI/CLI.hpp>
#include <functional>

#include "cli/bench_command.h"
#include "cli/local_command.h"
#include "cli/model_command.h"
#include "cli/plan_command.h"
#include "cli/status_command.h"
#include "cli/submit_command.h"

int main(int argc, char** argv) {
  CLI::App app{"gradsync: gradient all-reduce over plain TCP"};
  app.require_subcommand(1);
  std::function<int()> action;
  gradsync::cli::add_bench_command(app, action);
  gradsync::cli::add_local_command(app, action);
  gradsync::cli::add_model_command(app, action);
  gradsync::cli::add_plan_command(app, action);
  gradsync::cli::add_status_command(app, action);
  gradsync::cli::add_submit_command(app, action);
  try {
    app.parse(argc, argv);
    return action();
  } catch (const CLI::ParseError& error) {
    // Also reached by a command that rejects a value only it can check (a size list, say).
    return app.exit(error);
  }
}
