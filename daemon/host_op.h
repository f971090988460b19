// One op of a host's local ranks, run as one op between hosts (docs/architecture.md §6.4, the
// two-level scheme), with the semantics of the same op in a flat group of every host's ranks:
// - all-reduce: the local ranks' tensors are reduced into local rank 0's region, read straight
//   from each region; the hosts all-reduce that region; every other local rank gets a copy.
// - reduce-scatter and all-gather: a host carries its ranks' chunks, which are contiguous. Where
//   the hosts' parts are the balanced partition between hosts (one rank per host, or even counts)
//   the op runs in local rank 0's region; otherwise in a staging buffer of one equal block per
//   host, each as long as the longest host's part.
// - broadcast: the hosts broadcast from the root's region; every other local rank gets a copy.
// - reduce: the local ranks' tensors are reduced into the root's region on the root's host (local
//   rank 0's elsewhere), and the hosts reduce to the root's host; no other local rank is written.
// - gather and scatter: a host carries its ranks' chunks, as all-gather and reduce-scatter do; the
//   root's host gathers into (or scatters from) the root's region.
// - all-to-all: with one rank per host, in the region; otherwise every host sends each other one
//   portion of (local ranks)² blocks, staged.
// - alltoallv: as all-to-all, each block as long as its split; the hosts' op has the hosts'
//   splits, each the sum of its ranks' pairs.
// - barrier: between hosts, once every local rank has come.
// Averages are over every rank: the executor divides by the layout's world size.
#pragma once

#include <cstddef>
#include <vector>

#include "collective/host_layout.h"
#include "collective/schedule.h"
#include "engine/executor.h"

namespace gradsync::daemon {

// The shape of the op between hosts for `global`, an op of `layout.world_size()` ranks; the same
// on every host.
OpShape shape_between_hosts(const OpShape& global, const HostLayout& layout);

class HostOp {
 public:
  // `regions`: each local rank's shared-memory region, by local rank (data at 0, all-to-all's
  // output after it; null for an op without bytes). `staging` is kept from op to op.
  HostOp(const OpShape& global, DataType dtype, ReduceOp op, const HostLayout& layout, int host,
         std::vector<std::byte*> regions, std::vector<std::byte>& staging);

  const OpShape& between_hosts() const { return between_; }
  // Where the op between hosts runs.
  engine::OpBuffers buffers() const { return buffers_; }
  // Before the op between hosts: the local ranks' reduction, or their blocks gathered.
  void gather();
  // After it: the result handed to every local rank.
  void scatter();

 private:
  // The elements host `host` carries in a reduce-scatter, all-gather, gather or scatter.
  Chunk host_part(int host) const;
  bool staged() const;
  // Whether the op has a root and it is one of this host's ranks.
  bool has_the_root() const;
  // The local rank whose region the op between hosts runs in, unstaged: the root's, else 0.
  int own_local() const;
  // Staged: where element `from_element` of host `host`'s part lies in the staging buffer.
  std::byte* staged_block(int host, std::uint64_t from_element) const;
  std::byte* at(std::byte* base, std::uint64_t elements) const;
  // Staged alltoallv: the local ranks' blocks into the staging buffer, one block per host
  // (outgoing), or the blocks from every host out to the local ranks' outputs.
  void stage_alltoallv(bool outgoing);

  OpShape global_;
  OpShape between_;
  DataType dtype_;
  ReduceOp op_;
  const HostLayout& layout_;
  int host_;
  int first_;  // the host's first global rank
  std::vector<std::byte*> regions_;
  std::uint64_t block_ = 0;  // staged: elements per host block (all-to-all: per portion)
  engine::OpBuffers buffers_;
};

}  // namespace gradsync::daemon
