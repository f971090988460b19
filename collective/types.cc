#include "collective/types.h"

#include <cstdlib>

namespace gradsync {

std::size_t element_size(DataType type) {
  switch (type) {
    case DataType::f32: return 4;
    case DataType::f64: return 8;
    case DataType::f16: return 2;
    case DataType::bf16: return 2;
    case DataType::i32: return 4;
    case DataType::i64: return 8;
    case DataType::u8: return 1;
  }
  std::abort();
}

bool is_floating_point(DataType type) {
  switch (type) {
    case DataType::f32:
    case DataType::f64:
    case DataType::f16:
    case DataType::bf16: return true;
    case DataType::i32:
    case DataType::i64:
    case DataType::u8: return false;
  }
  std::abort();
}

std::string_view name(DataType type) {
  switch (type) {
    case DataType::f32: return "f32";
    case DataType::f64: return "f64";
    case DataType::f16: return "f16";
    case DataType::bf16: return "bf16";
    case DataType::i32: return "i32";
    case DataType::i64: return "i64";
    case DataType::u8: return "u8";
  }
  std::abort();
}

std::string_view name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::prod: return "prod";
    case ReduceOp::min: return "min";
    case ReduceOp::max: return "max";
    case ReduceOp::avg: return "avg";
  }
  std::abort();
}

std::optional<DataType> parse_data_type(std::string_view text) {
  for (DataType type : kAllDataTypes) {
    if (name(type) == text) return type;
  }
  return std::nullopt;
}

std::optional<ReduceOp> parse_reduce_op(std::string_view text) {
  for (ReduceOp op : kAllReduceOps) {
    if (name(op) == text) return op;
  }
  return std::nullopt;
}

}  // namespace gradsync
