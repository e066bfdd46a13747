#include "shm_exec_token.hpp"

#include <cstdio>

namespace fastsock::shm {

static_assert(sizeof(unsigned long long) == sizeof(uint64_t));

int format_exec_token(char* out, size_t cap, const ExecToken& t) {
  return snprintf(out, cap, "%d,%d,%d,%d,%llu,%llu,%llu,%u", t.side, t.memfd, t.own_bell,
                  t.peer_bell, (unsigned long long)t.tcp_sent,
                  (unsigned long long)t.tcp_received, (unsigned long long)t.shm_sent, t.flags);
}

bool parse_exec_token(const char* text, ExecToken& out) {
  int side, memfd, own, peer;
  unsigned long long tcp_sent, tcp_received, shm_sent;
  unsigned flags;
  char end;  // anything after the flags makes a ninth conversion: refused
  if (sscanf(text, "%d,%d,%d,%d,%llu,%llu,%llu,%u%c", &side, &memfd, &own, &peer, &tcp_sent,
             &tcp_received, &shm_sent, &flags, &end) != 8 ||
      (side != 0 && side != 1) || memfd < 0 || own < 0 || peer < 0 || own == peer ||
      memfd == own || memfd == peer)
    return false;
  out = ExecToken{side, memfd, own, peer, tcp_sent, tcp_received, shm_sent, flags};
  return true;
}

}  // namespace fastsock::shm
