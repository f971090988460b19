// What a local client writes in its op queue (net/op_queue.h), as arbitrary bytes from the start
// of the region (the counters, the flags and the first ops): the daemon's end takes op after op
// until the count says none or is refused, and every op converts to a request as one from the
// socket would, or is refused. Nothing may crash or read past the region.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "daemon/op_request.h"
#include "net/op_queue.h"
#include "proto/convert.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gradsync;
  auto region = std::make_unique<net::OpQueueLayout>();
  std::memcpy(region.get(), data, std::min(size, sizeof(net::OpQueueLayout)));
  net::OpQueueDaemonEnd queue(reinterpret_cast<std::byte*>(region.get()));
  for (std::uint32_t taken = 0; taken <= net::kOpQueueSlots; ++taken) {
    net::QueuedOp queued;
    bool got = false;
    if (!queue.take(queued, got).ok() || !got) break;
    const proto::SubmitOp op = daemon::submit_op_from(queued);
    (void)from_proto(op.collective());
    (void)from_proto(op.dtype());
    (void)from_proto(op.op());
    (void)from_proto(op.algorithm());
    (void)from_proto(op.wire());
    std::string serialized;
    (void)op.SerializeToString(&serialized);  // its name is valid UTF-8
  }
  return 0;
}
