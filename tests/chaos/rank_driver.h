// One rank's training loop in a chaos run: all-reduces one after another through the rank's
// daemon, each result checked, as a training script that recovers would run them: after a failed
// op it takes note of the group (Client::group, which waits while a generation forms) and tries
// again; when its daemon is gone it connects to the one that replaces it.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "chaos/op_journal.h"

namespace gradsync::chaos {

// Runs until `stop`, recording every op's outcome in `journal` as slot `slot`. Rank r of
// generation g adds (r + 1) * (i mod 7 + 1) + g at index i: a result mixing generations, or
// missing or doubling a rank, is wrong.
void drive_rank(int slot, const std::string& socket, std::uint64_t count,
                const std::atomic<bool>& stop, OpJournal& journal);

}  // namespace gradsync::chaos
