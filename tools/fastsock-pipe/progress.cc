#include "progress.hpp"

#include <unistd.h>

#include <cstdio>

#include "endpoint.hpp"

namespace fastsock_pipe {

Progress::Progress(bool forced, double start_seconds) : start_(start_seconds) {
  tty_ = isatty(STDERR_FILENO) == 1;
  enabled_ = forced || tty_;
}

void Progress::clear() {
  if (enabled_ && tty_ && shown_) std::fputs("\r\033[K", stderr);
  shown_ = false;
}

void Progress::update(std::size_t done, std::size_t total, std::size_t bytes) {
  if (!enabled_) return;
  const double elapsed = now_seconds() - start_;
  std::fprintf(stderr, "%sfastsock-pipe: %zu/%zu sizes done (last %zu bytes), %.1f s%s",
               tty_ ? "\r\033[K" : "", done, total, bytes, elapsed, tty_ ? "" : "\n");
  std::fflush(stderr);
  shown_ = tty_;
}

void Progress::finish() {
  clear();
}

}  // namespace fastsock_pipe
