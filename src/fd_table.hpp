// The fd table: O(1) from a descriptor number to its tracked Socket, lock-free on lookup.
//
// Two levels: a static array of chunk pointers (zero pages until touched) and chunks of
// 4096 entries allocated on first use, covering every descriptor number Linux can hand out
// (fs.nr_open is at most 2^30). A lookup for an untracked descriptor, e.g. a regular file,
// costs two loads; that is the whole price a non-socket read() or write() pays.
#pragma once

#include <atomic>
#include <cstddef>
#include <utility>

#include "socket.hpp"

namespace fastsock {

// A counted reference to a Socket; empty for an untracked descriptor.
class SocketRef {
 public:
  SocketRef() noexcept = default;
  explicit SocketRef(Socket* s) noexcept : s_(s) {}  // adopts one reference
  SocketRef(SocketRef&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  SocketRef& operator=(SocketRef&& o) noexcept {
    if (this != &o) { reset(); s_ = std::exchange(o.s_, nullptr); }
    return *this;
  }
  SocketRef(const SocketRef&) = delete;
  SocketRef& operator=(const SocketRef&) = delete;
  ~SocketRef() { reset(); }

  explicit operator bool() const noexcept { return s_ != nullptr; }
  Socket* operator->() const noexcept { return s_; }
  Socket& operator*() const noexcept { return *s_; }
  Socket* get() const noexcept { return s_; }
  Socket* leak() noexcept { return std::exchange(s_, nullptr); }  // the caller keeps the reference
  void reset() noexcept;

 private:
  Socket* s_ = nullptr;
};

namespace detail {
// real.hpp: set once the real entry points are resolved and inherited sockets adopted.
extern std::atomic<bool> g_real_ready;
void resolve_real() noexcept;
}  // namespace detail

namespace fd_table {

inline constexpr int kChunkBits = 12;
inline constexpr int kChunkSize = 1 << kChunkBits;
inline constexpr int kMaxFd = 1 << 30;

// A new Socket with one reference (the caller's), or an empty ref if memory ran out.
SocketRef make_socket() noexcept;

namespace detail {
using Entry = std::atomic<Socket*>;
extern std::atomic<Entry*> g_chunks[size_t(kMaxFd) >> kChunkBits];
SocketRef lookup_slow(Entry& entry) noexcept;
}  // namespace detail

// The table entry of `fd` if one can hold a Socket, else nullptr.
inline detail::Entry* entry_of(int fd) noexcept {
  if (unsigned(fd) >= unsigned(kMaxFd)) [[unlikely]] return nullptr;
  detail::Entry* chunk =
      detail::g_chunks[unsigned(fd) >> kChunkBits].load(std::memory_order_acquire);
  if (!chunk && !fastsock::detail::g_real_ready.load(std::memory_order_acquire)) [[unlikely]] {
    // The process's first hooked call: the sockets it inherited (connections continuing
    // over exec among them) enter the table before this call looks `fd` up.
    fastsock::detail::resolve_real();
    chunk = detail::g_chunks[unsigned(fd) >> kChunkBits].load(std::memory_order_acquire);
  }
  return chunk ? &chunk[fd & (kChunkSize - 1)] : nullptr;
}

// False when `fd` is certainly not a tracked socket (every file, pipe, UDP socket): the data
// hooks then call the real function directly, and this is the whole cost they add.
inline bool maybe_tracked(int fd) noexcept {
  detail::Entry* entry = entry_of(fd);
  return entry && entry->load(std::memory_order_relaxed);
}

// The Socket tracked for `fd` right now, without taking a reference: a hint for calls that
// only need to know whether the kernel carries the connection (Socket::user_io) and then
// count bytes in its slot. Safe because Sockets are type-stable and never unmapped, and
// stats slots are never unmapped: if another thread closes `fd` meanwhile, the worst
// outcome is bytes credited to the wrong connection's counters in a program that already
// races its own close. Anything that acts on the connection must take a lookup().
inline Socket* peek(int fd) noexcept {
  detail::Entry* entry = entry_of(fd);
  return entry ? entry->load(std::memory_order_acquire) : nullptr;
}

// The application may have changed `fd`'s O_NONBLOCK, timeouts or FD_CLOEXEC: what the
// socket remembers of them (socket_mode.hpp) is asked of the kernel again. Through peek():
// at worst another connection asks once more.
inline void mode_changed(int fd) noexcept {
  if (Socket* s = peek(fd)) s->mode.forget();
}

// The Socket tracked for `fd`, or an empty ref.
inline SocketRef lookup(int fd) noexcept {
  detail::Entry* entry = entry_of(fd);
  if (!entry || !entry->load(std::memory_order_relaxed)) return {};
  return detail::lookup_slow(*entry);
}

// Makes `fd` refer to `s` (taking a new reference), or to nothing when `s` is null; drops
// the reference to whatever `fd` referred to before. Returns false if fd is out of range or
// memory ran out (the descriptor then simply stays untracked: pass-through).
bool install(int fd, Socket* s) noexcept;

// The same, handing the caller's reference to the table (two atomic operations fewer than
// install(fd, s.get()) followed by dropping `s`: socket(), accept() and dup() use it).
bool install_owned(int fd, SocketRef s) noexcept;

// Forgets `fd` (the application closed it).
inline void remove(int fd) noexcept { install(fd, nullptr); }

// Forgets every descriptor in [first, last] (close_range, closefrom).
void remove_range(unsigned first, unsigned last) noexcept;

// Calls fn for every tracked descriptor (a Socket reachable through several descriptors
// is passed once per descriptor). For the rare whole-process events: fork, exec.
void for_each_socket(void (*fn)(int fd, Socket& s, void* context), void* context) noexcept;

// Number of Socket objects alive (tests, stats).
size_t live_sockets() noexcept;

}  // namespace fd_table

// Called when the last reference to a Socket goes away: detach the transport, retire the
// stats slot. Defined in ops_socket.cc.
void on_socket_released(Socket& s) noexcept;

}  // namespace fastsock
