#include "exec_image.hpp"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fastsock::exec_image {

namespace {

// Raw system calls: read and close are hooked by the library.
int open_at(int dirfd, const char* path, int at_flags) {
  return int(::syscall(SYS_openat, dirfd, path, O_RDONLY | O_CLOEXEC |
                       ((at_flags & AT_SYMLINK_NOFOLLOW) ? O_NOFOLLOW : 0)));
}
ssize_t read_at(int fd, void* buf, size_t len, off_t offset) {
  return ::syscall(SYS_pread64, fd, buf, len, offset);
}
void close_fd(int fd) { (void)::syscall(SYS_close, fd); }

#if defined(__x86_64__)
constexpr uint16_t kMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kMachine = EM_AARCH64;
#else
constexpr uint16_t kMachine = EM_NONE;  // unknown here: never "yes"
#endif

// A dynamically linked ELF executable of our machine and word size.
bool dynamic_elf(int fd) {
  Elf64_Ehdr eh;
  if (read_at(fd, &eh, sizeof eh, 0) != ssize_t(sizeof eh)) return false;
  if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_machine != kMachine || kMachine == EM_NONE ||
      (eh.e_type != ET_EXEC && eh.e_type != ET_DYN) || eh.e_phentsize != sizeof(Elf64_Phdr) ||
      eh.e_phnum == 0 || eh.e_phnum > 256)
    return false;
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    if (read_at(fd, &ph, sizeof ph, off_t(eh.e_phoff + uint64_t(i) * sizeof ph)) != ssize_t(sizeof ph))
      return false;
    if (ph.p_type == PT_INTERP) return true;  // the dynamic loader runs, and reads LD_PRELOAD
  }
  return false;  // static (or static-pie): LD_PRELOAD is never read
}

// Not a secure-execution image (AT_SECURE), in which the loader ignores LD_PRELOAD paths.
bool plain_file(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return false;
  if (st.st_mode & (S_ISUID | S_ISGID)) return false;
  return ::fgetxattr(fd, "security.capability", nullptr, 0) < 0;
}

// The interpreter of a "#!" script at `fd` into `out`, or false.
bool script_interpreter(int fd, char* out, size_t cap) {
  char line[256];
  const ssize_t n = read_at(fd, line, sizeof line - 1, 0);
  if (n < 3 || line[0] != '#' || line[1] != '!') return false;
  line[n] = '\0';
  const char* p = line + 2;
  while (*p == ' ' || *p == '\t') ++p;
  const size_t len = strcspn(p, " \t\n");
  if (len == 0 || len >= cap || p[0] != '/') return false;
  memcpy(out, p, len);
  out[len] = '\0';
  return true;
}

bool image_ok(int dirfd, const char* path, int at_flags, int depth) {
  const int fd = open_at(dirfd, path, at_flags);
  if (fd < 0) return false;
  bool ok = plain_file(fd);
  if (ok && !dynamic_elf(fd)) {
    char interpreter[256];
    ok = depth == 0 && script_interpreter(fd, interpreter, sizeof interpreter) &&
         image_ok(AT_FDCWD, interpreter, 0, depth + 1);
  }
  close_fd(fd);
  return ok;
}

// This library's own file.
bool own_file(struct stat& out) {
  Dl_info info{};
  if (!::dladdr(reinterpret_cast<void*>(&runs_library), &info) || !info.dli_fname) return false;
  return ::stat(info.dli_fname, &out) == 0;
}

// LD_PRELOAD of envp names the file `self` (entries with a slash only: a bare name is
// searched in the loader's paths, which this check does not repeat).
bool preload_names(char* const envp[], const struct stat& self) {
  if (!envp) return false;
  for (char* const* e = envp; *e; ++e) {
    if (strncmp(*e, "LD_PRELOAD=", 11) != 0) continue;
    const char* list = *e + 11;
    while (*list) {
      const size_t len = strcspn(list, ": \t");
      char entry[4096];
      if (len > 0 && len < sizeof entry && memchr(list, '/', len)) {
        memcpy(entry, list, len);
        entry[len] = '\0';
        struct stat st;
        if (::stat(entry, &st) == 0 && st.st_dev == self.st_dev && st.st_ino == self.st_ino)
          return true;
      }
      list += len;
      while (*list == ':' || *list == ' ' || *list == '\t') ++list;
    }
    return false;  // the loader reads the first LD_PRELOAD only
  }
  return false;
}

}  // namespace

bool runs_library(int dirfd, const char* path, int at_flags, char* const envp[]) noexcept {
  struct stat self;
  if (!path || !own_file(self) || !preload_names(envp, self)) return false;
  if ((at_flags & AT_EMPTY_PATH) && *path == '\0') {
    // fexecve / execveat(fd, "", AT_EMPTY_PATH): the program's own descriptor.
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", dirfd);
    return image_ok(AT_FDCWD, proc, 0, 0);
  }
  return image_ok(dirfd, path, at_flags, 0);
}

bool resolve_in_path(const char* file, char* out, size_t cap) noexcept {
  if (!file || !*file) return false;
  if (strchr(file, '/')) {
    if (strlen(file) >= cap) return false;
    strcpy(out, file);
    return true;
  }
  const char* path = getenv("PATH");
  if (!path) path = "/bin:/usr/bin";  // glibc's default search path
  const size_t flen = strlen(file);
  while (true) {
    const size_t len = strcspn(path, ":");
    // An empty element is the current directory.
    const char* dir = len ? path : ".";
    const size_t dlen = len ? len : 1;
    if (dlen + 1 + flen < cap) {
      memcpy(out, dir, dlen);
      out[dlen] = '/';
      memcpy(out + dlen + 1, file, flen + 1);
      struct stat st;
      if (::stat(out, &st) == 0 && S_ISREG(st.st_mode) && ::access(out, X_OK) == 0) return true;
    }
    if (path[len] == '\0') return false;
    path += len + 1;
  }
}

}  // namespace fastsock::exec_image
