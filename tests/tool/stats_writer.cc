// stats_writer: writes /dev/shm/fastsock-stats.<PID> files, well-formed or deliberately
// broken, so that tests/tool/test_stat_files.py can check how `fastsock stat` reads what
// another process published. It writes through src/stats_layout.hpp, the same layout the
// library uses, so a layout change breaks this helper at compile time, not silently.
//
// Usage: stats_writer MODE PID
//   valid          a well-formed area for PID (start time read from /proc/PID/stat)
//   hostile        valid header, but fields a buggy or hostile writer could leave:
//                  unterminated strings with escape sequences, out-of-range role/transport/
//                  state/family values
//   garbage        random bytes of exactly the right size
//   garbage-slots  valid header, random bytes in every slot
//   uninitialized  right size, magic not written yet (all zero)
//   bad-version    layout version kStatsVersion + 1
//   bad-slots      slot_count 17
//   pid-mismatch   header names another pid
//   start-mismatch valid, but with a start time PID never had (as after pid reuse)
//   size:N         N bytes of a valid area, truncated or zero-padded to N
//
// The contents of `valid` are fixed (tests compare them):
//   program "fake-server", chain "shm,verbs,vendor,tcp", 3 connections so far, 0 untracked
//   fd 3  listener 0.0.0.0:8080                          tcp  0/0          "listening"
//   fd 7  server   127.0.0.1:8080 <- 127.0.0.1:40000     tcp  1234/5678    "shm: not in this build"
//   fd 9  client   [::1]:40001 -> [::1]:9000             tcp  1099511627776/0
//   plus one closed slot (fd 11), which the reader must not show.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "stats_layout.hpp"
#include "transport_id.hpp"

namespace stats = fastsock::stats;

namespace {

// Field 22 of /proc/PID/stat, counted after the last ')' (the command name may contain
// spaces). 0 when the process does not exist, which is what a test of a dead pid wants.
uint64_t start_ticks(int pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return 0;
  char buf[1024] = {};
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  const char* p = std::strrchr(buf, ')');
  if (n == 0 || p == nullptr) return 0;
  p += 2;  // ") " -> field 3
  for (int field = 3; field < 22 && p != nullptr; ++field) {
    p = std::strchr(p, ' ');
    if (p != nullptr) ++p;
  }
  return p != nullptr ? std::strtoull(p, nullptr, 10) : 0;
}

void set_endpoint(stats::Endpoint& ep, int family, const char* addr, uint16_t port) {
  ep.family = uint16_t(family);
  ep.port = port;
  if (family != 0) inet_pton(family, addr, ep.addr);
}

void set_slot(stats::Slot& s, stats::SlotState state, int fd, stats::Role role,
              uint64_t sent, uint64_t received, const char* reason) {
  s.state.store(uint32_t(state));
  s.fd = fd;
  s.role = uint8_t(role);
  s.transport = uint8_t(fastsock::TransportId::tcp);
  s.bytes_sent.store(sent);
  s.bytes_received.store(received);
  s.opened_ns = 1700000000000000000ull;
  std::snprintf(s.reason, sizeof(s.reason), "%s", reason);
}

// The area is ~1 MiB: build it on the heap, zeroed like a fresh ftruncate()d file.
std::unique_ptr<stats::Area> fresh_area() {
  auto area = std::make_unique<stats::Area>();
  std::memset(static_cast<void*>(area.get()), 0, sizeof(stats::Area));
  return area;
}

void fill_valid(stats::Area& a, int pid) {
  stats::Header& h = a.header;
  h.magic = stats::kStatsMagic;
  h.version = stats::kStatsVersion;
  h.slot_count = stats::kSlotCount;
  h.pid = pid;
  h.start_time_ticks = start_ticks(pid);
  std::snprintf(h.program, sizeof(h.program), "fake-server");
  std::snprintf(h.chain, sizeof(h.chain), "shm,verbs,vendor,tcp");
  h.total_connections.store(3);

  set_slot(a.slots[0], stats::SlotState::listening, 3, stats::Role::listener, 0, 0, "listening");
  set_endpoint(a.slots[0].local, AF_INET, "0.0.0.0", 8080);
  set_slot(a.slots[5], stats::SlotState::connected, 7, stats::Role::server, 1234, 5678,
           "shm: not in this build");
  set_endpoint(a.slots[5].local, AF_INET, "127.0.0.1", 8080);
  set_endpoint(a.slots[5].peer, AF_INET, "127.0.0.1", 40000);
  set_slot(a.slots[9], stats::SlotState::connected, 9, stats::Role::client, 1ull << 40, 0, "");
  set_endpoint(a.slots[9].local, AF_INET6, "::1", 40001);
  set_endpoint(a.slots[9].peer, AF_INET6, "::1", 9000);
  set_slot(a.slots[12], stats::SlotState::closed, 11, stats::Role::client, 5, 5, "closed");
}

// What a buggy or hostile writer can leave: nothing NUL-terminated, terminal escape
// sequences, and enum values out of range. The reader must print sanitized text for the
// one usable slot, count the others as ignored, and never crash.
void fill_hostile(stats::Area& a) {
  stats::Header& h = a.header;
  std::memset(h.program, 'P', sizeof(h.program));
  std::memcpy(h.program, "\x1b[31mevil", 9);
  std::memset(h.chain, 'C', sizeof(h.chain));
  std::memset(h.config_error, 'E', sizeof(h.config_error));
  h.total_connections.store(UINT64_MAX);
  h.untracked.store(UINT64_MAX);

  stats::Slot& ok = a.slots[0];
  std::memset(ok.reason, 'R', sizeof(ok.reason));
  ok.reason[0] = '\a';
  ok.reason[1] = '\n';
  ok.fd = -5;
  a.slots[1].role = 200;
  a.slots[1].state.store(uint32_t(stats::SlotState::connected));
  a.slots[2].transport = 99;
  a.slots[2].state.store(uint32_t(stats::SlotState::connected));
  a.slots[3].state.store(12345);
  a.slots[5].local.family = 9999;  // shown, with the address as "?"
}

void fill_random(unsigned char* p, size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(rng());
}

int write_file(int pid, const void* data, size_t size) {
  std::string path = stats::kStatsPrefix + std::to_string(pid);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    std::perror(path.c_str());
    return 1;
  }
  const char* p = static_cast<const char*>(data);
  size_t left = size;
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n <= 0) {
      std::perror("write");
      ::close(fd);
      return 1;
    }
    p += n;
    left -= size_t(n);
  }
  ::close(fd);
  std::printf("%s\n", path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: stats_writer MODE PID (see the comment in stats_writer.cc)\n");
    return 2;
  }
  std::string_view mode = argv[1];
  int pid = std::atoi(argv[2]);
  auto area = fresh_area();
  unsigned char* bytes = reinterpret_cast<unsigned char*>(area.get());
  size_t size = sizeof(stats::Area);

  if (mode == "valid") {
    fill_valid(*area, pid);
  } else if (mode == "hostile") {
    fill_valid(*area, pid);
    fill_hostile(*area);
  } else if (mode == "garbage") {
    fill_random(bytes, size, 1234);
  } else if (mode == "garbage-slots") {
    fill_valid(*area, pid);
    fill_random(bytes + sizeof(stats::Header), size - sizeof(stats::Header), 99);
  } else if (mode == "uninitialized") {
    // all zero, as between the library's ftruncate() and its header write
  } else if (mode == "bad-version") {
    fill_valid(*area, pid);
    area->header.version = stats::kStatsVersion + 1;
  } else if (mode == "bad-slots") {
    fill_valid(*area, pid);
    area->header.slot_count = 17;
  } else if (mode == "pid-mismatch") {
    fill_valid(*area, pid);
    area->header.pid = pid + 1;
  } else if (mode == "start-mismatch") {
    fill_valid(*area, pid);
    area->header.start_time_ticks += 1;
  } else if (mode.starts_with("size:")) {
    fill_valid(*area, pid);
    size_t wanted = std::strtoull(argv[1] + 5, nullptr, 10);
    std::vector<unsigned char> data(wanted, 0);
    if (wanted) std::memcpy(data.data(), bytes, std::min(wanted, size));  // data() may be null
    return write_file(pid, data.data(), data.size());
  } else {
    std::fprintf(stderr, "stats_writer: unknown mode '%s'\n", argv[1]);
    return 2;
  }
  return write_file(pid, bytes, size);
}
