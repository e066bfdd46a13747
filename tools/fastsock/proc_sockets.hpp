// Addresses of a process's TCP sockets, read from /proc.
//
// The library leaves a client connection's local address unknown unless its debug log needs
// it (asking the kernel, getsockname, on every connect() cost ~2% of a connection's setup),
// and an accepted connection's peer address unless the application, a link or the debug log
// needs it (asking accept4 for it costs the kernel a copy per connection). `fastsock stat`
// fills them in here instead, off the application's hot path:
// /proc/PID/fd/N names the socket's inode, /proc/PID/net/tcp{,6} maps inodes to addresses.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "stats_reader.hpp"

namespace fastsock::tool {

struct ProcTcpAddresses {
  std::string local;   // "127.0.0.1:80", "[::1]:80"
  std::string remote;  // the same form; "0.0.0.0:0" for a listener
};

// Parses one line of /proc/net/tcp or /proc/net/tcp6; returns the inode and sets `out`, or
// returns 0 (leaving `out` alone) for a header or malformed line.
unsigned long parse_proc_net_tcp_line(std::string_view line, bool ipv6, ProcTcpAddresses& out);

// Fills `c.local` and `c.peer` for every connection of `stats` where they are unknown ("-"),
// when /proc allows; leaves them "-" otherwise.
void fill_unknown_addresses(ProcessStats& stats);

}  // namespace fastsock::tool
