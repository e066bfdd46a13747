#include "options.hpp"

#include <getopt.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fastsock_pipe {
namespace {

enum LongOnly {
  kCsv = 1000, kJson, kLocal, kCpus, kTrials, kTrialTime, kMaxTime, kCorruptAt, kPrintSchedule, kVersionOpt,
  kHelp
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

}  // namespace

void print_help() {
  std::printf(
      "Usage: fastsock-pipe [options]                 receiver (waits on -P port)\n"
      "       fastsock-pipe -h HOST [options]         transmitter\n"
      "       fastsock-pipe --local [options]         both ends, forked, over loopback TCP\n"
      "\n"
      "A NetPIPE-style latency/bandwidth benchmark over plain sockets (runs under any\n"
      "LD_PRELOAD socket library). Sizes follow NetPIPE 3.7's schedule.\n"
      "\n"
      "  -h, --host HOST      transmit to HOST (receiver when absent)\n"
      "  -P, --port PORT      TCP port (default 5002; --local: a free port)\n"
      "      --local          fork a receiver and transmit to it over 127.0.0.1\n"
      "      --cpus A,B       --local: pin the transmitter to CPU A, the receiver to CPU B\n"
      "  -l, --lower BYTES    smallest message size (default 1)\n"
      "  -u, --upper BYTES    largest message size, always measured (default 8388608)\n"
      "  -p, --perturbation N NetPIPE's +-N perturbation of each size (default 3, 0 = none)\n"
      "      --trials N       timed trials per size (default 3)\n"
      "      --trial-time S   target seconds per trial (default 0.10)\n"
      "      --max-time S     stop starting new sizes after S seconds (default: no limit)\n"
      "  -s, --stream         streaming mode (one-way messages) instead of ping-pong\n"
      "  -i, --integrity      verify every byte received; a mismatch fails the run\n"
      "      --csv FILE       write per-size results as CSV\n"
      "      --json FILE      write results and metadata as JSON\n"
      "  -o, --npout FILE     write NetPIPE 3.7 np.out (bytes, Mbps [2^20 bit/s], seconds)\n"
      "  -q, --quiet          no live table on stdout\n"
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
      {"stream", no_argument, nullptr, 's'},
      {"integrity", no_argument, nullptr, 'i'},
      {"npout", required_argument, nullptr, 'o'},
      {"quiet", no_argument, nullptr, 'q'},
      {"csv", required_argument, nullptr, kCsv},
      {"json", required_argument, nullptr, kJson},
      {"local", no_argument, nullptr, kLocal},
      {"cpus", required_argument, nullptr, kCpus},
      {"trials", required_argument, nullptr, kTrials},
      {"trial-time", required_argument, nullptr, kTrialTime},
      {"max-time", required_argument, nullptr, kMaxTime},
      {"corrupt-at", required_argument, nullptr, kCorruptAt},  // test only, not in --help
      {"print-schedule", no_argument, nullptr, kPrintSchedule},
      {"version", no_argument, nullptr, kVersionOpt},
      {"help", no_argument, nullptr, kHelp},
      {nullptr, 0, nullptr, 0},
  };
  bool local = false;
  unsigned long long v = 0;
  double d = 0;
  opterr = 0;
  optind = 1;
  int c;
  while ((c = getopt_long(argc, argv, ":h:P:l:u:p:sio:q", longopts, nullptr)) != -1) {
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
      case 's': o.stream = true; break;
      case 'i': o.integrity = true; break;
      case 'o': o.npout_path = optarg; break;
      case 'q': o.quiet = true; break;
      case kCsv: o.csv_path = optarg; break;
      case kJson: o.json_path = optarg; break;
      case kLocal: local = true; break;
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
      case kCorruptAt:
        if (!parse_ull(optarg, v)) return usage_error("bad --corrupt-at '%s'", optarg);
        o.corrupt_at = static_cast<long long>(v);
        break;
      case kPrintSchedule: o.print_schedule = true; break;
      case kVersionOpt: std::printf("fastsock-pipe %s\n", kVersion); return -1;
      case kHelp: print_help(); return -1;
      case ':': return usage_error("option '%s' needs an argument", argv[optind - 1]);
      default: return usage_error("unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
  if (local && !o.host.empty()) return usage_error("%s", "--local and -h exclude each other");
  if (o.lower > o.upper) return usage_error("%s", "-l must not exceed -u");
  if (o.pin && !local) return usage_error("%s", "--cpus needs --local");
  o.role = local ? Role::local : (o.host.empty() ? Role::receiver : Role::transmitter);
  if (local && !o.port_given) o.port = 0;
  return 0;
}

}  // namespace fastsock_pipe
