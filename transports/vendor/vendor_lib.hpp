// A vendor socket library, loaded at run time from its profile (docs/vendor.md).
//
// As with the verbs link (transports/verbs/verbs_lib.hpp), libfastsock.so never links
// against a vendor library: most processes never use one, and a host without it must still
// load fastsock. The library is opened with dlopen the first time a process could use it,
// every entry point of the profile is resolved then, and when anything is missing the
// reason is kept as one sentence for `fastsock info`, stats and the debug log.
//
// Loading flags:
// - prefixed names (rsocket): RTLD_NOW | RTLD_LOCAL. Its symbols do not clash with
//   anything, and RTLD_LOCAL keeps them out of the application's way.
// - plain names (a preload-style library): RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND. The
//   library defines socket, connect, poll, ...; without DEEPBIND its own internal calls to
//   those names would bind to the first definition in the global scope — fastsock's hooks —
//   and loop back into us. DEEPBIND makes it prefer its own definitions and its
//   dependencies' (libc). AddressSanitizer's runtime refuses DEEPBIND (it aborts the
//   process), so under ASan a plain-named library is reported unusable instead.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <mutex>
#include <utility>

#include "vendor_profile.hpp"

namespace fastsock::vendors {

// The entry points, with POSIX's signatures, in the order of enum Entry. A member is null
// when the profile allowed the entry to be absent and the library lacks it.
struct Api {
  int (*socket)(int domain, int type, int protocol);
  int (*bind)(int fd, const struct sockaddr* addr, socklen_t len);
  int (*listen)(int fd, int backlog);
  int (*accept)(int fd, struct sockaddr* addr, socklen_t* len);
  int (*connect)(int fd, const struct sockaddr* addr, socklen_t len);
  ssize_t (*send)(int fd, const void* buf, size_t len, int flags);
  ssize_t (*recv)(int fd, void* buf, size_t len, int flags);
  ssize_t (*sendmsg)(int fd, const struct msghdr* msg, int flags);
  ssize_t (*recvmsg)(int fd, struct msghdr* msg, int flags);
  int (*poll)(struct pollfd* fds, nfds_t nfds, int timeout);
  int (*close)(int fd);
  int (*shutdown)(int fd, int how);
  int (*setsockopt)(int fd, int level, int name, const void* value, socklen_t len);
  int (*getsockopt)(int fd, int level, int name, void* value, socklen_t* len);
  int (*fcntl)(int fd, int cmd, ...);
};
static_assert(sizeof(Api) == kEntryCount * sizeof(void (*)()),
              "Api has one member per Entry, in Entry's order");

// poll through the library's own entry (`library_poll`: readiness=poll) or the kernel's.
// The library's is called with a timeout of 0 or -1 only: a finite wait is polls 1 ms
// apart. rdma-core's rpoll before v63 leaks its count of sleeping pollers whenever a
// finite timeout expires, after which every rpoll in the process spins in sched_yield and
// no longer looks at kernel descriptors (fixed upstream by a1747742e, "librdmacm: Fix rpoll
// in case of timeout"; Debian 12 ships 44.0).
int poll_through(const Api& api, bool library_poll, struct pollfd* fds, nfds_t n,
                 int timeout_ms) noexcept;

// The outcome of loading one profile's library. Plain data: no destructor unloads the
// library, which stays mapped for the life of the process (libraries that start threads,
// as librdmacm does, cannot be unloaded safely; dlopen counts repeated loads).
struct Lib {
  Api api{};
  EntryMask present = 0;     // entries resolved
  bool ok = false;
  char library[256] = {};    // the library that was loaded (or the last one tried)
  char reason[224] = {};     // when !ok: one sentence, no trailing period

  bool has(Entry e) const noexcept { return present & entry_bit(e); }
};

// Loads `p` now: tries each of its libraries in order and resolves every entry point. Never
// throws and never crashes on a missing or broken library. Each call dlopens again (cheap
// for a loaded library); use LazyLib to load once.
Lib load(const Profile& p) noexcept;

// One profile's library, loaded on first use, once per process (thread-safe).
class LazyLib {
 public:
  explicit LazyLib(Profile profile) : profile_(std::move(profile)) {}
  const Profile& profile() const noexcept { return profile_; }
  // The loaded library; check Lib::ok and Lib::reason.
  const Lib& get() noexcept;

 private:
  Profile profile_;
  std::once_flag once_;
  Lib lib_;
};

}  // namespace fastsock::vendors
