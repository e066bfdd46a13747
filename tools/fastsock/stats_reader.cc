#include "stats_reader.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>

#include "guarded_copy.hpp"
#include "proc_info.hpp"
#include "text.hpp"

namespace fastsock::tool {
namespace {

using stats::Header;
using stats::Slot;

// Every multi-byte field is read with memcpy from the private copy: no alignment or
// aliasing assumptions about bytes that came from another process.
template <class T>
T load(const unsigned char* base, size_t offset) {
  T value;
  std::memcpy(&value, base + offset, sizeof(T));
  return value;
}

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t));

std::string endpoint_text(const unsigned char* ep) {
  uint16_t family = load<uint16_t>(ep, offsetof(stats::Endpoint, family));
  uint16_t port = load<uint16_t>(ep, offsetof(stats::Endpoint, port));
  const unsigned char* addr = ep + offsetof(stats::Endpoint, addr);
  char text[INET6_ADDRSTRLEN] = {};
  switch (family) {
    case 0: return "-";
    case AF_INET:
      ::inet_ntop(AF_INET, addr, text, sizeof(text));
      return std::string(text) + ":" + std::to_string(port);
    case AF_INET6:
      ::inet_ntop(AF_INET6, addr, text, sizeof(text));
      return "[" + std::string(text) + "]:" + std::to_string(port);
    default: return "?";
  }
}

std::string errno_text(int err) { return std::strerror(err); }

}  // namespace

const char* role_name(stats::Role role) {
  switch (role) {
    case stats::Role::none: return "-";
    case stats::Role::client: return "client";
    case stats::Role::server: return "server";
    case stats::Role::listener: return "listener";
    case stats::Role::inherited: return "inherited";
  }
  return "?";
}

const char* state_name(stats::SlotState state) {
  switch (state) {
    case stats::SlotState::free: return "free";
    case stats::SlotState::listening: return "listening";
    case stats::SlotState::connected: return "connected";
    case stats::SlotState::closed: return "closed";
  }
  return "?";
}

std::string stats_path(pid_t pid) { return stats::kStatsPrefix + std::to_string(pid); }

bool decode_area(const unsigned char* area, size_t size, pid_t pid, ProcessStats& out,
                 std::string& detail) {
  if (size != stats::kAreaSize) {
    detail = "wrong size (" + std::to_string(size) + " bytes, expected " +
             std::to_string(stats::kAreaSize) + ")";
    return false;
  }
  uint64_t magic = load<uint64_t>(area, offsetof(Header, magic));
  if (magic != stats::kStatsMagic) {
    detail = "bad magic number (not a fastsock stats area, or not initialized yet)";
    return false;
  }
  uint32_t version = load<uint32_t>(area, offsetof(Header, version));
  if (version != stats::kStatsVersion) {
    detail = "layout version " + std::to_string(version) + ", this tool reads version " +
             std::to_string(stats::kStatsVersion);
    return false;
  }
  uint32_t slot_count = load<uint32_t>(area, offsetof(Header, slot_count));
  if (slot_count != stats::kSlotCount) {
    detail = "slot count " + std::to_string(slot_count) + ", expected " +
             std::to_string(stats::kSlotCount);
    return false;
  }
  int32_t header_pid = load<int32_t>(area, offsetof(Header, pid));
  if (header_pid != pid) {
    detail = "written for pid " + std::to_string(header_pid) + ", not " + std::to_string(pid);
    return false;
  }

  out = ProcessStats{};
  out.pid = pid;
  out.start_time_ticks = load<uint64_t>(area, offsetof(Header, start_time_ticks));
  const char* chars = reinterpret_cast<const char*>(area);
  out.program = printable(chars + offsetof(Header, program), sizeof(Header::program));
  out.chain = printable(chars + offsetof(Header, chain), sizeof(Header::chain));
  out.config_error =
      printable(chars + offsetof(Header, config_error), sizeof(Header::config_error));
  out.untracked = load<uint64_t>(area, offsetof(Header, untracked));
  out.total_connections = load<uint64_t>(area, offsetof(Header, total_connections));

  for (uint32_t i = 0; i < stats::kSlotCount; ++i) {
    const unsigned char* slot = area + sizeof(Header) + size_t(i) * sizeof(Slot);
    uint32_t state = load<uint32_t>(slot, offsetof(Slot, state));
    if (state == uint32_t(stats::SlotState::free) || state == uint32_t(stats::SlotState::closed))
      continue;
    uint8_t role = load<uint8_t>(slot, offsetof(Slot, role));
    uint8_t transport = load<uint8_t>(slot, offsetof(Slot, transport));
    bool known_state = state == uint32_t(stats::SlotState::listening) ||
                       state == uint32_t(stats::SlotState::connected);
    if (!known_state || role > stats::kMaxRole || transport >= kTransportCount) {
      ++out.ignored_slots;
      continue;
    }
    ConnectionStats c;
    c.fd = load<int32_t>(slot, offsetof(Slot, fd));
    c.state = stats::SlotState(state);
    c.role = stats::Role(role);
    c.transport = TransportId(transport);
    c.local = endpoint_text(slot + offsetof(Slot, local));
    c.peer = endpoint_text(slot + offsetof(Slot, peer));
    c.bytes_sent = load<uint64_t>(slot, offsetof(Slot, bytes_sent));
    c.bytes_received = load<uint64_t>(slot, offsetof(Slot, bytes_received));
    c.opened_ns = load<uint64_t>(slot, offsetof(Slot, opened_ns));
    c.reason = printable(reinterpret_cast<const char*>(slot) + offsetof(Slot, reason),
                         sizeof(Slot::reason));
    out.connections.push_back(std::move(c));
  }
  std::stable_sort(out.connections.begin(), out.connections.end(),
                   [](const ConnectionStats& a, const ConnectionStats& b) { return a.fd < b.fd; });
  return true;
}

StatsFile read_stats_file(pid_t pid) {
  StatsFile f;
  f.path = stats_path(pid);

  // O_NOFOLLOW: /dev/shm is world-writable, and a planted symlink must not make the tool
  // read (or later unlink through) some other file. O_NONBLOCK: a planted FIFO must not
  // hang it.
  int fd = ::open(f.path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) {
      f.status = StatsStatus::missing;
      f.detail = "no " + f.path;
      return f;
    }
    struct stat st {};
    if (::lstat(f.path.c_str(), &st) == 0) {
      f.have_identity = true;
      f.dev = st.st_dev;
      f.ino = st.st_ino;
      f.owner = st.st_uid;
    }
    if (f.have_identity && !live_process_start_ticks(pid)) {
      f.status = StatsStatus::stale;
      f.detail = "process " + std::to_string(pid) + " has exited";
      return f;
    }
    f.status = err == ELOOP ? StatsStatus::invalid : StatsStatus::unreadable;
    f.detail = err == ELOOP ? "is a symbolic link, not a stats file" : errno_text(err);
    return f;
  }

  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    f.status = StatsStatus::unreadable;
    f.detail = errno_text(errno);
    ::close(fd);
    return f;
  }
  f.have_identity = true;
  f.dev = st.st_dev;
  f.ino = st.st_ino;
  f.owner = st.st_uid;

  std::optional<uint64_t> start = live_process_start_ticks(pid);
  if (!start) {
    f.status = StatsStatus::stale;
    f.detail = "process " + std::to_string(pid) + " has exited";
    ::close(fd);
    return f;
  }
  if (!S_ISREG(st.st_mode)) {
    f.status = StatsStatus::invalid;
    f.detail = "not a regular file";
    ::close(fd);
    return f;
  }
  if (size_t(st.st_size) != stats::kAreaSize || st.st_size < 0) {
    f.status = StatsStatus::invalid;
    f.detail = "wrong size (" + std::to_string(st.st_size) + " bytes, expected " +
               std::to_string(stats::kAreaSize) + ")";
    ::close(fd);
    return f;
  }

  void* map = ::mmap(nullptr, stats::kAreaSize, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) {
    f.status = StatsStatus::unreadable;
    f.detail = "mmap: " + errno_text(errno);
    return f;
  }
  std::vector<unsigned char> copy(stats::kAreaSize);
  bool copied = copy_guarded(copy.data(), map, stats::kAreaSize);
  ::munmap(map, stats::kAreaSize);
  if (!copied) {
    f.status = StatsStatus::invalid;
    f.detail = "the file shrank while being read";
    return f;
  }

  std::string detail;
  if (!decode_area(copy.data(), copy.size(), pid, f.stats, detail)) {
    f.status = StatsStatus::invalid;
    f.detail = detail;
    return f;
  }
  if (f.stats.start_time_ticks != *start) {
    f.status = StatsStatus::stale;
    f.detail = "pid " + std::to_string(pid) +
               " now belongs to another process (its start time differs from the file's)";
    return f;
  }
  f.status = StatsStatus::ok;
  return f;
}

int remove_stale(const StatsFile& file) {
  if (file.status != StatsStatus::stale || !file.have_identity) return -EINVAL;
  struct stat st {};
  if (::lstat(file.path.c_str(), &st) != 0) return -errno;
  if (st.st_dev != file.dev || st.st_ino != file.ino) return -ESTALE;
  if (st.st_uid != ::geteuid()) return -EPERM;
  return ::unlink(file.path.c_str()) == 0 ? 0 : -errno;
}

std::vector<pid_t> list_stats_pids() {
  std::vector<pid_t> pids;
  std::string_view prefix = stats::kStatsPrefix;
  size_t slash = prefix.rfind('/');
  std::string dir(prefix.substr(0, slash));
  std::string_view name_prefix = prefix.substr(slash + 1);

  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return pids;
  while (const dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (!name.starts_with(name_prefix)) continue;
    std::string_view digits = name.substr(name_prefix.size());
    if (digits.empty() || digits.size() > 10 || digits[0] == '0') continue;
    long long value = 0;
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (ec != std::errc() || ptr != digits.data() + digits.size()) continue;
    if (value <= 0 || value > INT_MAX) continue;
    pids.push_back(pid_t(value));
  }
  ::closedir(d);
  std::sort(pids.begin(), pids.end());
  return pids;
}

}  // namespace fastsock::tool
