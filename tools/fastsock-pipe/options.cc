#include "options.hpp"

#include <getopt.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace fastsock_pipe {
namespace {

enum LongOnly {
  kCsv = 1000, kJson, kLocal, kCpus, kTrials, kTrialTime, kMaxTime, kCorruptAt, kPrintSchedule,
  kVersionOpt, kHelp, kUnix, kCompare, kElements, kCacheBytes, kNpoutFormat, kPlot, kProgress,
  kWorker, kExpectPreload, kApi
};

bool parse_ull(const char* s, unsigned long long& v) {
  if (!s || !*s || *s == '-') return false;
  char* end = nullptr;
  errno = 0;
  v = std::strtoull(s, &end, 10);
  return errno == 0 && end && *end == '\0';
}

bool parse_double(const char* s, double& v) {
  if (!s || !*s) return false;
  char* end = nullptr;
  errno = 0;
  v = std::strtod(s, &end);
  return errno == 0 && end && *end == '\0' && v >= 0;
}

int usage_error(const char* fmt, const char* arg) {
  std::fprintf(stderr, "fastsock-pipe: ");
  std::fprintf(stderr, fmt, arg);
  std::fprintf(stderr, "\nTry 'fastsock-pipe --help'.\n");
  return 2;
}

std::vector<std::string> split_commas(std::string_view s) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    std::size_t end = s.find(',', pos);
    if (end == std::string_view::npos) end = s.size();
    out.emplace_back(s.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

}  // namespace

void print_help() {
  std::printf(
      "Usage: fastsock-pipe [options]                 receiver (waits on -P port or --unix)\n"
      "       fastsock-pipe -h HOST [options]         transmitter (HOST may be unix:PATH)\n"
      "       fastsock-pipe --local [options]         both ends, forked, over loopback\n"
      "       fastsock-pipe --local --compare tcp,unix,fastsock[,LIB.so] [options]\n"
      "       fastsock-pipe compare A.json B.json [--threshold PCT] [--split BYTES]\n"
      "\n"
      "A NetPIPE-style latency/bandwidth benchmark over plain sockets (runs under any\n"
      "LD_PRELOAD socket library). Sizes follow NetPIPE 3.7's schedule.\n"
      "\n"
      "Connection:\n"
      "  -h, --host HOST      transmit to HOST, or to the Unix socket unix:PATH\n"
      "  -P, --port PORT      TCP port (default 5002; --local: a free port)\n"
      "  -6                   IPv6: the receiver listens on ::, --local uses ::1\n"
      "      --unix PATH      receiver / --local: a Unix stream socket at PATH\n"
      "      --local          fork a receiver and transmit to it over loopback\n"
      "      --compare LIST   --local: measure each transport of LIST side by side,\n"
      "                       interleaving their trials: tcp, tcp6, unix (no preload),\n"
      "                       fastsock (libfastsock.so preloaded), or a path ending in .so\n"
      "      --cpus A,B       --local: pin the transmitter to CPU A, the receiver to CPU B\n"
      "  -b, --buffer BYTES   SO_SNDBUF and SO_RCVBUF of this end's TCP socket, set before\n"
      "                       listen/connect, as NPtcp -b (default: the kernel's autotuning;\n"
      "                       --local and --compare set both ends)\n"
      "Sizes and repetitions:\n"
      "  -l, --lower N        smallest message size (default 1)\n"
      "  -u, --upper N        largest message size, always measured (default 8388608)\n"
      "  -p, --perturbation N NetPIPE's +-N perturbation of each size (default 3, 0 = none)\n"
      "      --trials N       timed trials per size (default 3)\n"
      "      --trial-time S   target seconds per trial (default 0.10)\n"
      "      --max-time S     stop starting new sizes after S seconds (default: no limit)\n"
      "Modes:\n"
      "  -s, --stream         streaming (one-way messages) instead of ping-pong\n"
      "  -2, --bidirectional  both ends stream at once (bandwidth: both directions)\n"
      "  -I, --cache-invalidate  every message from a different buffer, walking buffers\n"
      "                       larger than the last-level cache (NetPIPE's -I)\n"
      "      --cache-bytes N  the cache size -I must exceed (default: detected)\n"
      "      --elements T     byte, int32 or double (the thesis' B], I], D]): sizes count\n"
      "                       elements of that type, each message one array\n"
      "      --api A          how int32/double arrays move (bytes always use send/recv):\n"
      "                       typed (default): fastsock_send_array/fastsock_recv_array,\n"
      "                         the library's entry points when it is preloaded, else\n"
      "                         the FASTSOCK_DYNAMIC shim's plain sendmsg/recvmsg loops;\n"
      "                       plain: send/recv of the array's bytes;\n"
      "                       portable: converted to big-endian in a staging buffer and\n"
      "                         sent with send/recv (the byte-stream way, like XDR)\n"
      "                       Results record what each end used: library, shim, plain\n"
      "                       or portable (JSON transports[].arrays, summary line)\n"
      "  -i, --integrity      verify every byte received; a mismatch fails the run\n"
      "Output:\n"
      "      --csv FILE       per-size results as CSV\n"
      "      --json FILE      results and metadata as JSON\n"
      "  -o, --npout FILE     NetPIPE np.out (with --compare: FILE.<transport>)\n"
      "      --npout-format V 3 (NetPIPE 3.7: bytes, Mbps [2^20 bit/s], seconds; default)\n"
      "                       or 5 (NetPIPE 5.x: bytes, Gbit/s avg/min/max, usec)\n"
      "      --plot PREFIX    PREFIX-latency.{svg,png}, PREFIX-bandwidth.{svg,png} (gnuplot)\n"
      "  -q, --quiet          no live table on stdout\n"
      "      --progress       progress on stderr (default when stderr is a terminal)\n"
      "      --print-schedule print the message sizes (NetPIPE's order) and exit\n"
      "      --help           this help\n"
      "      --version        version\n"
      "\n"
      "Transmitter-side options (sizes, trials, modes, outputs) are sent to the receiver.\n"
      "Exit status: 0 success, 1 runtime or integrity failure, 2 usage error.\n");
}

int parse_options(int argc, char** argv, Options& o) {
  static const option longopts[] = {
      {"host", required_argument, nullptr, 'h'},
      {"port", required_argument, nullptr, 'P'},
      {"lower", required_argument, nullptr, 'l'},
      {"upper", required_argument, nullptr, 'u'},
      {"perturbation", required_argument, nullptr, 'p'},
      {"buffer", required_argument, nullptr, 'b'},
      {"stream", no_argument, nullptr, 's'},
      {"bidirectional", no_argument, nullptr, '2'},
      {"cache-invalidate", no_argument, nullptr, 'I'},
      {"integrity", no_argument, nullptr, 'i'},
      {"npout", required_argument, nullptr, 'o'},
      {"quiet", no_argument, nullptr, 'q'},
      {"csv", required_argument, nullptr, kCsv},
      {"json", required_argument, nullptr, kJson},
      {"local", no_argument, nullptr, kLocal},
      {"unix", required_argument, nullptr, kUnix},
      {"compare", required_argument, nullptr, kCompare},
      {"cpus", required_argument, nullptr, kCpus},
      {"trials", required_argument, nullptr, kTrials},
      {"trial-time", required_argument, nullptr, kTrialTime},
      {"max-time", required_argument, nullptr, kMaxTime},
      {"elements", required_argument, nullptr, kElements},
      {"api", required_argument, nullptr, kApi},
      {"cache-bytes", required_argument, nullptr, kCacheBytes},
      {"npout-format", required_argument, nullptr, kNpoutFormat},
      {"plot", required_argument, nullptr, kPlot},
      {"progress", no_argument, nullptr, kProgress},
      {"corrupt-at", required_argument, nullptr, kCorruptAt},  // test only, not in --help
      {"worker", required_argument, nullptr, kWorker},          // internal (--compare)
      {"expect-preload", required_argument, nullptr, kExpectPreload},  // internal
      {"print-schedule", no_argument, nullptr, kPrintSchedule},
      {"version", no_argument, nullptr, kVersionOpt},
      {"help", no_argument, nullptr, kHelp},
      {nullptr, 0, nullptr, 0},
  };
  bool local = false, stream = false, bidir = false;
  unsigned long long v = 0;
  double d = 0;
  opterr = 0;
  optind = 1;
  int c;
  while ((c = getopt_long(argc, argv, ":h:P:l:u:p:b:s2Iio:q6", longopts, nullptr)) != -1) {
    switch (c) {
      case 'h': o.host = optarg; break;
      case 'P':
        if (!parse_ull(optarg, v) || v > 65535) return usage_error("bad port '%s'", optarg);
        o.port = static_cast<int>(v);
        o.port_given = true;
        break;
      case 'l':
        if (!parse_ull(optarg, v) || v == 0) return usage_error("bad lower bound '%s'", optarg);
        o.lower = v;
        break;
      case 'u':
        if (!parse_ull(optarg, v) || v == 0 || v > (1ull << 31))
          return usage_error("bad upper bound '%s' (1..2147483648)", optarg);
        o.upper = v;
        break;
      case 'p':
        if (!parse_ull(optarg, v) || v > 1000000) return usage_error("bad perturbation '%s'", optarg);
        o.perturbation = static_cast<int>(v);
        break;
      case 'b':
        if (!parse_ull(optarg, v) || v == 0 || v > (1ull << 30))
          return usage_error("bad socket buffer size '%s' (1..1073741824)", optarg);
        o.socket_buffer = static_cast<int>(v);
        break;
      case 's': stream = true; break;
      case '2': bidir = true; break;
      case 'I': o.cache_invalidate = true; break;
      case 'i': o.integrity = true; break;
      case 'o': o.npout_path = optarg; break;
      case 'q': o.quiet = true; break;
      case '6': o.ipv6 = true; break;
      case kCsv: o.csv_path = optarg; break;
      case kJson: o.json_path = optarg; break;
      case kLocal: local = true; break;
      case kUnix:
        if (!*optarg) return usage_error("%s", "--unix needs a path");
        o.unix_path = optarg;
        break;
      case kCompare:
        o.compare = split_commas(optarg);
        for (const std::string& t : o.compare)
          if (t.empty()) return usage_error("bad --compare '%s' (empty entry)", optarg);
        break;
      case kCpus: {
        int a = -1, b = -1;
        char extra = 0;
        if (std::sscanf(optarg, "%d,%d%c", &a, &b, &extra) != 2 || a < 0 || b < 0)
          return usage_error("bad --cpus '%s' (expected A,B)", optarg);
        o.pin = true;
        o.cpu_tx = a;
        o.cpu_rx = b;
        break;
      }
      case kTrials:
        if (!parse_ull(optarg, v) || v == 0 || v > 1000) return usage_error("bad --trials '%s'", optarg);
        o.trials = static_cast<int>(v);
        break;
      case kTrialTime:
        if (!parse_double(optarg, d) || d <= 0) return usage_error("bad --trial-time '%s'", optarg);
        o.trial_time = d;
        break;
      case kMaxTime:
        if (!parse_double(optarg, d)) return usage_error("bad --max-time '%s'", optarg);
        o.max_time = d;
        break;
      case kElements:
        if (!parse_element_type(optarg, o.element))
          return usage_error("bad --elements '%s' (byte, int32, double or B], I], D])", optarg);
        break;
      case kApi:
        if (!parse_array_api(optarg, o.api))
          return usage_error("bad --api '%s' (typed, plain or portable)", optarg);
        break;
      case kCacheBytes:
        if (!parse_ull(optarg, v) || v == 0 || v > (1ull << 32))
          return usage_error("bad --cache-bytes '%s'", optarg);
        o.cache_bytes = v;
        break;
      case kNpoutFormat:
        if (std::strcmp(optarg, "3") != 0 && std::strcmp(optarg, "5") != 0)
          return usage_error("bad --npout-format '%s' (3 or 5)", optarg);
        o.npout_format = optarg[0] - '0';
        break;
      case kPlot:
        if (!*optarg) return usage_error("%s", "--plot needs a prefix");
        o.plot_prefix = optarg;
        break;
      case kProgress: o.progress = true; break;
      case kCorruptAt:
        if (!parse_ull(optarg, v)) return usage_error("bad --corrupt-at '%s'", optarg);
        o.corrupt_at = static_cast<long long>(v);
        break;
      case kWorker: {
        char extra = 0;
        if (std::sscanf(optarg, "%d,%d%c", &o.worker_in, &o.worker_out, &extra) != 2 ||
            o.worker_in < 0 || o.worker_out < 0)
          return usage_error("bad --worker '%s'", optarg);
        break;
      }
      case kExpectPreload: o.expect_preload = optarg; break;
      case kPrintSchedule: o.print_schedule = true; break;
      case kVersionOpt: std::printf("fastsock-pipe %s\n", kVersion); return -1;
      case kHelp: print_help(); return -1;
      case ':': return usage_error("option '%s' needs an argument", argv[optind - 1]);
      default: return usage_error("unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
  const bool worker = o.worker_in >= 0;
  if (local && !o.host.empty()) return usage_error("%s", "--local and -h exclude each other");
  if (o.lower > o.upper) return usage_error("%s", "-l must not exceed -u");
  if (o.upper * element_size(o.element) > (1ull << 31))
    return usage_error("%s", "-u elements exceed 2147483648 bytes");
  if (o.pin && !local && !worker) return usage_error("%s", "--cpus needs --local");
  if (!o.compare.empty() && !local) return usage_error("%s", "--compare needs --local");
  if (!o.compare.empty() && (o.ipv6 || !o.unix_path.empty()))
    return usage_error("%s", "--compare names the transports itself: drop -6 / --unix");
  if (stream && bidir) return usage_error("%s", "-s and -2 exclude each other");
  if (o.ipv6 && !o.unix_path.empty()) return usage_error("%s", "-6 and --unix exclude each other");
  if (!o.host.empty() && !o.unix_path.empty())
    return usage_error("%s", "-h and --unix exclude each other (use -h unix:PATH to transmit)");
  o.mode = stream ? Mode::stream : bidir ? Mode::bidirectional : Mode::pingpong;
  o.role = worker ? Role::worker
           : local ? Role::local
                   : (o.host.empty() ? Role::receiver : Role::transmitter);
  if ((local || worker) && !o.port_given) o.port = 0;
  return 0;
}

}  // namespace fastsock_pipe
