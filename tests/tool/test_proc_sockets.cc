// Parsing /proc/net/tcp{,6} lines, which `fastsock stat` uses to fill in the local and peer
// addresses the library leaves unknown.
#include <catch2/catch.hpp>

#include <string>

#include "proc_sockets.hpp"

using fastsock::tool::parse_proc_net_tcp_line;
using fastsock::tool::ProcTcpAddresses;

TEST_CASE("an IPv4 line gives its local and remote addresses and inode") {
  ProcTcpAddresses a;
  const char* line =
      "   3: 0100007F:C1DE 0200007F:8DCF 01 00000000:00000000 00:00000000 00000000     0        0 "
      "123456 1 0000000000000000 20 4 30 10 -1";
  CHECK(parse_proc_net_tcp_line(line, false, a) == 123456);
  CHECK(a.local == "127.0.0.1:49630");
  CHECK(a.remote == "127.0.0.2:36303");
}

TEST_CASE("an IPv6 line gives bracketed addresses") {
  ProcTcpAddresses a;
  const char* line =
      "   0: 00000000000000000000000001000000:BF62 00000000000000000000000001000000:E6E1 01 "
      "00000000:00000000 00:00000000 00000000     0        0 987 1 0000000000000000 20 4 0 10 -1";
  CHECK(parse_proc_net_tcp_line(line, true, a) == 987);
  CHECK(a.local == "[::1]:48994");
  CHECK(a.remote == "[::1]:59105");
}

TEST_CASE("headers and malformed lines are rejected") {
  ProcTcpAddresses a{"unchanged", "unchanged"};
  CHECK(parse_proc_net_tcp_line(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
            "timeout inode", false, a) == 0);
  CHECK(parse_proc_net_tcp_line("", false, a) == 0);
  CHECK(parse_proc_net_tcp_line("0: 0100007G:0050 0100007F:0050 01 a b c d e 5", false, a) == 0);
  CHECK(parse_proc_net_tcp_line("0: 0100007F:10000 0100007F:0050 01 a b c d e 5", false, a) == 0);
  CHECK(parse_proc_net_tcp_line("0: 0100007F:0050 0100007F:0050 01 a b c d e 5x", false, a) == 0);
  CHECK(parse_proc_net_tcp_line("0: 0100007F:0050 0100007F:0050 01 a b c d e 5", true, a) == 0);
  CHECK(parse_proc_net_tcp_line("0: 0100007F:0050 x 01 a b c d e 5", false, a) == 0);  // remote
  CHECK(a.local == "unchanged");
  CHECK(a.remote == "unchanged");
}
