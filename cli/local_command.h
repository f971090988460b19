// `gradsync local`: a coordinator and N workers on loopback, optionally running a command.
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace gradsync::cli {

void add_local_command(CLI::App& app, std::function<int()>& action);

}  // namespace gradsync::cli
