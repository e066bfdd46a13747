#!/usr/bin/env bash
# symbols.sh: libfastsock.so exports exactly the hooked libc names and the fastsock_* C API,
# all unversioned. The library is linked with an anonymous version script: a named version
# node would export `socket@@NODE`, and a program's versioned reference `socket@GLIBC_2.2.5`
# does not bind to a definition of another version, so the hook would be silently skipped.
# Anything else exported would leak internals into, and clash with, every host program.
source "$(dirname "$0")/lib.sh"
init_test symbols
require_cmd nm

hooked="socket socketpair bind listen accept accept4 connect shutdown close close_range
closefrom fclose fdopen dup dup2 dup3 fcntl fcntl64 ioctl getsockopt setsockopt getsockname getpeername
read readv write writev recv recvfrom recvmsg recvmmsg send sendto sendmsg sendmmsg
sendfile sendfile64 splice poll ppoll select pselect epoll_create epoll_create1 epoll_ctl
epoll_wait epoll_pwait epoll_pwait2 fork vfork setuid seteuid setreuid setresuid execve execv execvp execvpe execl execlp
execle fexecve execveat posix_spawn posix_spawnp posix_spawn_file_actions_adddup2 system popen
_exit _Exit getrlimit getrlimit64 setrlimit setrlimit64 prlimit prlimit64 __read_chk __recv_chk __recvfrom_chk __poll_chk __ppoll_chk
free realloc reallocarray munmap mremap madvise mmap mmap64 shmdt brk sbrk"
api_required="fastsock_version fastsock_transport fastsock_send_array fastsock_recv_array
fastsock_send_array_nb fastsock_recv_array_nb fastsock_send_strided fastsock_recv_strided
fastsock_send_indexed fastsock_recv_indexed fastsock_set_peer_byte_order fastsock_peer_byte_order
fastsock_send_strided_nb fastsock_recv_strided_nb fastsock_send_indexed_nb fastsock_recv_indexed_nb
fastsock_send_multistrided fastsock_recv_multistrided fastsock_send_multistrided_nb
fastsock_recv_multistrided_nb"

nm -D --defined-only "$FASTSOCK_LIB" >"$WORK/nm.out" 2>&1 || fail "nm -D failed: $(cat "$WORK/nm.out")"
# "ADDRESS TYPE NAME[@@VERSION]"
awk 'NF >= 3 { print $3 }' "$WORK/nm.out" | sort -u >"$WORK/exported"
note "$(wc -l <"$WORK/exported") defined dynamic symbols"

versioned=$(grep '@' "$WORK/exported" || true)
[[ -z "$versioned" ]] || fail "versioned exports (use an anonymous version script): $(echo $versioned)"

missing=""
for sym in $hooked $api_required; do
  grep -qx -- "$sym" "$WORK/exported" || missing+=" $sym"
done
[[ -z "$missing" ]] || fail "not exported:$missing"

extra=""
while read -r sym; do
  case " $(echo $hooked) " in *" $sym "*) continue ;; esac
  [[ $sym == fastsock_* ]] && continue
  extra+=" $sym"
done <"$WORK/exported"
[[ -z "$extra" ]] || fail "exported but neither a hook nor fastsock_* API:$extra"

# The hooks must be functions (T), not data or undefined references.
not_text=$(awk 'NF >= 3 && $2 != "T" && $2 != "W" && $2 != "i" { print $3 "(" $2 ")" }' "$WORK/nm.out")
[[ -z "$not_text" ]] || fail "exports that are not functions: $(echo $not_text)"

note "all $(echo $hooked | wc -w) hooks and $(grep -c '^fastsock_' "$WORK/exported") fastsock_* symbols exported, unversioned, nothing else"
note "PASS"
