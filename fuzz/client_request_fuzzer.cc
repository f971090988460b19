// What a local client sends its daemon, as arbitrary bytes on a unix socket: the length-prefixed
// reader takes message after message until the stream ends or is refused, and every request it
// parses converts to the daemon's vocabulary or is refused. Nothing may crash or allocate past the
// message limit.
#include <google/protobuf/stubs/logging.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

#include "gradsync.pb.h"
#include "net/message_stream.h"
#include "proto/convert.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // a string that is not UTF-8 is logged, then refused
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gradsync;
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return 0;
  net::UniqueFd reading(pair[0]);
  {
    net::UniqueFd writing(pair[1]);
    // The socket's buffer holds far more than the largest input the fuzzer makes.
    if (::write(writing.get(), data, size) != static_cast<ssize_t>(size)) return 0;
  }
  net::MessageReader reader(reading.get());
  while (true) {
    proto::ClientToDaemon message;
    if (!reader.receive(message, net::Deadline::after(std::chrono::seconds(1))).ok()) break;
    if (message.has_submit()) {
      const proto::SubmitOp& op = message.submit();
      (void)from_proto(op.collective());
      (void)from_proto(op.dtype());
      (void)from_proto(op.op());
      (void)from_proto(op.algorithm());
      (void)from_proto(op.wire());
    }
  }
  return 0;
}
