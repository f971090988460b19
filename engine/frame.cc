#include "engine/frame.h"

#include <cstdio>
#include <iterator>

namespace gradsync::engine {

namespace {

template <typename T>
void put(EncodedHeader& bytes, std::size_t offset, T value) {
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    bytes[offset + i] =
        static_cast<std::byte>((static_cast<std::uint64_t>(value) >> (8 * i)) & 0xff);
  }
}

template <typename T>
T get(const EncodedHeader& bytes, std::size_t offset) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    value |= std::to_integer<std::uint64_t>(bytes[offset + i]) << (8 * i);
  }
  return static_cast<T>(value);
}

template <typename Enum, std::size_t N>
bool is_one_of(std::uint8_t raw, const Enum (&values)[N]) {
  for (Enum value : values) {
    if (static_cast<std::uint8_t>(value) == raw) return true;
  }
  return false;
}

std::string hex(std::uint64_t tag) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(tag));
  return text;
}

}  // namespace

std::string OpDescriptor::to_string() const {
  // An alltoallv's count is the digest of its splits (collective/schedule.h).
  std::string text = std::string(name(collective)) + " of " +
                     (collective == Collective::alltoallv ? "the splits tagged " + hex(count)
                                                          : std::to_string(count)) +
                     " " + std::string(name(dtype)) + " (";
  if (reduces(collective)) text += std::string(name(op)) + ", ";
  if (has_root(collective)) text += "root " + std::to_string(root) + ", ";
  text += std::string(name(algorithm));
  if (wire) text += ", " + std::string(name(*wire)) + " on the wire";
  return text + ")";
}

std::string OpKey::to_string() const {
  if (of_daemon()) return "daemon op " + std::to_string(place);
  return "op " + std::to_string(place) + " of stream " + hex(stream) + " of job " + hex(job);
}

EncodedHeader encode(const FrameHeader& header) {
  EncodedHeader bytes{};
  put<std::uint32_t>(bytes, 0, kFrameMagic);
  put<std::uint16_t>(bytes, 4, kFrameVersion);
  put<std::uint8_t>(bytes, 6, static_cast<std::uint8_t>(header.kind));
  const auto& wire = header.descriptor.wire;
  put<std::uint8_t>(bytes, 7, wire ? 1 + static_cast<std::uint8_t>(*wire) : 0);
  put<std::uint64_t>(bytes, 8, header.generation);
  put<std::uint64_t>(bytes, 16, header.op.place);
  put<std::uint32_t>(bytes, 24, header.round);
  put<std::uint32_t>(bytes, 28, header.segment);
  put<std::uint64_t>(bytes, 32, header.offset);
  put<std::uint64_t>(bytes, 40, header.length);
  put<std::uint8_t>(bytes, 48, static_cast<std::uint8_t>(header.descriptor.collective));
  put<std::uint8_t>(bytes, 49, static_cast<std::uint8_t>(header.descriptor.dtype));
  put<std::uint8_t>(bytes, 50, static_cast<std::uint8_t>(header.descriptor.op));
  put<std::uint8_t>(bytes, 51, static_cast<std::uint8_t>(header.descriptor.algorithm));
  put<std::uint32_t>(bytes, 52, header.descriptor.root);
  put<std::uint64_t>(bytes, 56, header.descriptor.count);
  put<std::uint64_t>(bytes, 64, header.op.job);
  put<std::uint64_t>(bytes, 72, header.op.stream);
  put<std::uint64_t>(bytes, 80, header.op_count);
  return bytes;
}

Status decode(const EncodedHeader& bytes, FrameHeader& header) {
  const auto bad = [](const std::string& why) {
    return Status(ErrorCode::protocol_error, "bad frame header: " + why);
  };
  if (get<std::uint32_t>(bytes, 0) != kFrameMagic) return bad("wrong magic");
  if (const auto version = get<std::uint16_t>(bytes, 4); version != kFrameVersion) {
    return bad("version " + std::to_string(version) + ", this daemon speaks " +
               std::to_string(kFrameVersion));
  }
  const auto kind = get<std::uint8_t>(bytes, 6);
  if (kind < 1 || kind > 6) return bad("unknown kind " + std::to_string(kind));
  const auto collective = get<std::uint8_t>(bytes, 48);
  const auto dtype = get<std::uint8_t>(bytes, 49);
  const auto op = get<std::uint8_t>(bytes, 50);
  const auto algorithm = get<std::uint8_t>(bytes, 51);
  const auto wire = get<std::uint8_t>(bytes, 7);
  if (!is_one_of(collective, kAllCollectives) || !is_one_of(dtype, kAllDataTypes) ||
      !is_one_of(op, kAllReduceOps) || !is_one_of(algorithm, kAllAlgorithms) ||
      (wire != 0 && !is_one_of(static_cast<std::uint8_t>(wire - 1), kAllDataTypes))) {
    return bad("unknown collective, dtype, op, algorithm or wire type");
  }
  header.kind = static_cast<FrameKind>(kind);
  header.generation = get<std::uint64_t>(bytes, 8);
  header.op = {get<std::uint64_t>(bytes, 64), get<std::uint64_t>(bytes, 72),
               get<std::uint64_t>(bytes, 16)};
  header.op_count = get<std::uint64_t>(bytes, 80);
  header.round = get<std::uint32_t>(bytes, 24);
  header.segment = get<std::uint32_t>(bytes, 28);
  header.offset = get<std::uint64_t>(bytes, 32);
  header.length = get<std::uint64_t>(bytes, 40);
  header.descriptor = {static_cast<Collective>(collective), static_cast<DataType>(dtype),
                       static_cast<ReduceOp>(op),           static_cast<Algorithm>(algorithm),
                       get<std::uint32_t>(bytes, 52),       get<std::uint64_t>(bytes, 56)};
  if (wire != 0) header.descriptor.wire = static_cast<DataType>(wire - 1);
  // An abort carries the error code it fails the op with: never OK (the op would seem to have
  // succeeded), never one this daemon does not know.
  if (header.kind == FrameKind::abort &&
      (header.segment == static_cast<std::uint32_t>(ErrorCode::ok) ||
       header.segment > static_cast<std::uint32_t>(ErrorCode::internal))) {
    return bad("an abort with error code " + std::to_string(header.segment) +
               ", which is not a failure");
  }
  const std::uint64_t limit =
      header.kind == FrameKind::abort || header.kind == FrameKind::end
          ? kMaxAbortReasonBytes
          : (header.kind == FrameKind::hello ? kMaxHelloBytes : kMaxSegmentBytes);
  if (header.length > limit) {
    return bad("payload of " + std::to_string(header.length) + " bytes exceeds the limit of " +
               std::to_string(limit));
  }
  return {};
}

std::string misplaced(const FrameHeader& header, std::uint64_t generation) {
  if (header.generation != generation) {
    return "frame of generation " + std::to_string(header.generation) + ", expected " +
           std::to_string(generation);
  }
  if (header.kind == FrameKind::hello) return "unexpected hello";
  if (header.kind == FrameKind::ready || header.kind == FrameKind::message) {
    return "a point-to-point frame on a collectives connection";
  }
  return {};
}

std::string other_segment(const FrameHeader& header, std::uint32_t index, std::uint64_t offset,
                          std::uint64_t length) {
  if (header.segment == index && header.offset == offset && header.length == length) return {};
  return "sent " + std::to_string(header.length) + " bytes at offset " +
         std::to_string(header.offset) + ", this rank expects " + std::to_string(length) +
         " at offset " + std::to_string(offset);
}

}  // namespace gradsync::engine
