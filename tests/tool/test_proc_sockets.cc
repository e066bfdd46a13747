// Parsing /proc/net/tcp{,6} lines, which `fastsock stat` uses to fill in local addresses.
#include <catch2/catch.hpp>

#include <string>

#include "proc_sockets.hpp"

using fastsock::tool::parse_proc_net_tcp_line;

TEST_CASE("an IPv4 line gives its local address and inode") {
  std::string local;
  const char* line =
      "   3: 0100007F:C1DE 0100007F:8DCF 01 00000000:00000000 00:00000000 00000000     0        0 "
      "123456 1 0000000000000000 20 4 30 10 -1";
  CHECK(parse_proc_net_tcp_line(line, false, local) == 123456);
  CHECK(local == "127.0.0.1:49630");
}

TEST_CASE("an IPv6 line gives a bracketed address") {
  std::string local;
  const char* line =
      "   0: 00000000000000000000000001000000:BF62 00000000000000000000000001000000:E6E1 01 "
      "00000000:00000000 00:00000000 00000000     0        0 987 1 0000000000000000 20 4 0 10 -1";
  CHECK(parse_proc_net_tcp_line(line, true, local) == 987);
  CHECK(local == "[::1]:48994");
}

TEST_CASE("headers and malformed lines are rejected") {
  std::string local = "unchanged";
  CHECK(parse_proc_net_tcp_line(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
            "timeout inode", false, local) == 0);
  CHECK(parse_proc_net_tcp_line("", false, local) == 0);
  CHECK(parse_proc_net_tcp_line("0: 0100007G:0050 x 01 a b c d e 5", false, local) == 0);
  CHECK(parse_proc_net_tcp_line("0: 0100007F:10000 x 01 a b c d e 5", false, local) == 0);
  CHECK(parse_proc_net_tcp_line("0: 0100007F:0050 x 01 a b c d e 5x", false, local) == 0);
  CHECK(parse_proc_net_tcp_line("0: 0100007F:0050 x 01 a b c d e 5", true, local) == 0);
  CHECK(local == "unchanged");
}
