// One end of the measured connection: its message buffers, the run's payload offset (which
// drives the integrity pattern) and the integrity errors seen so far.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "array_io.hpp"
#include "elements.hpp"

namespace fastsock_pipe {

struct Endpoint {
  int fd = -1;
  bool integrity = false;
  ElementType element = ElementType::byte;  // how buffers are filled outside integrity mode
  ArrayPath path = ArrayPath::plain;         // how messages move (array_io.hpp)
  long long corrupt_at = -1;       // test only: the transmitter flips this payload byte once
  uint64_t offset = 0;             // payload bytes sent in this run (one direction)
  uint64_t errors = 0;             // corrupted bytes found (cumulative)
  uint64_t first_bad = 0;          // run offset of the first one
  uint64_t messages = 0;           // messages this end sent (selects the next buffer slot)

  // Buffers for messages of `bytes`. Normally one send and one receive buffer, reused by
  // every message (NetPIPE's default, data stays in cache); with `one_buffer` (ping-pong,
  // where an end never sends and receives at once) sends and receives share one buffer, as
  // NetPIPE's do, so both programs keep the same bytes in the caches. With `pool_bytes` > 0
  // (cache invalidation, NetPIPE's -I) each direction gets a pool of at least that many
  // bytes cut into message slots, and consecutive messages use consecutive slots, so a slot
  // is only reused after the whole pool - larger than the last-level cache - has been walked.
  void prepare(std::size_t bytes, std::size_t pool_bytes, bool one_buffer);
  std::size_t slots() const { return slot_count_; }
  uint8_t* send_slot(std::size_t i) { return spool_.get() + (i % slot_count_) * stride_; }
  uint8_t* recv_slot(std::size_t i) { return rbase_ + (i % slot_count_) * stride_; }

  // Sends slot `slot` as the message at run offset `off` (pattern first, in integrity mode).
  bool send_message(std::size_t slot, std::size_t bytes, uint64_t off);
  // Receives into slot `slot`; in integrity mode checks the bytes against the pattern at `off`.
  bool recv_message(std::size_t slot, std::size_t bytes, uint64_t off);
  // Sends receive slot `slot` back as it arrived (ping-pong's echo), by the same path.
  bool echo_message(std::size_t slot, std::size_t bytes);

 private:
  struct FreeAligned {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t[], FreeAligned> spool_, rpool_;
  uint8_t* rbase_ = nullptr;  // where receives go: rpool_, or spool_ with one buffer
  std::size_t capacity_ = 0;  // bytes allocated per pool
  // The portable path's staging buffers, one per direction (bidirectional mode sends and
  // receives at once), each one message long.
  std::unique_ptr<uint8_t[], FreeAligned> sstage_, rstage_;
  std::size_t stage_capacity_ = 0;
  std::size_t stride_ = 0, slot_count_ = 1;
};

double now_seconds();  // CLOCK_MONOTONIC

}  // namespace fastsock_pipe
