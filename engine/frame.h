// The data-plane frame (docs/architecture.md §5.1): a fixed 88-byte little-endian header, then raw
// payload bytes. The header names the op and carries its descriptor, so that ranks that disagree
// about an op fail at once with an error naming both sides instead of hanging or mixing data.
//
//   offset  size  field
//        0     4  magic "GSD1"
//        4     2  version
//        6     1  kind: 1 data, 2 abort (payload: the reason, text), 3 hello (payload: a nonce),
//                 4 end of a stream (payload: the reason, text), 5 ready for a point-to-point
//                 message, 6 a point-to-point message's bytes
//        7     1  wire type: 0 the dtype itself, else 1 + the dtype the values travel as
//        8     8  generation of the group
//       16     8  the op's place in its stream (hello: the sender's rank; end: the place of the
//                 last op the sender's client submitted)
//       24     4  round
//       28     4  segment index within its message (abort: its error code, never 0)
//       32     8  byte offset of the payload within its message
//       40     8  payload length
//       48     1  collective      49  1  dtype      50  1  reduce op      51  1  algorithm
//       52     4  root
//       56     8  element count (hello: the world size)
//       64     8  the op's job (a tag of its name; 0: the daemon's own op)
//       72     8  the op's stream within its job (a tag of its name)
//       80     8  the sender's count of the ops it has started in the generation, this one
//                 included (where a new algorithm table takes effect)
//
// On the point-to-point lane (engine/point_to_point.h) a frame names a message instead of an op:
// place (16) is the message's number among those of its sender, receiver and tag, round (24) its
// tag, root (52) its sending rank and 80 its receiving rank; count (56) and dtype (49) are the
// message's as the frame's sender posted it. An end names the rank whose client left in root.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "collective/status.h"
#include "collective/types.h"

namespace gradsync::engine {

inline constexpr std::size_t kFrameHeaderBytes = 88;
inline constexpr std::uint32_t kFrameMagic = 0x31445347;  // "GSD1" little-endian
inline constexpr std::uint16_t kFrameVersion = 5;
// No segment may be longer: a header claiming more is rejected before anything is read.
inline constexpr std::uint64_t kMaxSegmentBytes = 64ull << 20;
inline constexpr std::uint64_t kMaxAbortReasonBytes = 4096;
// A hello's payload: empty, or with a group secret the connecting rank's nonce.
inline constexpr std::uint64_t kMaxHelloBytes = 16;

// An end says that the sender's client of the frame's stream has left: an op of that stream that
// still waits for the sender's data will never get it.
// A ready says that the receiver of a point-to-point message has posted its receive: the sender may
// send the message's bytes, each segment in a message frame.
enum class FrameKind : std::uint8_t {
  data = 1,
  abort = 2,
  hello = 3,
  end = 4,
  ready = 5,
  message = 6
};

// Which op a frame belongs to (docs/architecture.md §5.1). Ops pair across ranks by their place in
// one stream of one job, never by the order in which they reach a daemon. The daemon's own ops
// (probes, calibration) are job 0, stream 0, numbered by the mesh, and come before every client op
// of their generation.
struct OpKey {
  std::uint64_t job = 0;
  std::uint64_t stream = 0;
  std::uint64_t place = 0;  // 1, 2, ... in its stream

  bool of_daemon() const { return job == 0; }
  bool same_stream(const OpKey& other) const { return job == other.job && stream == other.stream; }
  friend bool operator==(const OpKey&, const OpKey&) = default;
  // "op 7 of stream 5d1c… of job 9a0e…", or "daemon op 7"
  std::string to_string() const;
};

// What every rank must agree on about an op before exchanging its bytes.
struct OpDescriptor {
  Collective collective = Collective::allreduce;
  DataType dtype = DataType::f32;
  ReduceOp op = ReduceOp::sum;
  Algorithm algorithm = Algorithm::ring;
  std::uint32_t root = 0;
  std::uint64_t count = 0;
  // Set when the values travel narrowed to a 16-bit type (collective/wire_type.h).
  std::optional<DataType> wire = std::nullopt;

  DataType wire_type() const { return wire.value_or(dtype); }
  friend bool operator==(const OpDescriptor&, const OpDescriptor&) = default;
  // "allreduce of 1000 f32 (sum, ring, bf16 on the wire)"
  std::string to_string() const;
};

struct FrameHeader {
  FrameKind kind = FrameKind::data;
  std::uint64_t generation = 0;
  OpKey op;
  std::uint64_t op_count = 0;
  std::uint32_t round = 0;
  std::uint32_t segment = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  OpDescriptor descriptor;
};

using EncodedHeader = std::array<std::byte, kFrameHeaderBytes>;

EncodedHeader encode(const FrameHeader& header);
// Checks magic, version, kind, every enum and the length limit; says what is wrong.
Status decode(const EncodedHeader& bytes, FrameHeader& header);

// Why a decoded frame cannot come on an established collectives connection of a group in
// `generation` (a frame of another generation, a second hello, a point-to-point frame); empty if
// it can.
std::string misplaced(const FrameHeader& header, std::uint64_t generation);

// Why a data frame does not carry the segment a rank expects next, given on the wire as `offset`
// and `length` within its message; empty if it does.
std::string other_segment(const FrameHeader& header, std::uint32_t index, std::uint64_t offset,
                          std::uint64_t length);

}  // namespace gradsync::engine
