// Coordinator <-> worker messages of --compare, over two pipes between processes of the
// same binary on the same host (so host byte order and plain structs are fine). A worker
// is one transport's transmitter; its forked child is the receiver.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fastsock_pipe {

enum class WorkerOp : uint32_t { begin_size = 1, trial = 2, end_size = 3, finish = 4 };

struct WorkerReady {  // worker -> coordinator once, after connecting (or failing to)
  uint32_t ok;
  char reason[252];   // NUL-terminated when !ok
};

struct WorkerCommand {  // coordinator -> worker
  uint32_t op;
  uint32_t warmup;
  uint32_t trials;
  uint32_t reserved;
  uint64_t bytes;
  uint64_t repeats;
  uint64_t pool_bytes;
};

struct WorkerReply {  // worker -> coordinator, one per command except finish
  uint32_t ok;
  uint32_t reserved;
  double per_message;    // trial: average one-way time
  uint64_t samples;      // trial: this many doubles follow
  uint64_t rx_errors, rx_first_bad, tx_errors;  // end_size
  uint32_t tx_path, rx_path;                     // end_size: ArrayPath of each end
  char tx_transport[16], rx_transport[16];       // end_size: NUL-terminated
};

// Whole-buffer pipe I/O, retrying on EINTR; false on error or end of file.
bool write_full(int fd, const void* buf, std::size_t len);
bool read_full(int fd, void* buf, std::size_t len);

}  // namespace fastsock_pipe
