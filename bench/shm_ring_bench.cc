// shm_ring_bench: the shm core (shm/) against the kernel, two processes, one run.
//
// 1. Latency: 1-byte half round trip (ping-pong) over a ring pair with both ends spinning
//    on separate CPUs, against a Unix socketpair and TCP loopback (TCP_NODELAY), each
//    kernel path measured with both ends on one CPU and on two, and the ratios printed
//    against the kernel's best placement (the conservative baseline) and against the floor,
//    a cache line bounced between the same two CPUs in the same run (0.16 us in design §8).
// 2. Bandwidth per message size: ring copy (the producer copies into the ring, the consumer
//    out of it) against handoff (the consumer copies straight out of the producer's buffer
//    with process_vm_readv while the producer waits), with TCP loopback as the baseline;
//    and the crossover: the smallest size from which handoff beats ring copy at every larger
//    measured size. That is the threshold the transport uses by default.
// 3. The same ring-against-handoff comparison with both ends as threads of one process,
//    where handoff is a single memcpy from the sender's buffer (threads talking over
//    loopback), and its own crossover.
//
// Every figure is the best of several timed batches after a warm-up (interference only
// adds time), the median in parentheses. The exit status never depends on a timing: 0 when
// every measurement ran and moved exactly the bytes it should, 1 otherwise, 77 (skipped)
// on a single-CPU machine, where spinning ends cannot run side by side.
//
// usage: shm_ring_bench [--quick] [--cpus A,B]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <pthread.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "shm_handoff.hpp"
#include "shm_ring.hpp"
#include "shm_segment.hpp"

using namespace fastsock::shm;

namespace {

struct Options {
  bool quick = false;
  int cpu_a = 0, cpu_b = 1;
};
Options g_opt;

inline void cpu_relax() { __builtin_ia32_pause(); }

// Each end spins on counters only the other moves: one killed leaves the other spinning
// for good (an orphan of a killed run once took a CPU for half an hour). The child dies
// with its parent; the parent gives up when the child ends any other way than exit 0.
void on_child_end(int) {
  siginfo_t si{};
  if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid != 0 &&
      (si.si_code != CLD_EXITED || si.si_status != 0)) {
    static const char msg[] = "shm_ring_bench: the child process failed or was killed\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(3);
  }
}

// Runs `child` in a forked process (pinned to child_cpu) and `parent` here (pinned to
// parent_cpu); the child's function returns its exit status. Returns false if either failed.
bool run_pair(int parent_cpu, int child_cpu, const std::function<int()>& child,
              const std::function<bool()>& parent) {
  fflush(stdout);
  struct sigaction sa {};
  sa.sa_handler = on_child_end;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, nullptr);
  const pid_t parent_pid = getpid();
  pid_t pid = fork();
  if (pid < 0) bench_die("fork");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent_pid) _exit(1);  // the parent died before the prctl
    bench_pin(child_cpu);
    _exit(child());
  }
  bench_pin(parent_cpu);
  bool ok = parent();
  int st = 0;
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) ok = false;
  // Let later runs choose their own CPUs again.
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &all);
  sched_setaffinity(0, sizeof all, &all);
  return ok;
}

// The same with `child` on a thread of this process: the two ends share one address space.
bool run_threads(int parent_cpu, int child_cpu, const std::function<int()>& child,
                 const std::function<bool()>& parent) {
  int child_status = -1;
  std::thread t([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(child_cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    child_status = child();
  });
  bench_pin(parent_cpu);
  bool ok = parent();
  t.join();
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &all);
  sched_setaffinity(0, sizeof all, &all);
  return ok && child_status == 0;
}

struct Summary {
  double best = 0, median = 0;
  bool ok = false;
};

Summary summarize(std::vector<double> v, bool higher_is_better) {
  Summary s;
  if (v.empty()) return s;
  bench_summary b = bench_summarize(v.data(), int(v.size()), higher_is_better);
  s.best = b.best;
  s.median = b.median;
  s.ok = s.best > 0;
  return s;
}

// ---- two ends of a ring pair: direction `side` out, 1 - side in ----

struct RingEnd {
  RingProducer out;
  RingConsumer in;
  HandoffSender tx;
  HandoffReceiver rx;
  RingEnd(const Segment& seg, int side)
      : out(seg, side), in(seg, 1 - side), tx(seg, side), rx(seg, 1 - side) {}

  bool send_ring(const unsigned char* p, size_t n) {
    while (n) {
      iovec io{const_cast<unsigned char*>(p), n};
      size_t k = out.write(&io, 1, n);
      if (out.corrupt()) return false;
      if (k == 0) cpu_relax();
      p += k;
      n -= k;
    }
    return true;
  }
  // Handoff, falling back to the ring for what the consumer did not take.
  bool send_handoff(const unsigned char* p, size_t n) {
    if (!tx.post(out, p, n)) return send_ring(p, n);
    while (!tx.done()) cpu_relax();
    size_t taken = tx.finish();
    if (tx.corrupt()) return false;
    return send_ring(p + taken, n - taken);
  }
  bool receive(unsigned char* p, size_t n) {
    while (n) {
      iovec io{p, n};
      size_t k = rx.read(in, &io, 1, n, false);
      if (in.corrupt()) return false;
      if (k == 0) cpu_relax();
      p += k;
      n -= k;
    }
    return true;
  }
};

// ---- kernel sockets ----

bool write_all(int fd, const unsigned char* p, size_t n) {
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= size_t(k);
  }
  return true;
}
bool read_all(int fd, unsigned char* p, size_t n) {
  while (n) {
    ssize_t k = read(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= size_t(k);
  }
  return true;
}

// A connected pair: Unix socketpair, or TCP over 127.0.0.1 with TCP_NODELAY.
void kernel_pair(bool tcp, int fds[2]) {
  if (!tcp) {
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) bench_die("socketpair");
    return;
  }
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (l < 0 || bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(l, 1) != 0 ||
      getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    bench_die("tcp listener");
  fds[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fds[0] < 0 || connect(fds[0], reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) bench_die("connect");
  fds[1] = accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
  if (fds[1] < 0) bench_die("accept");
  close(l);
  int one = 1;
  for (int i = 0; i < 2; ++i) setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// ---- latency ----

struct LatencyPlan {
  long iterations, batches;
};

LatencyPlan latency_plan(bool spinning) {
  if (g_opt.quick) return {spinning ? 20000L : 2000L, 3};
  return {spinning ? 200000L : 20000L, 11};
}

// Half round trip in microseconds, per batch.
Summary latency_ring() {
  LatencyPlan plan = latency_plan(true);
  Segment seg;
  if (!seg.create(Limits{}).ok()) return {};
  std::vector<double> batches;
  const long total = plan.iterations * (plan.batches + 1);
  bool ok = run_pair(
      g_opt.cpu_a, g_opt.cpu_b,
      [&] {
        RingEnd e(seg, 1);
        unsigned char b;
        for (long i = 0; i < total; ++i)
          if (!e.receive(&b, 1) || !e.send_ring(&b, 1)) return 1;
        return 0;
      },
      [&] {
        RingEnd e(seg, 0);
        unsigned char b = 1;
        for (long batch = -1; batch < plan.batches; ++batch) {  // batch -1: warm-up
          double t0 = bench_now_ns();
          for (long i = 0; i < plan.iterations; ++i)
            if (!e.send_ring(&b, 1) || !e.receive(&b, 1)) return false;
          double us = (bench_now_ns() - t0) / 1e3 / (2.0 * plan.iterations);
          if (batch >= 0) batches.push_back(us);
        }
        return true;
      });
  Summary s = summarize(batches, false);
  s.ok = s.ok && ok;
  return s;
}

// The floor: two processes bouncing one cache line (a shared counter), half round trip.
Summary latency_floor() {
  LatencyPlan plan = latency_plan(true);
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return {};
  auto* counter = new (p) std::atomic<uint64_t>(0);
  std::vector<double> batches;
  const uint64_t total = uint64_t(plan.iterations) * uint64_t(plan.batches + 1);
  bool ok = run_pair(
      g_opt.cpu_a, g_opt.cpu_b,
      [&] {
        for (uint64_t i = 0; i < total; ++i) {
          while (counter->load(std::memory_order_acquire) != 2 * i + 1) cpu_relax();
          counter->store(2 * i + 2, std::memory_order_release);
        }
        return 0;
      },
      [&] {
        uint64_t i = 0;
        for (long batch = -1; batch < plan.batches; ++batch) {
          double t0 = bench_now_ns();
          for (long k = 0; k < plan.iterations; ++k, ++i) {
            counter->store(2 * i + 1, std::memory_order_release);
            while (counter->load(std::memory_order_acquire) != 2 * i + 2) cpu_relax();
          }
          double us = (bench_now_ns() - t0) / 1e3 / (2.0 * plan.iterations);
          if (batch >= 0) batches.push_back(us);
        }
        return true;
      });
  munmap(p, 4096);
  Summary s = summarize(batches, false);
  s.ok = s.ok && ok;
  return s;
}

Summary latency_kernel(bool tcp, bool same_cpu) {
  LatencyPlan plan = latency_plan(false);
  int fds[2];
  kernel_pair(tcp, fds);
  std::vector<double> batches;
  const long total = plan.iterations * (plan.batches + 1);
  bool ok = run_pair(
      g_opt.cpu_a, same_cpu ? g_opt.cpu_a : g_opt.cpu_b,
      [&] {
        close(fds[0]);
        unsigned char b;
        for (long i = 0; i < total; ++i)
          if (!read_all(fds[1], &b, 1) || !write_all(fds[1], &b, 1)) return 1;
        return 0;
      },
      [&] {
        unsigned char b = 1;
        for (long batch = -1; batch < plan.batches; ++batch) {
          double t0 = bench_now_ns();
          for (long i = 0; i < plan.iterations; ++i)
            if (!write_all(fds[0], &b, 1) || !read_all(fds[0], &b, 1)) return false;
          double us = (bench_now_ns() - t0) / 1e3 / (2.0 * plan.iterations);
          if (batch >= 0) batches.push_back(us);
        }
        return true;
      });
  close(fds[0]);
  close(fds[1]);
  Summary s = summarize(batches, false);
  s.ok = s.ok && ok;
  return s;
}

// ---- bandwidth ----

enum class Path { ring, handoff, tcp };

// MB/s (1e6 B/s) for `bytes` per repetition sent as `size`-byte messages, per repetition.
// The receiver reads into a buffer of `size` bytes (as recv(size) would) and acks the end
// of each repetition with one byte. `threads`: both ends in this process (handoff by
// memcpy), else two processes (handoff by process_vm_readv).
Summary bandwidth(Path path, size_t size, bool same_cpu, bool threads = false) {
  const uint64_t per_rep = std::max<uint64_t>(uint64_t(size) * 8, g_opt.quick ? 16u << 20 : 256u << 20);
  const uint64_t messages = per_rep / size;
  const int reps = g_opt.quick ? 2 : 5;  // the first is a warm-up
  std::vector<unsigned char> buf(size);
  for (size_t i = 0; i < size; ++i) buf[i] = static_cast<unsigned char>(i * 7);
  Segment seg;
  int fds[2] = {-1, -1};
  if (path == Path::tcp)
    kernel_pair(true, fds);
  else if (!seg.create(Limits{}).ok())
    return {};
  if (threads) seg.set_peer_in_this_process(true);
  std::vector<double> rates;
  bool ok = (threads ? run_threads : run_pair)(
      g_opt.cpu_a, same_cpu ? g_opt.cpu_a : g_opt.cpu_b,
      [&] {
        std::vector<unsigned char> in(size);
        unsigned char ack = 1;
        if (path == Path::tcp) {
          close(fds[0]);
          for (int r = 0; r < reps; ++r) {
            for (uint64_t m = 0; m < messages; ++m)
              if (!read_all(fds[1], in.data(), size)) return 1;
            if (!write_all(fds[1], &ack, 1)) return 1;
          }
          return 0;
        }
        RingEnd e(seg, 1);
        for (int r = 0; r < reps; ++r) {
          for (uint64_t m = 0; m < messages; ++m) {
            if (!e.receive(in.data(), size)) return 1;
            if (in[size - 1] != buf[size - 1]) return 2;  // cheap check that the bytes arrived
          }
          if (!e.send_ring(&ack, 1)) return 1;
        }
        return 0;
      },
      [&] {
        unsigned char ack;
        std::unique_ptr<RingEnd> e;
        if (path != Path::tcp) e = std::make_unique<RingEnd>(seg, 0);
        for (int r = 0; r < reps; ++r) {
          double t0 = bench_now_ns();
          for (uint64_t m = 0; m < messages; ++m) {
            bool sent = path == Path::tcp       ? write_all(fds[0], buf.data(), size)
                        : path == Path::ring    ? e->send_ring(buf.data(), size)
                                                : e->send_handoff(buf.data(), size);
            if (!sent) return false;
          }
          bool acked = path == Path::tcp ? read_all(fds[0], &ack, 1) : e->receive(&ack, 1);
          if (!acked) return false;
          double secs = (bench_now_ns() - t0) / 1e9;
          if (r > 0) rates.push_back(double(messages * size) / secs / 1e6);
        }
        return path != Path::handoff || !e->tx.refused();
      });
  if (fds[0] >= 0) close(fds[0]);
  if (fds[1] >= 0) close(fds[1]);
  Summary s = summarize(rates, true);
  s.ok = s.ok && ok;
  return s;
}

// Percentage of CPU time not idle over one second (/proc/stat): these machines are shared,
// and a busy one makes spinning ends and every timing slower and noisier.
double machine_busy_percent() {
  auto sample = [](uint64_t& busy, uint64_t& total) {
    busy = total = 0;
    FILE* f = fopen("/proc/stat", "r");
    if (!f) return false;
    uint64_t v[8] = {};
    int n = fscanf(f, "cpu %lu %lu %lu %lu %lu %lu %lu %lu", &v[0], &v[1], &v[2], &v[3], &v[4],
                   &v[5], &v[6], &v[7]);
    fclose(f);
    if (n < 5) return false;
    for (uint64_t x : v) total += x;
    busy = total - v[3] - v[4];  // minus idle and iowait
    return true;
  };
  uint64_t b0, t0, b1, t1;
  if (!sample(b0, t0)) return -1;
  sleep(1);
  if (!sample(b1, t1) || t1 <= t0) return -1;
  return 100.0 * double(b1 - b0) / double(t1 - t0);
}

std::string size_text(size_t n) {
  char b[32];
  if (n >= (1u << 20) && n % (1u << 20) == 0) snprintf(b, sizeof b, "%zu MiB", n >> 20);
  else if (n >= 1024 && n % 1024 == 0) snprintf(b, sizeof b, "%zu KiB", n >> 10);
  else snprintf(b, sizeof b, "%zu B", n);
  return b;
}

// The crossover: the smallest size from which handoff wins (ratio handoff/ring > 1) at
// every larger size measured, printed and returned (0: none).
size_t print_crossover(const std::vector<size_t>& sizes, const std::vector<double>& ratio) {
  size_t crossover = 0;
  for (size_t i = sizes.size(); i-- > 0 && ratio[i] > 1.0;) crossover = sizes[i];
  if (crossover)
    printf("  crossover: handoff beats ring copy from %s up (at every larger size measured)\n",
           size_text(crossover).c_str());
  else
    printf("  crossover: handoff never beats ring copy at the largest size measured\n");
  return crossover;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--quick")) {
      g_opt.quick = true;
    } else if (!strcmp(argv[i], "--cpus") && i + 1 < argc) {
      if (sscanf(argv[++i], "%d,%d", &g_opt.cpu_a, &g_opt.cpu_b) != 2) {
        fprintf(stderr, "shm_ring_bench: --cpus A,B\n");
        return 2;
      }
    } else {
      fprintf(stderr, "usage: shm_ring_bench [--quick] [--cpus A,B]\n");
      return 2;
    }
  }
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus < 2) {
    printf("SKIP: %ld CPU online; the spinning ends need two\n", cpus);
    return 77;
  }
  bench_arm_timeout(g_opt.quick ? 120 : 900);
  utsname u{};
  uname(&u);
  time_t now = time(nullptr);
  char when[64];
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
  printf("shm ring benchmark: %s, %ld CPUs, kernel %s, mode %s, ring ends on CPUs %d/%d\n", when,
         cpus, u.release, g_opt.quick ? "quick" : "full", g_opt.cpu_a, g_opt.cpu_b);
  printf("machine busy before the start (other work sharing the CPUs): %.0f%%\n", machine_busy_percent());
  bool all_ok = true;
  auto check = [&](const Summary& s, const char* what) {
    if (!s.ok) {
      fprintf(stderr, "shm_ring_bench: %s failed\n", what);
      all_ok = false;
    }
    return s;
  };

  LatencyPlan spin = latency_plan(true), kern = latency_plan(false);
  printf("\n1-byte half round trip, us: best of %ld batches (median); ring: %ld round trips per batch,"
         " kernel: %ld\n", spin.batches, spin.iterations, kern.iterations);
  Summary floor = check(latency_floor(), "cache-line floor");
  Summary ring = check(latency_ring(), "ring latency");
  Summary unix_same = check(latency_kernel(false, true), "socketpair latency");
  Summary unix_cross = check(latency_kernel(false, false), "socketpair latency");
  Summary tcp_same = check(latency_kernel(true, true), "tcp latency");
  Summary tcp_cross = check(latency_kernel(true, false), "tcp latency");
  auto row = [](const char* name, const Summary& s) {
    printf("  %-34s %9.3f  (%.3f)\n", name, s.best, s.median);
  };
  row("cache-line ping-pong (floor)", floor);
  row("shm ring, spinning, two CPUs", ring);
  row("unix socketpair, one CPU", unix_same);
  row("unix socketpair, two CPUs", unix_cross);
  row("tcp loopback, one CPU", tcp_same);
  row("tcp loopback, two CPUs", tcp_cross);
  const double unix_best = std::min(unix_same.best, unix_cross.best);
  const double tcp_best = std::min(tcp_same.best, tcp_cross.best);
  if (ring.best > 0) {
    printf("  ratios (kernel's best placement / ring): socketpair %.1fx, tcp %.1fx;"
           " ring / floor measured now: %.2f, ring / 0.16 us (design 8): %.2f\n",
           unix_best / ring.best, tcp_best / ring.best, floor.best > 0 ? ring.best / floor.best : 0,
           ring.best / 0.16);
    printf("result workload=shm_latency metric=half_rtt_us unit=us value=%.4f median=%.4f"
           " tcp_best=%.4f unix_best=%.4f floor=%.4f tcp_ratio=%.2f\n",
           ring.best, ring.median, tcp_best, unix_best, floor.best, tcp_best / ring.best);
  }

  const std::vector<size_t> sizes = g_opt.quick
      ? std::vector<size_t>{4096, 65536, 1u << 20}
      : std::vector<size_t>{1024, 4096, 16384, 65536, 131072, 262144, 524288, 1u << 20, 4u << 20};
  printf("\nbandwidth, MB/s (1e6 B/s): best of %d repetitions of >= %u MiB each (median);"
         " tcp: best of one CPU and two\n", g_opt.quick ? 1 : 4, g_opt.quick ? 16u : 256u);
  printf("  %-8s %17s %17s %8s %17s %8s %8s\n", "size", "ring copy", "handoff", "ho/ring", "tcp",
         "ring/tcp", "ho/tcp");
  std::vector<double> ratio(sizes.size());
  double peak_shm = 0, peak_tcp = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    size_t n = sizes[i];
    Summary r = check(bandwidth(Path::ring, n, false), "ring bandwidth");
    Summary h = check(bandwidth(Path::handoff, n, false), "handoff bandwidth");
    Summary t1 = check(bandwidth(Path::tcp, n, true), "tcp bandwidth");
    Summary t2 = check(bandwidth(Path::tcp, n, false), "tcp bandwidth");
    const Summary& t = t1.best >= t2.best ? t1 : t2;
    ratio[i] = r.best > 0 ? h.best / r.best : 0;
    peak_shm = std::max({peak_shm, r.best, h.best});
    peak_tcp = std::max(peak_tcp, t.best);
    printf("  %-8s %8.0f (%6.0f) %8.0f (%6.0f) %8.2f %8.0f (%6.0f) %8.2f %8.2f\n", size_text(n).c_str(),
           r.best, r.median, h.best, h.median, ratio[i], t.best, t.median,
           t.best > 0 ? r.best / t.best : 0, t.best > 0 ? h.best / t.best : 0);
  }
  const size_t crossover = print_crossover(sizes, ratio);
  if (peak_tcp > 0)
    printf("  peak: shm %.0f MB/s, tcp %.0f MB/s, ratio %.2fx\n", peak_shm, peak_tcp, peak_shm / peak_tcp);
  printf("result workload=shm_handoff_crossover metric=bytes unit=B value=%zu\n", crossover);

  printf("\nin one process (two threads; handoff is one memcpy from the sender's buffer), MB/s:"
         " best (median)\n");
  printf("  %-8s %17s %17s %8s\n", "size", "ring copy", "handoff", "ho/ring");
  std::vector<double> ratio_threads(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    size_t n = sizes[i];
    Summary r = check(bandwidth(Path::ring, n, false, true), "ring bandwidth, threads");
    Summary h = check(bandwidth(Path::handoff, n, false, true), "handoff bandwidth, threads");
    ratio_threads[i] = r.best > 0 ? h.best / r.best : 0;
    printf("  %-8s %8.0f (%6.0f) %8.0f (%6.0f) %8.2f\n", size_text(n).c_str(), r.best, r.median,
           h.best, h.median, ratio_threads[i]);
  }
  printf("result workload=shm_handoff_crossover_threads metric=bytes unit=B value=%zu\n",
         print_crossover(sizes, ratio_threads));
  printf("result workload=shm_peak_bandwidth metric=MBps unit=MB/s value=%.1f tcp=%.1f ratio=%.2f\n",
         peak_shm, peak_tcp, peak_tcp > 0 ? peak_shm / peak_tcp : 0);
  return all_ok ? 0 : 1;
}
