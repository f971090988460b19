// Vocabulary shared by every layer: element types, reduction operators, collectives, algorithms.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace gradsync {

enum class DataType : std::uint8_t {
  f32,
  f64,
  f16,
  bf16,
  i32,
  i64,
  u8,
  i8,
  i16,
  boolean,
  c64,
  c128
};
enum class ReduceOp : std::uint8_t { sum, prod, min, max, avg, band, bor, bxor };
enum class Collective : std::uint8_t {
  allreduce,
  reduce_scatter,
  allgather,
  broadcast,
  alltoall,
  barrier,
  reduce,    // the reduction, on the root only
  gather,    // rank r's chunk of the balanced partition, to the root
  scatter,   // the root's chunk r of the balanced partition, to rank r
  alltoallv  // all-to-all whose every ordered pair of ranks has its own count (OpShape::splits)
};
enum class Algorithm : std::uint8_t {
  tree,              // binomial tree reduce + broadcast
  hypercube,         // recursive doubling
  ring,              // reduce-scatter then all-gather around a ring
  halving_doubling,  // recursive halving reduce-scatter + recursive doubling all-gather
  direct,            // pairwise direct exchange (all-to-all)
  bruck,             // hypercube-style all-to-all for short portions
  dissemination,     // barrier
  probe              // link measurement between pairs of ranks (link_probe.h); never a client op's
};

inline constexpr DataType kAllDataTypes[] = {
    DataType::f32, DataType::f64, DataType::f16, DataType::bf16,    DataType::i32, DataType::i64,
    DataType::u8,  DataType::i8,  DataType::i16, DataType::boolean, DataType::c64, DataType::c128};
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min,
                                             ReduceOp::max, ReduceOp::avg,  ReduceOp::band,
                                             ReduceOp::bor, ReduceOp::bxor};
inline constexpr Collective kAllCollectives[] = {
    Collective::allreduce, Collective::reduce_scatter, Collective::allgather, Collective::broadcast,
    Collective::alltoall,  Collective::barrier,        Collective::reduce,    Collective::gather,
    Collective::scatter,   Collective::alltoallv};
inline constexpr Algorithm kAllAlgorithms[] = {
    Algorithm::tree,   Algorithm::hypercube, Algorithm::ring,          Algorithm::halving_doubling,
    Algorithm::direct, Algorithm::bruck,     Algorithm::dissemination, Algorithm::probe};

std::size_t element_size(DataType type);
bool is_floating_point(DataType type);  // a real floating-point type (not complex)
bool is_integer(DataType type);         // i8 … i64 and u8; bool is neither
bool is_complex(DataType type);
// Why `op` cannot reduce values of `type`, or empty if it can: min and max need an order (no
// complex), the bitwise operators integers or bool, avg a division (no bool).
std::string_view why_op_cannot_reduce(DataType type, ReduceOp op);
std::string_view name(DataType type);
std::string_view name(ReduceOp op);
std::optional<DataType> parse_data_type(std::string_view text);
std::optional<ReduceOp> parse_reduce_op(std::string_view text);
std::string_view name(Collective collective);
// Broadcast, reduce, gather and scatter: the collectives that name a root rank.
bool has_root(Collective collective);
// All-reduce, reduce-scatter and reduce: the collectives that combine values with a ReduceOp.
bool reduces(Collective collective);
std::string_view name(Algorithm algorithm);
std::optional<Collective> parse_collective(std::string_view text);
std::optional<Algorithm> parse_algorithm(std::string_view text);

}  // namespace gradsync
