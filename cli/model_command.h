// `gradsync model`: the cost model's predicted all-reduce time per algorithm, and its choice.
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace gradsync::cli {

// Registers the subcommand; when the command line selects it, `action` is set to run it.
void add_model_command(CLI::App& app, std::function<int()>& action);

}  // namespace gradsync::cli
