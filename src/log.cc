#include "log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "real.hpp"

namespace fastsock {

namespace detail {
std::atomic<LogLevel> g_log_level{LogLevel::warn};
}

namespace {
std::atomic<int> g_log_fd{STDERR_FILENO};
}

void log_configure(const Config& config) noexcept {
  detail::g_log_level.store(config.log_level, std::memory_order_relaxed);
  if (config.log_file.empty()) return;
  // O_CLOEXEC: the log fd must not leak into programs the host execs.
  int fd = ::open(config.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd >= 0) {
    g_log_fd.store(fd, std::memory_order_relaxed);
  } else {
    log_write(LogLevel::warn, "cannot open FASTSOCK_LOG_FILE '%s': %s; logging to stderr",
              config.log_file.c_str(), strerrordesc_np(errno));
  }
}

void log_write(LogLevel level, const char* fmt, ...) noexcept {
  const int saved_errno = errno;
  char line[512];
  int n = snprintf(line, sizeof line, "fastsock[%d] %.*s: ", int(getpid()),
                   int(log_level_name(level).size()), log_level_name(level).data());
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof line - size_t(n) - 1, fmt, ap);
  va_end(ap);
  size_t len = size_t(n) + (m < 0 ? 0 : size_t(m));
  if (len > sizeof line - 2) len = sizeof line - 2;
  line[len++] = '\n';
  // One write per line: O_APPEND keeps lines from concurrent processes whole.
  (void)real().write(g_log_fd.load(std::memory_order_relaxed), line, len);
  errno = saved_errno;
}

}  // namespace fastsock

namespace fastsock {

void log_fd_closing(int fd) noexcept {
  // Every close() passes here: a plain load first, so that only the close of the log's own
  // descriptor pays for a locked compare-and-exchange.
  int expected = fd;
  if (fd != STDERR_FILENO && g_log_fd.load(std::memory_order_relaxed) == fd)
    g_log_fd.compare_exchange_strong(expected, STDERR_FILENO, std::memory_order_relaxed);
}

void log_fd_range_closing(unsigned first, unsigned last) noexcept {
  int fd = g_log_fd.load(std::memory_order_relaxed);
  if (fd != STDERR_FILENO && unsigned(fd) >= first && unsigned(fd) <= last) log_fd_closing(fd);
}

}  // namespace fastsock
