// Progress of long runs on stderr: a line rewritten in place when stderr is a terminal, one
// line per size with --progress otherwise.
#pragma once

#include <cstddef>

namespace fastsock_pipe {

class Progress {
 public:
  Progress(bool forced, double start_seconds);
  bool enabled() const { return enabled_; }
  // Before writing a table row to a terminal: erase the progress line.
  void clear();
  void update(std::size_t done, std::size_t total, std::size_t bytes);
  void finish();  // ends the in-place line

 private:
  bool enabled_ = false, tty_ = false, shown_ = false;
  double start_ = 0;
};

}  // namespace fastsock_pipe
