#include "collective/wire_type.h"

#include <cmath>
#include <string>

namespace gradsync {

Status check_wire_type(Collective collective, DataType type, ReduceOp op, DataType wire) {
  if (wire == type) return {};
  const auto refuse = [&](const std::string& why) {
    return Status(ErrorCode::invalid_argument, std::string(name(type)) +
                                                   " values cannot travel as " +
                                                   std::string(name(wire)) + ": " + why);
  };
  if (wire != DataType::bf16 && wire != DataType::f16) {
    return refuse("a wire type other than the data's own is bf16 or f16");
  }
  if (type != DataType::f32 && type != DataType::f64) return refuse("only f32 and f64 narrow");
  if (collective != Collective::allreduce && collective != Collective::reduce_scatter &&
      collective != Collective::allgather) {
    return refuse(std::string(name(collective)) +
                  " moves values unchanged; only all-reduce, reduce-scatter and all-gather "
                  "narrow them");
  }
  if (collective != Collective::allgather && op != ReduceOp::sum && op != ReduceOp::avg) {
    return refuse(std::string(name(op)) + " is not a sum; only sum and avg narrow");
  }
  return {};
}

double unit_roundoff(DataType wire) {
  return wire == DataType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
}

double wire_error_bound(DataType wire, DataType type, int p) {
  const double eps = type == DataType::f64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  return std::pow(1 + unit_roundoff(wire), p) * std::pow(1 + eps, p + 1) - 1;
}

}  // namespace gradsync
