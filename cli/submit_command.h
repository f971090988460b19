// `gradsync submit`: runs one collective on a tensor through the local daemon, from one file to
// another (.npy, or raw with --dtype and --count).
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace gradsync::cli {

// Registers the subcommand; when the command line selects it, `action` is set to run it.
void add_submit_command(CLI::App& app, std::function<int()>& action);

}  // namespace gradsync::cli
