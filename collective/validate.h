// Structural checks of one rank's schedule, before anything executes it.
#pragma once

#include "collective/schedule.h"
#include "collective/status.h"

namespace gradsync {

// Every peer is another rank of the group; every span lies inside its buffer and covers whole
// elements; within a round, no two receives write the same bytes, no `recv_copy` overwrites what
// the round sends, and no local copy reads what it writes. Returns what is wrong, with the round.
Status validate(const Schedule& schedule);

}  // namespace gradsync
