#include "vendor_probe.hpp"

#include <dirent.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "guard.hpp"

namespace fastsock::vendors {
namespace {

// `path` exists and, if it is a directory, holds an entry (a device directory such as
// /sys/class/infiniband exists, empty, on hosts without the device).
bool present(const char* path) noexcept {
  struct stat st;
  if (stat(path, &st) != 0) return false;
  if (!S_ISDIR(st.st_mode)) return true;
  DIR* dir = opendir(path);
  if (!dir) return false;
  bool entry = false;
  while (const dirent* e = readdir(dir))
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) entry = true;
  closedir(dir);
  return entry;
}

}  // namespace

bool probe_profile(const Profile& p, LazyLib& lazy, char* why, size_t why_len) noexcept {
  if (!p.needs.empty() && !present(p.needs.c_str())) {
    snprintf(why, why_len, "no device (%s is missing or empty)", p.needs.c_str());
    return false;
  }
  const Lib& lib = lazy.get();
  if (!lib.ok) {
    snprintf(why, why_len, "%s", lib.reason);
    return false;
  }
  // Every profile takes IPv4 (ipv6=no only removes IPv6).
  const int domain = socket_domain(p, AF_INET);
  ReentryGuard guard;  // a plain-named library's socket() must not come back into us
  const int fd = lib.api.socket(domain, SOCK_STREAM, 0);
  if (fd < 0) {
    snprintf(why, why_len, "socket(%d) failed (%s)", domain, strerrordesc_np(errno));
    return false;
  }
  (void)lib.api.close(fd);
  return true;
}

}  // namespace fastsock::vendors
