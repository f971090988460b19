// Vocabulary shared by every layer: element types, reduction operators, collectives, algorithms.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace gradsync {

enum class DataType : std::uint8_t { f32, f64, f16, bf16, i32, i64, u8 };
enum class ReduceOp : std::uint8_t { sum, prod, min, max, avg };

inline constexpr DataType kAllDataTypes[] = {DataType::f32,  DataType::f64, DataType::f16,
                                             DataType::bf16, DataType::i32, DataType::i64,
                                             DataType::u8};
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min,
                                             ReduceOp::max, ReduceOp::avg};

std::size_t element_size(DataType type);
bool is_floating_point(DataType type);
std::string_view name(DataType type);
std::string_view name(ReduceOp op);
std::optional<DataType> parse_data_type(std::string_view text);
std::optional<ReduceOp> parse_reduce_op(std::string_view text);

}  // namespace gradsync
