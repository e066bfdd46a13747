// Helpers shared by the shm unit tests.
#pragma once

#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "shm_segment.hpp"

namespace shm_test {

// The byte at stream offset i of the test pattern (not periodic in any ring window).
inline unsigned char pattern(uint64_t i) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull;
  return static_cast<unsigned char>((x >> 56) ^ (i >> 11));
}

inline std::vector<unsigned char> pattern_bytes(uint64_t from, size_t n) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = pattern(from + i);
  return v;
}

inline iovec iov_of(void* p, size_t n) { return iovec{p, n}; }

// A second mapping of the same segment, as the acceptor would have it.
inline fastsock::shm::Status attach_copy(const fastsock::shm::Segment& from,
                                         fastsock::shm::Segment& to,
                                         const fastsock::shm::Limits& acceptable = {}) {
  return to.attach(::dup(from.fd()), acceptable);
}

// Waits for a forked child; returns its exit status, or 128 + signal.
inline int wait_child(pid_t pid) {
  int st = 0;
  if (::waitpid(pid, &st, 0) != pid) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

}  // namespace shm_test
