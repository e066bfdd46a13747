// Local mode: this process listens, forks the receiver, and connects to it.
#pragma once

#include <sys/types.h>

#include <string>

#include "net.hpp"
#include "options.hpp"

namespace fastsock_pipe {

// Pins the calling process to `cpu`; prints why not and returns false on failure.
bool pin_to(int cpu, const char* who);

// The address local mode uses for the options' transport: 127.0.0.1, ::1 (-6) or the Unix
// socket --unix names (port: -P, or 0 for a free one).
Address local_address(const Options& opt);

struct LocalPair {
  int fd = -1;          // the transmitter's connected socket
  pid_t receiver = -1;  // the forked receiver
};

// Forks a receiver (pinned to opt.cpu_rx with --cpus) that listens on `addr` and serves one
// connection, pins this process to opt.cpu_tx and connects to it. False after printing why; the
// receiver, if started, has then been stopped and reaped.
bool start_local_pair(const Address& addr, const Options& opt, LocalPair& out);

// Waits for the receiver; true when it exited with status 0.
bool reap_receiver(LocalPair& pair);

}  // namespace fastsock_pipe
