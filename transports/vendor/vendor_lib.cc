#include "vendor_lib.hpp"

#include <dlfcn.h>
#include <time.h>

#include <cstdio>
#include <cstring>

#include "guard.hpp"
#include "link_io.hpp"
#include "real.hpp"

namespace fastsock::vendors {
namespace {

// Stores a resolved symbol in the member of `api` that belongs to `e`.
void set_entry(Api& api, Entry e, void* sym) noexcept {
#define FASTSOCK_VENDOR_SET(name) \
  case Entry::name: api.name = reinterpret_cast<decltype(api.name)>(sym); return;
  switch (e) {
    FASTSOCK_VENDOR_SET(socket)
    FASTSOCK_VENDOR_SET(bind)
    FASTSOCK_VENDOR_SET(listen)
    FASTSOCK_VENDOR_SET(accept)
    FASTSOCK_VENDOR_SET(connect)
    FASTSOCK_VENDOR_SET(send)
    FASTSOCK_VENDOR_SET(recv)
    FASTSOCK_VENDOR_SET(sendmsg)
    FASTSOCK_VENDOR_SET(recvmsg)
    FASTSOCK_VENDOR_SET(poll)
    FASTSOCK_VENDOR_SET(close)
    FASTSOCK_VENDOR_SET(shutdown)
    FASTSOCK_VENDOR_SET(setsockopt)
    FASTSOCK_VENDOR_SET(getsockopt)
    FASTSOCK_VENDOR_SET(fcntl)
  }
#undef FASTSOCK_VENDOR_SET
}

// How bad a failure is, so that the reason kept is the most useful one when several
// libraries were tried: a library that loaded but lacks a symbol says more than one that
// failed to load, which says more than one that is not there.
enum class Failure { none, missing, unloadable, incomplete };

// AddressSanitizer's dlopen interceptor aborts the process on RTLD_DEEPBIND; it must never
// be asked for. Its runtime is in the process when this symbol is.
bool asan_present() noexcept { return dlsym(RTLD_DEFAULT, "__asan_init") != nullptr; }

// dlerror()'s text for a file that is not there (glibc: "...: cannot open shared object
// file: No such file or directory").
bool is_not_found(const char* err) noexcept {
  return err && std::strstr(err, "No such file or directory") != nullptr;
}

// Resolves every entry of `p` in `handle`. Returns false, with the reason, when a required
// entry is missing.
bool resolve(const Profile& p, void* handle, const char* library, Lib& out) noexcept {
  const EntryMask required = required_entries(p);
  for (int i = 0; i < kEntryCount; ++i) {
    const auto e = Entry(i);
    char symbol[kMaxPrefixBytes + 16];
    std::snprintf(symbol, sizeof symbol, "%s%.*s",
                  p.naming == Naming::prefix ? p.prefix.c_str() : "",
                  int(entry_name(e).size()), entry_name(e).data());
    dlerror();  // clear: a null symbol value is legal, only dlerror tells failure apart
    void* sym = dlsym(handle, symbol);
    if (sym == nullptr) {
      if (required & entry_bit(e)) {
        std::snprintf(out.reason, sizeof out.reason, "%s lacks %s", library, symbol);
        return false;
      }
      if (!(p.optional & entry_bit(e))) {
        // Neither required nor declared optional: the profile promised it.
        std::snprintf(out.reason, sizeof out.reason,
                      "%s lacks %s (not declared optional in profile '%s')", library, symbol,
                      p.name.c_str());
        return false;
      }
      continue;
    }
    set_entry(out.api, e, sym);
    out.present = EntryMask(out.present | entry_bit(e));
  }
  return true;
}

}  // namespace

Lib load(const Profile& p) noexcept {
  // The library's initialisers may open files and sockets: those calls must not enter
  // fastsock's connection logic.
  ReentryGuard guard;
  Lib best;
  Failure worst = Failure::none;
  auto keep = [&](Failure f, const Lib& attempt) {
    if (f > worst) {
      worst = f;
      best = attempt;
    }
  };

  int flags = RTLD_NOW | RTLD_LOCAL;
  if (p.naming == Naming::plain) {
    if (asan_present()) {
      std::snprintf(best.reason, sizeof best.reason,
                    "profile '%s' names a preload-style library, which needs RTLD_DEEPBIND, "
                    "and AddressSanitizer forbids it",
                    p.name.c_str());
      return best;
    }
    flags |= RTLD_DEEPBIND;
  }

  for (const std::string& library : p.libraries) {
    Lib attempt;
    std::snprintf(attempt.library, sizeof attempt.library, "%s", library.c_str());
    dlerror();
    void* handle = dlopen(library.c_str(), flags);
    if (handle == nullptr) {
      const char* err = dlerror();
      if (is_not_found(err)) {
        std::snprintf(attempt.reason, sizeof attempt.reason, "%s is not installed",
                      library.c_str());
        keep(Failure::missing, attempt);
      } else {
        std::snprintf(attempt.reason, sizeof attempt.reason, "%s cannot be loaded: %s",
                      library.c_str(), err ? err : "unknown dlopen error");
        keep(Failure::unloadable, attempt);
      }
      continue;
    }
    if (resolve(p, handle, library.c_str(), attempt)) {
      attempt.ok = true;
      attempt.reason[0] = '\0';
      return attempt;
    }
    // Not dlclose()d: its initialisers have run, and a library that started a thread
    // would crash when unmapped under it. A mapping is a small price.
    keep(Failure::incomplete, attempt);
  }
  if (worst == Failure::missing && p.libraries.size() > 1) {
    // "none of a, b is installed" says more than naming only the last one tried.
    int n = std::snprintf(best.reason, sizeof best.reason, "none of ");
    for (size_t i = 0; i < p.libraries.size() && n > 0 && size_t(n) < sizeof best.reason; ++i)
      n += std::snprintf(best.reason + n, sizeof best.reason - size_t(n), "%s%s",
                         i ? ", " : "", p.libraries[i].c_str());
    if (n > 0 && size_t(n) < sizeof best.reason)
      std::snprintf(best.reason + n, sizeof best.reason - size_t(n), " is installed");
  }
  if (worst == Failure::none)
    std::snprintf(best.reason, sizeof best.reason, "profile '%s' names no library",
                  p.name.c_str());
  return best;
}

const Lib& LazyLib::get() noexcept {
  std::call_once(once_, [this] { lib_ = load(profile_); });
  return lib_;
}

int poll_through(const Api& api, bool library_poll, pollfd* fds, nfds_t n,
                 int timeout_ms) noexcept {
  if (!library_poll) return real().poll(fds, n, timeout_ms);
  if (timeout_ms <= 0) return api.poll(fds, n, timeout_ms < 0 ? -1 : 0);
  const int64_t end = link_io::now_ns() + int64_t(timeout_ms) * 1'000'000;
  for (;;) {
    const int rc = api.poll(fds, n, 0);
    if (rc != 0 || link_io::now_ns() >= end) return rc;
    const timespec pause{0, 1'000'000};
    nanosleep(&pause, nullptr);
  }
}

}  // namespace fastsock::vendors
