#include "endpoint.hpp"

#include <time.h>

#include <cstring>

#include "integrity.hpp"
#include "net.hpp"

namespace fastsock_pipe {

double now_seconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void Endpoint::resize(std::size_t bytes) {
  sbuf.resize(bytes);
  rbuf.resize(bytes);
  // Touch the pages and give them real data: NetPIPE notes that untouched buffers measure
  // faster than anything a real application would see.
  if (!integrity) std::memset(sbuf.data(), 0x5a, bytes);
  std::memset(rbuf.data(), 0, bytes);
}

bool Endpoint::send_message(std::size_t bytes) {
  if (integrity) fill_pattern(sbuf.data(), bytes, offset);
  long long flip = -1;
  if (corrupt_at >= 0 && static_cast<uint64_t>(corrupt_at) >= offset &&
      static_cast<uint64_t>(corrupt_at) < offset + bytes) {
    flip = corrupt_at - static_cast<long long>(offset);
    sbuf[static_cast<std::size_t>(flip)] ^= 0xff;
    corrupt_at = -1;  // once per run
  }
  bool ok = send_all(fd, sbuf.data(), bytes);
  if (flip >= 0) sbuf[static_cast<std::size_t>(flip)] ^= 0xff;
  return ok;
}

bool Endpoint::recv_message(std::size_t bytes, uint64_t base) {
  if (!recv_all(fd, rbuf.data(), bytes)) return false;
  if (integrity) {
    uint64_t first = 0;
    uint64_t bad = check_pattern(rbuf.data(), bytes, base, &first);
    if (bad != 0 && errors == 0) first_bad = first;
    errors += bad;
  }
  return true;
}

}  // namespace fastsock_pipe
