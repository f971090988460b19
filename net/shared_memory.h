// Anonymous shared memory (memfd) that a client fills and its daemon maps through the descriptor.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collective/status.h"
#include "net/unique_fd.h"

namespace gradsync::net {

class SharedRegion {
 public:
  SharedRegion() = default;
  SharedRegion(SharedRegion&& other) noexcept;
  SharedRegion& operator=(SharedRegion&& other) noexcept;
  ~SharedRegion();

  // A new region of `bytes` bytes, sealed against shrinking.
  static Status create(std::uint64_t bytes, SharedRegion& region);
  // Maps a region received from another process; it must be sealed against shrinking, and its
  // real size must be at least `bytes`.
  static Status map(UniqueFd fd, std::uint64_t bytes, SharedRegion& region);

  std::byte* data() const { return data_; }
  std::uint64_t size() const { return size_; }
  int fd() const { return fd_.get(); }

 private:
  void unmap();
  UniqueFd fd_;
  std::byte* data_ = nullptr;
  std::uint64_t size_ = 0;
};

}  // namespace gradsync::net
