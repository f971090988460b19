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
      return 1;
  }
  std::abort();
}

bool is_floating_point(DataType type) {
  switch (type) {
    case DataType::f32:
    case DataType::f64:
    case DataType::f16:
    case DataType::bf16:
      return true;
    case DataType::i32:
    case DataType::i64:
    case DataType::u8:
      return false;
  }
  std::abort();
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
  }
  std::abort();
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
