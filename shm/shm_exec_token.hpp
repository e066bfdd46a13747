// The shm link's token in FASTSOCK_EXEC_LINKS (src/exec_handover.hpp): what the old image
// hands over beyond the segment (shm/shm_conn_exec.cc). Written and read here with no
// process state, so that the unit tests and the fuzzer (tests/fuzz/fuzz_exec_links.cc) run
// exactly what Conn::exec_handover and Conn::adopt run:
//
//   <side>,<memfd>,<own eventfd>,<peer eventfd>,<tcp_sent>,<tcp_received>,<shm_sent>,<flags>
#pragma once

#include <cstddef>
#include <cstdint>

namespace fastsock::shm {

// flags: this end's switch offset is published, shut for writing, shut for reading,
// SO_LINGER {1, 0} (abortive close).
inline constexpr unsigned kExecSwitched = 1, kExecWriteShut = 2, kExecReadShut = 4,
                          kExecAbortive = 8;

struct ExecToken {
  int side;
  int memfd;
  int own_bell;   // this end's eventfd
  int peer_bell;  // the peer's
  uint64_t tcp_sent;
  uint64_t tcp_received;
  uint64_t shm_sent;
  unsigned flags;
};

// snprintf's contract: the token's length (>= cap: truncated), negative on error.
int format_exec_token(char* out, size_t cap, const ExecToken& t);

// The token `text` holds, if it is well formed: eight numbers and nothing after them, side
// 0 or 1, and three distinct non-negative descriptors (adopt owns them from the start: a
// memfd equal to an eventfd would be closed twice when the attach fails). Whether they are
// what they claim to be is for adopt to check.
bool parse_exec_token(const char* text, ExecToken& out);

}  // namespace fastsock::shm
