#include "daemon/host_op.h"

#include <cstring>

#include "collective/reduce_kernels.h"

namespace gradsync::daemon {

namespace {

// The elements host `host` carries in a reduce-scatter, all-gather, gather or scatter: its ranks'
// chunks, which are contiguous because ranks are host-major.
Chunk part_of(const OpShape& global, const HostLayout& layout, int host) {
  const int first = layout.first_rank(host);
  const Chunk begin = balanced_chunk(global.count, layout.world_size(), first);
  const Chunk last =
      balanced_chunk(global.count, layout.world_size(), first + layout.local_ranks(host) - 1);
  return {begin.offset, last.end() - begin.offset};
}

// Whether the op between hosts cannot run in a local rank's region.
bool needs_staging(const OpShape& global, const HostLayout& layout) {
  switch (global.collective) {
    case Collective::reduce_scatter:
    case Collective::allgather:
    case Collective::gather:
    case Collective::scatter:
      for (int host = 0; host < layout.hosts(); ++host) {
        if (part_of(global, layout, host) != balanced_chunk(global.count, layout.hosts(), host)) {
          return true;
        }
      }
      return false;
    case Collective::alltoall:
    case Collective::alltoallv:
      return !layout.flat();
    default:
      return false;
  }
}

void copy_bytes(std::byte* to, const std::byte* from, std::uint64_t bytes) {
  if (bytes > 0 && to != from) std::memcpy(to, from, bytes);
}

}  // namespace

OpShape shape_between_hosts(const OpShape& global, const HostLayout& layout) {
  OpShape between = global;
  between.world_size = layout.hosts();
  if (has_root(global.collective)) between.root = layout.host_of(global.root);
  if (!needs_staging(global, layout)) return between;
  if (global.collective == Collective::alltoallv) {
    // Host g sends host h every split from one of g's ranks to one of h's.
    const int hosts = layout.hosts();
    std::vector<std::uint64_t> splits(static_cast<std::size_t>(hosts) * hosts, 0);
    for (int from = 0; from < layout.world_size(); ++from) {
      for (int to = 0; to < layout.world_size(); ++to) {
        splits[static_cast<std::size_t>(layout.host_of(from)) * hosts + layout.host_of(to)] +=
            split(global, from, to);
      }
    }
    return alltoallv_shape(hosts, std::move(splits), global.element_size);
  }
  if (global.collective == Collective::alltoall) {
    const auto most = static_cast<std::uint64_t>(layout.most_local_ranks());
    between.count = most * most * global.count;
  } else {
    std::uint64_t longest = 0;
    for (int host = 0; host < layout.hosts(); ++host) {
      longest = std::max(longest, part_of(global, layout, host).count);
    }
    between.count = longest * static_cast<std::uint64_t>(layout.hosts());
  }
  return between;
}

HostOp::HostOp(const OpShape& global, DataType dtype, ReduceOp op, const HostLayout& layout,
               int host, std::vector<std::byte*> regions, std::vector<std::byte>& staging)
    : global_(global),
      between_(shape_between_hosts(global, layout)),
      dtype_(dtype),
      op_(op),
      layout_(layout),
      host_(host),
      first_(layout.first_rank(host)),
      regions_(std::move(regions)) {
  if (staged()) {
    block_ = global_.collective == Collective::alltoall
                 ? between_.count
                 : between_.count / static_cast<std::uint64_t>(layout.hosts());
    const std::uint64_t sent = data_bytes(between_, host_);
    const std::uint64_t bytes = sent + output_bytes(between_, host_);
    if (staging.size() < bytes) staging.resize(bytes);
    buffers_ = {staging.data(), staging.data() + sent};
    return;
  }
  std::byte* own = regions_[own_local()];
  buffers_ = {own, own != nullptr ? own + data_bytes(global_, first_ + own_local()) : nullptr};
}

bool HostOp::staged() const { return needs_staging(global_, layout_); }

bool HostOp::has_the_root() const {
  return has_root(global_.collective) && layout_.host_of(global_.root) == host_;
}

int HostOp::own_local() const { return has_the_root() ? global_.root - first_ : 0; }

std::byte* HostOp::staged_block(int host, std::uint64_t from_element) const {
  return at(buffers_.data,
            block_ * static_cast<std::uint64_t>(host) + from_element - host_part(host).offset);
}

Chunk HostOp::host_part(int host) const { return part_of(global_, layout_, host); }

std::byte* HostOp::at(std::byte* base, std::uint64_t elements) const {
  return base + elements * global_.element_size;
}

void HostOp::gather() {
  const int locals = static_cast<int>(regions_.size());
  const std::size_t size = global_.element_size;
  const auto reduce_into = [&](std::byte* to, const std::byte* from, std::uint64_t count) {
    if (count > 0) reduce(dtype_, op_, to, to, from, count);
  };
  switch (global_.collective) {
    case Collective::allreduce:
      for (int local = 1; local < locals; ++local) {
        reduce_into(regions_[0], regions_[local], global_.count);
      }
      return;
    case Collective::reduce_scatter:
      if (!staged()) {
        for (int local = 1; local < locals; ++local) {
          reduce_into(regions_[0], regions_[local], global_.count);
        }
        return;
      }
      for (int host = 0; host < layout_.hosts(); ++host) {
        const Chunk part = host_part(host);
        std::byte* block = at(buffers_.data, block_ * static_cast<std::uint64_t>(host));
        copy_bytes(block, at(regions_[0], part.offset), part.count * size);
        for (int local = 1; local < locals; ++local) {
          reduce_into(block, at(regions_[local], part.offset), part.count);
        }
      }
      return;
    case Collective::allgather:
      for (int local = staged() ? 0 : 1; local < locals; ++local) {
        const Chunk mine = balanced_chunk(global_.count, layout_.world_size(), first_ + local);
        std::byte* to = staged() ? at(buffers_.data, block_ * static_cast<std::uint64_t>(host_) +
                                                         mine.offset - host_part(host_).offset)
                                 : at(regions_[0], mine.offset);
        copy_bytes(to, at(regions_[local], mine.offset), mine.count * size);
      }
      return;
    case Collective::reduce:
      for (int local = 0; local < locals; ++local) {
        if (local != own_local()) reduce_into(buffers_.data, regions_[local], global_.count);
      }
      return;
    case Collective::gather:
      for (int local = 0; local < locals; ++local) {
        const Chunk mine = balanced_chunk(global_.count, layout_.world_size(), first_ + local);
        std::byte* to =
            staged() ? staged_block(host_, mine.offset) : at(buffers_.data, mine.offset);
        copy_bytes(to, at(regions_[local], mine.offset), mine.count * size);
      }
      return;
    case Collective::scatter:
      if (!staged() || !has_the_root()) return;
      for (int host = 0; host < layout_.hosts(); ++host) {
        const Chunk part = host_part(host);
        copy_bytes(staged_block(host, part.offset), at(regions_[own_local()], part.offset),
                   part.count * size);
      }
      return;
    case Collective::alltoallv:
      if (staged()) stage_alltoallv(true);
      return;
    case Collective::alltoall: {
      if (!staged()) return;
      const int most = layout_.most_local_ranks();
      for (int host = 0; host < layout_.hosts(); ++host) {
        for (int from = 0; from < locals; ++from) {
          for (int to = 0; to < layout_.local_ranks(host); ++to) {
            copy_bytes(
                at(buffers_.data,
                   block_ * host + static_cast<std::uint64_t>(from * most + to) * global_.count),
                at(regions_[from], (layout_.first_rank(host) + to) * global_.count),
                global_.count * size);
          }
        }
      }
      return;
    }
    default:
      return;
  }
}

void HostOp::scatter() {
  const int locals = static_cast<int>(regions_.size());
  const std::size_t size = global_.element_size;
  switch (global_.collective) {
    case Collective::allreduce:
    case Collective::broadcast:
      for (int local = 0; local < locals; ++local) {
        copy_bytes(regions_[local], buffers_.data, global_.count * size);
      }
      return;
    case Collective::reduce_scatter:
      for (int local = 0; local < locals; ++local) {
        const Chunk mine = balanced_chunk(global_.count, layout_.world_size(), first_ + local);
        const std::byte* from = staged()
                                    ? at(buffers_.data, block_ * static_cast<std::uint64_t>(host_) +
                                                            mine.offset - host_part(host_).offset)
                                    : at(regions_[0], mine.offset);
        copy_bytes(at(regions_[local], mine.offset), from, mine.count * size);
      }
      return;
    case Collective::allgather:
      if (!staged()) {
        for (int local = 1; local < locals; ++local) {
          copy_bytes(regions_[local], regions_[0], global_.count * size);
        }
        return;
      }
      for (int host = 0; host < layout_.hosts(); ++host) {
        const Chunk part = host_part(host);
        for (int local = 0; local < locals; ++local) {
          copy_bytes(at(regions_[local], part.offset),
                     at(buffers_.data, block_ * static_cast<std::uint64_t>(host)),
                     part.count * size);
        }
      }
      return;
    case Collective::gather:
      if (!staged() || !has_the_root()) return;
      for (int host = 0; host < layout_.hosts(); ++host) {
        const Chunk part = host_part(host);
        copy_bytes(at(regions_[own_local()], part.offset), staged_block(host, part.offset),
                   part.count * size);
      }
      return;
    case Collective::scatter:
      for (int local = 0; local < locals; ++local) {
        const Chunk mine = balanced_chunk(global_.count, layout_.world_size(), first_ + local);
        const std::byte* from =
            staged() ? staged_block(host_, mine.offset) : at(buffers_.data, mine.offset);
        copy_bytes(at(regions_[local], mine.offset), from, mine.count * size);
      }
      return;
    case Collective::alltoallv:
      if (staged()) stage_alltoallv(false);
      return;
    case Collective::alltoall: {
      if (!staged()) return;
      const int most = layout_.most_local_ranks();
      // Each local rank's output follows its data: world size blocks of count elements.
      const std::uint64_t output = static_cast<std::uint64_t>(layout_.world_size()) * global_.count;
      for (int host = 0; host < layout_.hosts(); ++host) {
        for (int from = 0; from < layout_.local_ranks(host); ++from) {
          for (int to = 0; to < locals; ++to) {
            copy_bytes(
                at(regions_[to], output + (layout_.first_rank(host) + from) * global_.count),
                at(buffers_.output,
                   block_ * host + static_cast<std::uint64_t>(from * most + to) * global_.count),
                global_.count * size);
          }
        }
      }
      return;
    }
    default:
      return;
  }
}

void HostOp::stage_alltoallv(bool outgoing) {
  // Host g's block for host h holds, for each of g's ranks a in turn, its blocks for each of h's
  // ranks b in turn; the receiving host reads it in the same order.
  const int locals = static_cast<int>(regions_.size());
  const auto block_offset = [&](int rank, int peer, bool sent) {
    std::uint64_t elements = 0;
    for (int before = 0; before < peer; ++before) {
      elements += sent ? split(global_, rank, before) : split(global_, before, rank);
    }
    return elements;
  };
  std::byte* staged = outgoing ? buffers_.data : buffers_.output;
  for (int host = 0; host < layout_.hosts(); ++host) {
    const int first = layout_.first_rank(host);
    for (int outer = 0; outer < (outgoing ? locals : layout_.local_ranks(host)); ++outer) {
      for (int inner = 0; inner < (outgoing ? layout_.local_ranks(host) : locals); ++inner) {
        const int from = outgoing ? first_ + outer : first + outer;
        const int to = outgoing ? first + inner : first_ + inner;
        const std::uint64_t bytes = split(global_, from, to) * global_.element_size;
        if (outgoing) {
          copy_bytes(staged, at(regions_[outer], block_offset(from, to, true)), bytes);
        } else {
          std::byte* output = regions_[inner] + data_bytes(global_, to);
          copy_bytes(at(output, block_offset(to, from, false)), staged, bytes);
        }
        staged += bytes;
      }
    }
  }
}

}  // namespace gradsync::daemon
