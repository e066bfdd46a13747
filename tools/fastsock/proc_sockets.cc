#include "proc_sockets.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>

namespace fastsock::tool {

namespace {

// /proc/net/tcp prints each 32-bit word of the address as the hex of its in-memory value,
// so parsing the hex into a uint32_t and storing it natively restores network order.
bool parse_hex_words(std::string_view hex, unsigned char* out, size_t words) {
  if (hex.size() != words * 8) return false;
  for (size_t w = 0; w < words; ++w) {
    uint32_t v = 0;
    for (size_t i = 0; i < 8; ++i) {
      char ch = hex[w * 8 + i];
      int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
              : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
      if (d < 0) return false;
      v = (v << 4) | uint32_t(d);
    }
    __builtin_memcpy(out + w * 4, &v, 4);
  }
  return true;
}

std::string_view next_field(std::string_view& line) {
  size_t start = line.find_first_not_of(' ');
  if (start == std::string_view::npos) return line = {};
  line.remove_prefix(start);
  size_t end = line.find(' ');
  std::string_view field = line.substr(0, end);
  line.remove_prefix(end == std::string_view::npos ? line.size() : end);
  return field;
}

// "127.0.0.1:80" or "[::1]:80" from /proc's "0100007F:0050", or "" if malformed.
std::string parse_address(std::string_view field, bool ipv6) {
  const size_t colon = field.find(':');
  if (colon == std::string_view::npos) return {};
  unsigned char bytes[16];
  if (!parse_hex_words(field.substr(0, colon), bytes, ipv6 ? 4 : 1)) return {};
  char* end = nullptr;
  const std::string port_hex(field.substr(colon + 1));
  const unsigned long port = std::strtoul(port_hex.c_str(), &end, 16);
  if (port_hex.empty() || *end != '\0' || port > 65535) return {};
  char ip[INET6_ADDRSTRLEN];
  if (!inet_ntop(ipv6 ? AF_INET6 : AF_INET, bytes, ip, sizeof ip)) return {};
  return ipv6 ? "[" + std::string(ip) + "]:" + std::to_string(port)
              : std::string(ip) + ":" + std::to_string(port);
}

}  // namespace

unsigned long parse_proc_net_tcp_line(std::string_view line, bool ipv6, ProcTcpAddresses& out) {
  // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
  std::string_view fields[10];
  for (auto& f : fields) f = next_field(line);
  if (fields[9].empty()) return 0;
  std::string local = parse_address(fields[1], ipv6);
  std::string remote = parse_address(fields[2], ipv6);
  if (local.empty() || remote.empty()) return 0;
  char* end = nullptr;
  const std::string inode_text(fields[9]);
  const unsigned long inode = std::strtoul(inode_text.c_str(), &end, 10);
  if (*end != '\0') return 0;
  out = {std::move(local), std::move(remote)};
  return inode;
}

void fill_unknown_addresses(ProcessStats& stats) {
  std::map<unsigned long, ProcTcpAddresses> by_inode;
  bool loaded = false;
  for (ConnectionStats& c : stats.connections) {
    if ((c.local != "-" && c.peer != "-") || c.fd < 0) continue;
    char path[64], target[64];
    std::snprintf(path, sizeof path, "/proc/%d/fd/%d", int(stats.pid), int(c.fd));
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    unsigned long inode = 0;
    if (std::sscanf(target, "socket:[%lu]", &inode) != 1) continue;
    if (!loaded) {
      loaded = true;
      for (bool v6 : {false, true}) {
        std::ifstream in("/proc/" + std::to_string(stats.pid) + (v6 ? "/net/tcp6" : "/net/tcp"));
        std::string line;
        ProcTcpAddresses addresses;
        while (std::getline(in, line))
          if (unsigned long ino = parse_proc_net_tcp_line(line, v6, addresses))
            by_inode[ino] = addresses;
      }
    }
    auto it = by_inode.find(inode);
    if (it == by_inode.end()) continue;
    if (c.local == "-") c.local = it->second.local;
    // A listener's "remote" is the wildcard 0.0.0.0:0: it has no peer to show.
    if (c.peer == "-" && c.role != stats::Role::listener) c.peer = it->second.remote;
  }
}

}  // namespace fastsock::tool
