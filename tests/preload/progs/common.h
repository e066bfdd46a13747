// Helpers shared by the preload test programs.
//
// These programs are plain executables: they are NOT linked with fastsock. They check the
// POSIX behaviour they exercise against the plain kernel, so they are meaningful with and
// without the library. When the library is preloaded they also find its C API with
// dlsym(RTLD_DEFAULT, ...) and check which descriptors it tracks, and they print
// `expect-log: <text>` lines naming log lines the library must have written (the test
// scripts check those against the FASTSOCK_LOG_FILE; see lib.sh).
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

// Every check prints what it verified, or the mismatch, and exits 1 on a mismatch.
#define CHECK(cond, ...) \
  ((cond) ? (void)0 : check_failed(__FILE__, __LINE__, #cond, __VA_ARGS__))
// For calls that return -1 and set errno on failure; evaluates to the call's result.
#define SYS(call) sys_checked((long)(call), __FILE__, __LINE__, #call)

_Noreturn void check_failed(const char* file, int line, const char* cond, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
long sys_checked(long ret, const char* file, int line, const char* what);
void ok(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// Prints "skip: ..." for a part of a program that cannot run here; the rest still runs.
void note_skip(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Line-buffers stdout (children print too) and reports whether fastsock is loaded.
void prog_init(const char* name);
int fastsock_present(void);

// The link a connection with both ends under the library takes on this host ("shm"; the
// test environment may say otherwise with FASTSOCK_TEST_LINK).
const char* both_ends_link(void);

// Checks fastsock_transport(fd) when the library is loaded: `want` is "tcp" for a tracked
// TCP socket, NULL for a descriptor the library must not track. No-op without the library.
void expect_transport(int fd, const char* want);
// fastsock_transport(fd) when the library is loaded, else NULL.
const char* fastsock_transport_of(int fd);

// `expect-log:` lines for this process's pid (only printed when the library is loaded).
// The text is "fastsock[<pid>] debug: " + the formatted text. In it, '|' separates parts
// that must all occur in one log line (in any order), a part starting with '!' must not
// occur, and a part ending with '$' must end the line (see check_expectations in lib.sh).
void expect_log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void expect_no_log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// Exactly n log lines match.
void expect_count(int n, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void expect_client_log(int fd);                 // fd=N client <local> -> <peer> on <link>
void expect_server_log(int fd);                 // fd=N server <local> <- <peer> on <link>
// Some descriptor of this pid's connection closed with exactly these counts.
void expect_closed_log(int fd, size_t sent, size_t received);
// This process never logs a line about any descriptor (untracked traffic only).
void expect_no_fd_log(void);
// Waits (up to `timeout_s`) until the library's log (FASTSOCK_LOG_FILE) has a line of this
// pid containing the formatted text; fails the test if none comes. For a state the link
// reaches on its own time (the verbs link comes up after the TCP connect). No-op without
// the library.
void wait_for_log(int timeout_s, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
// Waits until the link FASTSOCK_TEST_LINK names (verbs, vendor) is up under `fd` (its log
// line; 10 s at most). shm is up from accept() on: nothing to wait for.
void wait_for_link_up(int fd);

// "127.0.0.1:port" or "[::1]:port".
const char* addr_str(const struct sockaddr_storage* ss, char* buf, size_t len);
const char* local_str(int fd, char* buf, size_t len);
const char* peer_str(int fd, char* buf, size_t len);
uint16_t local_port(int fd);

// Loopback TCP helpers (for AF_INET, FASTSOCK_TEST_ADDR replaces 127.0.0.1 when set); family
// is AF_INET or AF_INET6; port 0 picks an ephemeral port.
int tcp_listen(int family, uint16_t port, int backlog);
int tcp_connect(int family, uint16_t port);
// A connected pair inside this process: *client from connect(), *server from accept().
void tcp_pair(int family, int* client, int* server);
int ipv6_loopback_available(void);

// Blocking helpers that loop over short transfers; they fail the program on error or EOF.
void write_all(int fd, const void* buf, size_t len);
void read_exact(int fd, void* buf, size_t len);
// Connection `i` of a test (client and server ends) carries the byte i each way.
void byte_both_ways(int client, int server, int i);
// Reads until EOF, returns the byte count (fails if more than `cap`).
size_t read_to_eof(int fd, void* buf, size_t cap);

// Deterministic payloads: byte i of stream `seed` is a function of (seed, i).
void fill_pattern(void* buf, size_t len, unsigned seed, size_t offset);
void check_pattern(const void* buf, size_t len, unsigned seed, size_t offset, const char* what);

// Waits for a child and fails unless it exited with status 0.
void wait_child_ok(int pid, const char* what);
// Sleeps the given number of milliseconds (restarting on EINTR).
void sleep_ms(long ms);

// ---- process resources (fault, scale and churn tests) ------------------------------------

// Open descriptors of this process (entries of /proc/self/fd, not counting the one used to
// list them).
int count_fds(void);
// Unix SOCK_SEQPACKET sockets this process holds: under the library, the shm rendezvous
// channels (kept open between connections, see docs/shm-rendezvous.md).
int count_rendezvous_channels(void);
// count_fds() without those channels: what a connection's own life must give back. (A
// connector keeps an idle channel to a listener that died until its next dial there finds
// it dead; at most 32 per process, see shm_rendezvous_channels.hpp.)
int count_connection_fds(void);
// Resident set size of this process in KiB (/proc/self/statm).
long rss_kib(void);
// Mappings of shm link segments in this process (lines of /proc/self/maps naming the memfd
// "fastsock-shm", see shm/shm_segment.cc).
int shm_segment_mappings(void);
// Of those, the pooled segments (memfd "fastsock-shm-pool", shm/shm_pool.hpp): a channel's
// pool keeps up to 16 of them between connections, each with both eventfds, until the
// channel closes (its peer died or closed the listener: found at the next dial there).
int pooled_segment_mappings(void);
// With no connection open, every pooled segment is idle: what is left once they are taken
// away (two eventfds each) must be what a connection's own life gives back exactly.
// Memfds of segments kept open so that their connections can continue over exec (1: those
// of pooled segments, kept by their slots; 0: those of unpooled connections).
int count_memfds(int pooled);
int count_unpooled_fds(void);
int unpooled_segment_mappings(void);
// Fails unless the pooled segments are within the pools' bound (16 per channel).
void check_pool_bound(const char* who);
// Raises RLIMIT_NOFILE's soft limit to at least `want` (up to the hard limit); returns the
// new soft limit.
long raise_nofile(long want);
// The path of program `name` built next to this one, in `out`; its directory is put at
// the front of PATH, so that the PATH-searching exec and spawn calls find it too.
void sibling_program(const char* name, char* out, size_t len);

// Fails the program ("FAIL ... hang: WHAT") if it is still running `secs` seconds from now:
// a hang becomes a failure with a message instead of a test timeout. 0 disarms.
void hang_guard(unsigned secs, const char* what);

// Forks a child connected to this process over loopback TCP; returns the connection in
// both processes (*child is 0 in the child, the child's pid in the parent). The acceptor
// (the child if child_accepts) listens after the fork, so neither inherits the other's
// sockets. One byte goes each way, then both ends check the link with expect_transport
// (both_ends_link()) and the parent prints its expect-log line. The child gets SIGKILL if
// the parent dies.
int fork_connected(int child_accepts, int* child);

// The stats file /dev/shm/fastsock-stats.PID of a process the library runs in ("" when
// the library is not loaded).
const char* stats_file_of(int pid, char* buf, size_t len);
// Removes the stats file of a reaped child that was killed with SIGKILL (it could not
// remove it itself; `fastsock stat` would), so that the test leaves nothing behind.
void remove_killed_child_stats(int pid);
