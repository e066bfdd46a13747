#include "library_path.hpp"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "fastsock_build_config.h"

namespace fastsock::tool {
namespace {

constexpr std::string_view kLibraryName = "libfastsock.so";

// realpath(3) of `path`, or empty when it does not name an existing file.
std::string resolved(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) return {};
  return buf;
}

// The directory holding the running executable, from /proc/self/exe (argv[0] may be a
// relative name found through PATH, or a symlink).
std::string executable_dir() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return {};
  std::string exe(buf, size_t(n));
  size_t slash = exe.rfind('/');
  return slash == std::string::npos ? std::string() : exe.substr(0, slash);
}

std::string_view basename_of(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// libfastsock.so, libfastsock.so.0, libfastsock.so.0.1.0 ...
bool names_fastsock_library(std::string_view entry) {
  std::string_view base = basename_of(entry);
  return base == kLibraryName ||
         (base.starts_with(kLibraryName) && base[kLibraryName.size()] == '.');
}

}  // namespace

LibraryLocation locate_library(std::string_view explicit_path) {
  LibraryLocation loc;
  auto found = [&](const std::string& candidate, const char* source) {
    loc.path = resolved(candidate);
    loc.source = source;
    return !loc.path.empty();
  };

  if (!explicit_path.empty()) {
    if (!found(std::string(explicit_path), "--lib"))
      loc.error = "--lib " + std::string(explicit_path) + ": no such file";
    return loc;
  }
  if (const char* env = ::getenv("FASTSOCK_LIBRARY"); env != nullptr && *env != '\0') {
    if (!found(env, "FASTSOCK_LIBRARY"))
      loc.error = "FASTSOCK_LIBRARY=" + std::string(env) + ": no such file";
    return loc;
  }

  std::string dir = executable_dir();
  if (dir.empty()) {
    loc.error = "cannot read /proc/self/exe to find the library next to this program; "
                "use --lib or FASTSOCK_LIBRARY";
    return loc;
  }
  std::string installed = dir + "/" + FASTSOCK_LIBDIR_FROM_BINDIR + "/" + std::string(kLibraryName);
  if (found(installed, "installed layout")) return loc;
  std::string build_tree = dir + "/../../preload/" + std::string(kLibraryName);
  if (found(build_tree, "build tree")) return loc;

  loc.source.clear();
  loc.error = "libfastsock.so not found (tried " + installed + " and " + build_tree +
              "); use --lib or FASTSOCK_LIBRARY";
  return loc;
}

std::string compose_ld_preload(std::string_view existing, const std::string& library,
                               std::string* replaced) {
  std::vector<std::string> kept;
  bool present = false;
  size_t pos = 0;
  while (pos <= existing.size()) {
    size_t end = existing.find_first_of(": ", pos);
    if (end == std::string_view::npos) end = existing.size();
    std::string entry(existing.substr(pos, end - pos));
    pos = end + 1;
    if (entry.empty()) continue;
    if (names_fastsock_library(entry)) {
      bool same = entry == library || resolved(entry) == library;
      if (same && !present) kept.push_back(entry);  // already preloaded: keep its place
      if (!same && replaced != nullptr) *replaced = entry;
      present = present || same;
      continue;
    }
    kept.push_back(entry);
  }
  if (!present) kept.push_back(library);

  std::string out;
  for (const std::string& entry : kept) {
    if (!out.empty()) out += ':';
    out += entry;
  }
  return out;
}

}  // namespace fastsock::tool
