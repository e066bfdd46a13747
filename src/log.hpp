// Logging: one line per event, `fastsock[<pid>] <level>: <message>`, written with the real
// write() to stderr or to FASTSOCK_LOG_FILE. Never allocates; safe after fork.
#pragma once

#include <atomic>

#include "config.hpp"

namespace fastsock {

namespace detail {
extern std::atomic<LogLevel> g_log_level;
}

inline bool log_enabled(LogLevel level) noexcept {
  return level != LogLevel::off &&
         level <= detail::g_log_level.load(std::memory_order_relaxed);
}

// Applies the configured level and destination (called once the config is loaded).
void log_configure(const Config& config) noexcept;

void log_write(LogLevel level, const char* fmt, ...) noexcept
    __attribute__((format(printf, 2, 3)));

}  // namespace fastsock

// Formats only when the level is enabled.
#define FASTSOCK_LOG(level, ...)                                     \
  do {                                                               \
    if (::fastsock::log_enabled(level)) ::fastsock::log_write(level, __VA_ARGS__); \
  } while (0)
#define LOG_ERROR(...) FASTSOCK_LOG(::fastsock::LogLevel::error, __VA_ARGS__)
#define LOG_WARN(...) FASTSOCK_LOG(::fastsock::LogLevel::warn, __VA_ARGS__)
#define LOG_INFO(...) FASTSOCK_LOG(::fastsock::LogLevel::info, __VA_ARGS__)
#define LOG_DEBUG(...) FASTSOCK_LOG(::fastsock::LogLevel::debug, __VA_ARGS__)

namespace fastsock {
// The application is closing or replacing `fd`: if it is the log file, log to stderr from
// now on, so the library never writes into a descriptor the application reuses.
void log_fd_closing(int fd) noexcept;
void log_fd_range_closing(unsigned first, unsigned last) noexcept;
}  // namespace fastsock
