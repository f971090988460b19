// Vocabulary shared by every layer: element types, reduction operators, collectives, algorithms.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace gradsync {

enum class DataType : std::uint8_t { f32, f64, f16, bf16, i32, i64, u8 };
enum class ReduceOp : std::uint8_t { sum, prod, min, max, avg };
enum class Collective : std::uint8_t {
  allreduce,
  reduce_scatter,
  allgather,
  broadcast,
  alltoall,
  barrier
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

inline constexpr DataType kAllDataTypes[] = {DataType::f32,  DataType::f64, DataType::f16,
                                             DataType::bf16, DataType::i32, DataType::i64,
                                             DataType::u8};
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min,
                                             ReduceOp::max, ReduceOp::avg};
inline constexpr Collective kAllCollectives[] = {Collective::allreduce, Collective::reduce_scatter,
                                                 Collective::allgather, Collective::broadcast,
                                                 Collective::alltoall,  Collective::barrier};
inline constexpr Algorithm kAllAlgorithms[] = {
    Algorithm::tree,   Algorithm::hypercube, Algorithm::ring,          Algorithm::halving_doubling,
    Algorithm::direct, Algorithm::bruck,     Algorithm::dissemination, Algorithm::probe};

std::size_t element_size(DataType type);
bool is_floating_point(DataType type);
std::string_view name(DataType type);
std::string_view name(ReduceOp op);
std::optional<DataType> parse_data_type(std::string_view text);
std::optional<ReduceOp> parse_reduce_op(std::string_view text);
std::string_view name(Collective collective);
std::string_view name(Algorithm algorithm);
std::optional<Collective> parse_collective(std::string_view text);
std::optional<Algorithm> parse_algorithm(std::string_view text);

}  // namespace gradsync
