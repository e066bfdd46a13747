#include "transports.hpp"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>

#include "library_path.hpp"

namespace fastsock_pipe {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string base_name(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool is_sanitizer_runtime(const std::string& entry) {
  const std::string b = base_name(entry);
  return b.rfind("libasan", 0) == 0 || b.rfind("libubsan", 0) == 0 ||
         b.rfind("libtsan", 0) == 0 || b.rfind("libclang_rt.", 0) == 0;
}

}  // namespace

bool resolve_transports(const std::vector<std::string>& entries, std::vector<TransportSpec>& out) {
  for (const std::string& e : entries) {
    TransportSpec t;
    if (e == "tcp") {
      t = {e, "loopback TCP (127.0.0.1), kernel, no preload library", Family::inet, "", ""};
    } else if (e == "tcp6") {
      t = {e, "loopback TCP over IPv6 (::1), kernel, no preload library", Family::inet6, "", ""};
    } else if (e == "unix") {
      t = {e, "Unix stream socket, kernel, no preload library", Family::unix_stream, "", ""};
    } else if (e == "fastsock") {
      t = {e, "loopback TCP (127.0.0.1) under LD_PRELOAD=libfastsock.so", Family::inet, "", ""};
      const fastsock::tool::LibraryLocation loc = fastsock::tool::locate_library("");
      if (loc.path.empty()) t.error = loc.error;
      else t.preload = loc.path;
    } else if (ends_with(e, ".so")) {
      t = {base_name(e), "loopback TCP (127.0.0.1) under LD_PRELOAD=" + e, Family::inet, "", ""};
      char buf[PATH_MAX];
      if (realpath(e.c_str(), buf) && access(buf, R_OK) == 0) t.preload = buf;
      else t.error = e + ": no such readable file";
    } else {
      std::fprintf(stderr,
                   "fastsock-pipe: --compare: unknown transport '%s' (tcp, tcp6, unix, fastsock, "
                   "or a library path ending in .so)\n",
                   e.c_str());
      return false;
    }
    for (const TransportSpec& prev : out) {
      if (prev.name == t.name) {
        std::fprintf(stderr, "fastsock-pipe: --compare: '%s' given twice\n", t.name.c_str());
        return false;
      }
    }
    out.push_back(t);
  }
  return true;
}

std::string worker_ld_preload(const char* existing, const std::string& preload) {
  std::string out;
  const std::string all = existing ? existing : "";
  std::size_t pos = 0;
  while (pos <= all.size()) {
    std::size_t end = all.find_first_of(": ", pos);
    if (end == std::string::npos) end = all.size();
    const std::string entry = all.substr(pos, end - pos);
    pos = end + 1;
    if (entry.empty() || !is_sanitizer_runtime(entry)) continue;
    out += (out.empty() ? "" : ":") + entry;
  }
  if (!preload.empty()) out += (out.empty() ? "" : ":") + preload;
  return out;
}

}  // namespace fastsock_pipe
