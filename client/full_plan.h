// The group's whole plan as the daemon holds it (collective/group_plan.h: every link's cost, the
// calibration, the table and its history), for the gradsync command and the tests. Not part of the
// public client API, whose Client::plan() gives a brief view; this header brings the cost model
// and the schedules with it.
#pragma once

#include <chrono>

#include "client/gradsync_client.h"
#include "collective/group_plan.h"

namespace gradsync {

GroupPlan full_plan(Client& client, std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace gradsync
