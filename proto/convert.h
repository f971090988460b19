// Conversions between the core's vocabulary (collective/types.h, status.h, group_plan.h) and the
// protobuf messages of gradsync.proto. The proto enums number every value one above the core's,
// keeping 0 for "unspecified" (or, for Algorithm, "auto").
#pragma once

#include <optional>

#include "collective/group_plan.h"
#include "collective/status.h"
#include "collective/types.h"
#include "gradsync.pb.h"

namespace gradsync {

proto::DataType to_proto(DataType type);
proto::ReduceOp to_proto(ReduceOp op);
proto::Collective to_proto(Collective collective);
proto::Algorithm to_proto(Algorithm algorithm);
void to_proto(const Status& status, proto::Status& out);

// Empty for UNSPECIFIED or a value this build does not know.
std::optional<DataType> from_proto(proto::DataType type);
std::optional<ReduceOp> from_proto(proto::ReduceOp op);
std::optional<Collective> from_proto(proto::Collective collective);
// Empty for ALGORITHM_AUTO too.
std::optional<Algorithm> from_proto(proto::Algorithm algorithm);
Status from_proto(const proto::Status& status);

void to_proto(const GroupPlan& plan, proto::GroupPlan& out);
// Checks what a peer sent: ranks within the world size, a complete link table, known enums.
Status from_proto(const proto::GroupPlan& message, GroupPlan& plan);

}  // namespace gradsync
