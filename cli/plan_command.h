// `gradsync plan`: what a running group measured about its network and what it chose from that
// (docs/architecture.md §9): α and β per link, γ per rank, the switch points of the algorithm
// table, and the predicted all-reduce time of every algorithm per size with the one auto runs
// marked.
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace gradsync::cli {

void add_plan_command(CLI::App& app, std::function<int()>& action);

}  // namespace gradsync::cli
