#include "collective/types.h"

#include <cstdlib>

namespace gradsync {

std::size_t element_size(DataType type) {
  switch (type) {
    case DataType::f32:
      return 4;
    case DataType::f64:
      return 8;
    case DataType::f16:
      return 2;
    case DataType::bf16:
      return 2;
    case DataType::i32:
      return 4;
    case DataType::i64:
      return 8;
    case DataType::u8:
    case DataType::i8:
    case DataType::boolean:
      return 1;
    case DataType::i16:
      return 2;
    case DataType::c64:
      return 8;
    case DataType::c128:
      return 16;
  }
  std::abort();
}

bool is_floating_point(DataType type) {
  return type == DataType::f32 || type == DataType::f64 || type == DataType::f16 ||
         type == DataType::bf16;
}

bool is_integer(DataType type) {
  return type == DataType::i32 || type == DataType::i64 || type == DataType::u8 ||
         type == DataType::i8 || type == DataType::i16;
}

bool is_complex(DataType type) { return type == DataType::c64 || type == DataType::c128; }

std::string_view why_op_cannot_reduce(DataType type, ReduceOp op) {
  const bool bitwise = op == ReduceOp::band || op == ReduceOp::bor || op == ReduceOp::bxor;
  if (bitwise && !is_integer(type) && type != DataType::boolean) {
    return "the bitwise operators take integers and bool only";
  }
  if ((op == ReduceOp::min || op == ReduceOp::max) && is_complex(type)) {
    return "complex numbers have no order for min and max";
  }
  if (op == ReduceOp::avg && type == DataType::boolean) return "bool values have no average";
  return {};
}

std::string_view name(DataType type) {
  switch (type) {
    case DataType::f32:
      return "f32";
    case DataType::f64:
      return "f64";
    case DataType::f16:
      return "f16";
    case DataType::bf16:
      return "bf16";
    case DataType::i32:
      return "i32";
    case DataType::i64:
      return "i64";
    case DataType::u8:
      return "u8";
    case DataType::i8:
      return "i8";
    case DataType::i16:
      return "i16";
    case DataType::boolean:
      return "bool";
    case DataType::c64:
      return "c64";
    case DataType::c128:
      return "c128";
  }
  std::abort();
}

std::string_view name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::prod:
      return "prod";
    case ReduceOp::min:
      return "min";
    case ReduceOp::max:
      return "max";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::band:
      return "band";
    case ReduceOp::bor:
      return "bor";
    case ReduceOp::bxor:
      return "bxor";
  }
  std::abort();
}

std::string_view name(Collective collective) {
  switch (collective) {
    case Collective::allreduce:
      return "allreduce";
    case Collective::reduce_scatter:
      return "reduce_scatter";
    case Collective::allgather:
      return "allgather";
    case Collective::broadcast:
      return "broadcast";
    case Collective::alltoall:
      return "alltoall";
    case Collective::barrier:
      return "barrier";
    case Collective::reduce:
      return "reduce";
    case Collective::gather:
      return "gather";
    case Collective::scatter:
      return "scatter";
    case Collective::alltoallv:
      return "alltoallv";
  }
  std::abort();
}

bool has_root(Collective collective) {
  return collective == Collective::broadcast || collective == Collective::reduce ||
         collective == Collective::gather || collective == Collective::scatter;
}

bool reduces(Collective collective) {
  return collective == Collective::allreduce || collective == Collective::reduce_scatter ||
         collective == Collective::reduce;
}

std::string_view name(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::tree:
      return "tree";
    case Algorithm::hypercube:
      return "hypercube";
    case Algorithm::ring:
      return "ring";
    case Algorithm::halving_doubling:
      return "halving_doubling";
    case Algorithm::direct:
      return "direct";
    case Algorithm::bruck:
      return "bruck";
    case Algorithm::dissemination:
      return "dissemination";
    case Algorithm::probe:
      return "probe";
  }
  std::abort();
}

namespace {

// Looks `text` up among the names of every value in `values`.
template <typename Enum, std::size_t N>
std::optional<Enum> parse_by_name(std::string_view text, const Enum (&values)[N]) {
  for (Enum value : values) {
    if (name(value) == text) return value;
  }
  return std::nullopt;
}

}  // namespace

std::optional<DataType> parse_data_type(std::string_view text) {
  return parse_by_name(text, kAllDataTypes);
}
std::optional<ReduceOp> parse_reduce_op(std::string_view text) {
  return parse_by_name(text, kAllReduceOps);
}
std::optional<Collective> parse_collective(std::string_view text) {
  return parse_by_name(text, kAllCollectives);
}
std::optional<Algorithm> parse_algorithm(std::string_view text) {
  return parse_by_name(text, kAllAlgorithms);
}

}  // namespace gradsync
