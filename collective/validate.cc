#include "collective/validate.h"

#include <sstream>

namespace gradsync {

namespace {

std::string describe(const Span& span) {
  std::ostringstream text;
  text << name(span.buffer) << "[" << span.offset << ", " << span.end() << ")";
  return text.str();
}

bool overlap(const Span& a, const Span& b) {
  return a.buffer == b.buffer && a.length > 0 && b.length > 0 && a.offset < b.end() &&
         b.offset < a.end();
}

class Validator {
 public:
  explicit Validator(const Schedule& schedule) : schedule_(schedule) {}

  Status run() {
    for (round_ = 0; round_ < schedule_.rounds.size() && error_.empty(); ++round_) {
      check_round(schedule_.rounds[round_]);
    }
    where_ = "after the last round: ";
    check_span(schedule_.result, "the result");
    if (error_.empty()) return {};
    return Status(ErrorCode::internal, "rank " + std::to_string(schedule_.rank) + ": " + error_);
  }

 private:
  void fail(const std::string& what) {
    if (!error_.empty()) return;
    error_ = (where_.empty() ? "round " + std::to_string(round_) + ": " : where_) + what;
  }

  void check_peer(int peer) {
    if (peer < 0 || peer >= schedule_.shape.world_size) {
      fail("peer " + std::to_string(peer) + " is not a rank of a group of " +
           std::to_string(schedule_.shape.world_size));
    } else if (peer == schedule_.rank) {
      fail("a transfer names the rank itself as its peer");
    }
  }

  void check_span(const Span& span, const std::string& role) {
    const std::uint64_t size = schedule_.size_of(span.buffer);
    if (span.end() > size || span.end() < span.offset) {
      fail(role + " " + describe(span) + " lies outside the " + std::to_string(size) + "-byte " +
           std::string(name(span.buffer)) + " buffer");
    } else if (span.offset % schedule_.shape.element_size != 0 ||
               span.length % schedule_.shape.element_size != 0) {
      fail(role + " " + describe(span) + " splits an element of " +
           std::to_string(schedule_.shape.element_size) + " bytes");
    }
  }

  // A span and where in its message it begins.
  struct Placed {
    Span span;
    std::uint64_t message_offset = 0;
  };

  void check_round(const Round& round) {
    std::vector<Placed> sent;
    std::vector<Span> received;
    for (const Send& send : round.sends) {
      check_peer(send.peer);
      std::uint64_t offset = 0;
      for (const Span& span : send.spans) {
        check_span(span, "a send from");
        sent.push_back({span, offset});
        offset += span.length;
      }
    }
    for (const Recv& recv : round.recvs) {
      check_peer(recv.peer);
      std::uint64_t offset = 0;
      for (const Span& span : recv.spans) {
        check_span(span, "a receive into");
        for (const Span& other : received) {
          if (overlap(span, other)) fail("two receives write " + describe(span));
        }
        // The engine holds a received segment until the sent segment at the same place in its
        // message is out; a receive that lands elsewhere could wait for a segment that waits on it.
        for (const Placed& source : sent) {
          if (overlap(span, source.span) &&
              span.offset - offset != source.span.offset - source.message_offset) {
            fail("a receive lands on " + describe(span) +
                 ", which the round sends, at another offset of its message than it is sent from");
          }
        }
        received.push_back(span);
        offset += span.length;
      }
    }
    for (const LocalCopy& copy : round.copies) {
      check_span(copy.from, "a local copy from");
      check_span(copy.to, "a local copy into");
      if (copy.from.length != copy.to.length) {
        fail("a local copy from " + describe(copy.from) + " into " + describe(copy.to) +
             " changes the length");
      }
      if (overlap(copy.from, copy.to)) fail("a local copy reads what it writes");
    }
  }

  const Schedule& schedule_;
  std::size_t round_ = 0;
  std::string where_;  // set once the rounds are checked
  std::string error_;
};

}  // namespace

Status validate(const Schedule& schedule) { return Validator(schedule).run(); }

}  // namespace gradsync
