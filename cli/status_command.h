// `gradsync status`: who is in the group and how each daemon is doing, one row per daemon asked:
// its rank and data address, its clients and the pid whose ops it takes, the ops it served and
// failed, and when its coordinator last took a heartbeat. The first thing to ask when a job is
// slow or stuck.
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace gradsync::cli {

void add_status_command(CLI::App& app, std::function<int()>& action);

}  // namespace gradsync::cli
