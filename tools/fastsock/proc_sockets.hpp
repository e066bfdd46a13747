// Local addresses of a process's TCP sockets, read from /proc.
//
// The library leaves a client connection's local address unknown unless its debug log needs
// it: asking the kernel (getsockname) on every connect() cost ~2% of a connection's setup.
// `fastsock stat` fills it in here instead, off the application's hot path:
// /proc/PID/fd/N names the socket's inode, /proc/PID/net/tcp{,6} maps inodes to addresses.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "stats_reader.hpp"

namespace fastsock::tool {

// Parses one line of /proc/net/tcp or /proc/net/tcp6; returns the inode and sets `local`
// ("127.0.0.1:80", "[::1]:80"), or returns 0 for a header or malformed line.
unsigned long parse_proc_net_tcp_line(std::string_view line, bool ipv6, std::string& local);

// Fills `c.local` for every connection of `stats` whose local address is unknown ("-"),
// when /proc allows; leaves it "-" otherwise.
void fill_unknown_local_addresses(ProcessStats& stats);

}  // namespace fastsock::tool
