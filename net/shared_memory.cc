#include "net/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace gradsync::net {

namespace {

Status map_fd(int fd, std::uint64_t bytes, std::byte*& data) {
  if (bytes == 0) {
    data = nullptr;
    return {};
  }
  void* address = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (address == MAP_FAILED) {
    return Status(ErrorCode::internal,
                  std::string("cannot map shared memory: ") + std::strerror(errno));
  }
  data = static_cast<std::byte*>(address);
  return {};
}

}  // namespace

SharedRegion::SharedRegion(SharedRegion&& other) noexcept
    : fd_(std::move(other.fd_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

SharedRegion& SharedRegion::operator=(SharedRegion&& other) noexcept {
  if (this != &other) {
    unmap();
    fd_ = std::move(other.fd_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

SharedRegion::~SharedRegion() { unmap(); }

void SharedRegion::unmap() {
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
}

Status SharedRegion::create(std::uint64_t bytes, SharedRegion& region) {
  UniqueFd fd(::memfd_create("gradsync-tensor", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) {
    return Status(ErrorCode::internal, std::string("memfd_create failed: ") + std::strerror(errno));
  }
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    return Status(ErrorCode::internal, "cannot size shared memory to " + std::to_string(bytes) +
                                           " bytes: " + std::strerror(errno));
  }
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
    return Status(ErrorCode::internal,
                  std::string("cannot seal shared memory: ") + std::strerror(errno));
  }
  return map(std::move(fd), bytes, region);
}

Status SharedRegion::map(UniqueFd fd, std::uint64_t bytes, SharedRegion& region) {
  // A region that its owner could still shrink would turn the daemon's next access past the new
  // end into SIGBUS.
  const int seals = ::fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return Status(ErrorCode::invalid_argument,
                  "the shared-memory region is not sealed against shrinking (a memfd with "
                  "F_SEAL_SHRINK)");
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0 || static_cast<std::uint64_t>(info.st_size) < bytes) {
    return Status(ErrorCode::invalid_argument, "the shared-memory region is smaller than the " +
                                                   std::to_string(bytes) + " bytes it claims");
  }
  SharedRegion result;
  if (Status status = map_fd(fd.get(), bytes, result.data_); !status.ok()) return status;
  result.fd_ = std::move(fd);
  result.size_ = bytes;
  region = std::move(result);
  return {};
}

}  // namespace gradsync::net
