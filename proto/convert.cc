#include "proto/convert.h"

namespace gradsync {

namespace {

template <typename ProtoEnum, typename CoreEnum>
ProtoEnum shifted_up(CoreEnum value) {
  return static_cast<ProtoEnum>(static_cast<int>(value) + 1);
}

// Core enum for a proto value, if it is one of `values`.
template <typename CoreEnum, std::size_t N>
std::optional<CoreEnum> shifted_down(int proto_value, const CoreEnum (&values)[N]) {
  for (CoreEnum value : values) {
    if (static_cast<int>(value) + 1 == proto_value) return value;
  }
  return std::nullopt;
}

}  // namespace

proto::DataType to_proto(DataType type) { return shifted_up<proto::DataType>(type); }
proto::ReduceOp to_proto(ReduceOp op) { return shifted_up<proto::ReduceOp>(op); }
proto::Collective to_proto(Collective collective) {
  return shifted_up<proto::Collective>(collective);
}
proto::Algorithm to_proto(Algorithm algorithm) { return shifted_up<proto::Algorithm>(algorithm); }

void to_proto(const Status& status, proto::Status& out) {
  out.set_code(static_cast<proto::Status::Code>(status.code()));
  out.set_message(status.message());
}

std::optional<DataType> from_proto(proto::DataType type) {
  return shifted_down(type, kAllDataTypes);
}
std::optional<ReduceOp> from_proto(proto::ReduceOp op) { return shifted_down(op, kAllReduceOps); }
std::optional<Collective> from_proto(proto::Collective collective) {
  return shifted_down(collective, kAllCollectives);
}
std::optional<Algorithm> from_proto(proto::Algorithm algorithm) {
  return shifted_down(algorithm, kAllAlgorithms);
}

Status from_proto(const proto::Status& status) {
  const int code = status.code();
  if (code < 0 || code > static_cast<int>(ErrorCode::internal)) {
    return Status(ErrorCode::internal,
                  "unknown status code " + std::to_string(code) + ": " + status.message());
  }
  return Status(static_cast<ErrorCode>(code), status.message());
}

}  // namespace gradsync
