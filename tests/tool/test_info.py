#!/usr/bin/env python3
"""`fastsock info`: the four transports with reasons, the effective configuration (including
a configuration error and the pass-through it forces), and the library `run` would use."""

import os
import shutil
import subprocess
import tempfile

from toolenv import (LIB, TOOL, check, clean_env, describe, finish, json_tool_accepts,
                     parse_json, require_tool, tool)

require_tool()
TRANSPORTS = ["shm", "verbs", "vendor", "tcp"]
real_lib = os.path.realpath(LIB)

# Text output: every transport on its own line, each either usable or with a reason.
p = tool("info")
check(p.returncode == 0, "info exits 0", describe(p))
lines = p.stdout.splitlines()
for name in TRANSPORTS:
    row = [line.split() for line in lines if line.split()[:1] == [name]]
    check(len(row) == 1 and len(row[0]) >= 4, f"info has one row for {name} with a reason",
          p.stdout)
check("error:      none" in p.stdout, "without FASTSOCK_* settings there is no config error",
      p.stdout)
check(f"library:    {real_lib} (build tree)" in p.stdout,
      "info shows the build-tree library that run would use", p.stdout)

# JSON output agrees with the registry's view: tcp usable, the others not in this build.
p = tool("info", "--json")
info = parse_json(p.stdout)
check(p.returncode == 0 and info is not None and json_tool_accepts(p.stdout),
      "info --json is valid JSON", describe(p))
if info is not None:
    names = [t["name"] for t in info["transports"]]
    check(names == TRANSPORTS, "info --json lists shm, verbs, vendor, tcp in order", names)
    by_name = {t["name"]: t for t in info["transports"]}
    tcp = by_name.get("tcp", {})
    check(tcp.get("available") is True and tcp.get("in_build") is True,
          "tcp is in the build and usable", tcp)
    shm = by_name.get("shm", {})
    check(shm.get("available") is True and shm.get("in_build") is True
          and "same-host" in shm.get("reason", ""),
          "shm is in the build and usable on this host (memfd_create works)", shm)
    for name in ("verbs", "vendor"):
        t = by_name.get(name, {})
        check(t.get("available") is False and len(t.get("reason", "")) > 0,
              f"{name} is not usable and says why", t)
    check(info["config"]["chain"] == TRANSPORTS and info["config"]["error"] is None,
          "default chain is shm,verbs,vendor,tcp with no error", info["config"])
    check(info["library"]["path"] == real_lib and info["library"]["source"] == "build tree",
          "info --json names the library and where it was found", info["library"])
    check(info["version"] == tool("--version").stdout.split()[1],
          "info --json reports the same version as --version", info["version"])

# A malformed setting: the error and the forced pass-through are shown, and the chain is tcp.
env = clean_env(FASTSOCK_TRANSPORTS="bogus")
p = tool("info", env=env)
check(p.returncode == 0 and "bogus" in p.stdout and "pass-through forced" in p.stdout,
      "FASTSOCK_TRANSPORTS=bogus shows the config error and forced pass-through", describe(p))
j = parse_json(tool("info", "--json", env=env).stdout) or {}
cfg = j.get("config", {})
check(cfg.get("pass_through_forced") is True and "bogus" in (cfg.get("error") or "")
      and cfg.get("chain") == ["tcp"],
      "info --json: bogus chain -> error, pass-through, chain [tcp]", cfg)
in_chain = {t["name"]: t["in_chain"] for t in j.get("transports", [])}
check(in_chain == {"shm": False, "verbs": False, "vendor": False, "tcp": True},
      "in pass-through only tcp is in the chain", in_chain)

# Settings are reported as the library would parse them.
env = clean_env(FASTSOCK_TRANSPORTS="vendor,tcp", FASTSOCK_LOG="debug", FASTSOCK_SPIN_US="7",
                FASTSOCK_STATS="0", FASTSOCK_SHM_RING_MAX="256K",
                FASTSOCK_VERBS_ZERO_COPY_MIN="32K")
cfg = (parse_json(tool("info", "--json", env=env).stdout) or {}).get("config", {})
check(cfg.get("chain") == ["vendor", "tcp"] and cfg.get("log_level") == "debug"
      and cfg.get("spin_us") == 7 and cfg.get("stats") is False
      and cfg.get("shm_ring_max") == 256 * 1024 and cfg.get("verbs_zero_copy") is True
      and cfg.get("verbs_zero_copy_min") == 32 * 1024 and cfg.get("error") is None,
      "info reflects FASTSOCK_TRANSPORTS/LOG/SPIN_US/STATS/SHM_RING_MAX/VERBS_ZERO_COPY_MIN", cfg)
p = tool("info", env=clean_env(FASTSOCK_VERBS_ZERO_COPY="0"))
check(p.returncode == 0 and "zero-copy:  off on verbs" in p.stdout,
      "FASTSOCK_VERBS_ZERO_COPY=0 shows zero-copy off", describe(p))

# The rules file is read and counted; an unreadable one is a config error like the library's.
with tempfile.TemporaryDirectory() as tmp:
    rules = os.path.join(tmp, "rules")
    with open(rules, "w") as f:
        f.write("# two rules\nuse tcp client * 10.0.0.0/8:*\nuse shm,tcp any redis* *:6379\n")
    cfg = (parse_json(tool("info", "--json", env=clean_env(FASTSOCK_RULES=rules)).stdout)
           or {}).get("config", {})
    check(cfg.get("rules") == 2 and cfg.get("rules_file") == rules and cfg.get("error") is None,
          "info counts the rules in FASTSOCK_RULES", cfg)
    missing = os.path.join(tmp, "missing")
    cfg = (parse_json(tool("info", "--json", env=clean_env(FASTSOCK_RULES=missing)).stdout)
           or {}).get("config", {})
    check(cfg.get("pass_through_forced") is True and missing in (cfg.get("error") or ""),
          "an unreadable rules file is a config error", cfg)

# FASTSOCK_LIBRARY takes precedence over the build tree; a missing one is reported.
lib = (parse_json(tool("info", "--json", env=clean_env(FASTSOCK_LIBRARY=LIB)).stdout)
       or {}).get("library", {})
check(lib.get("source") == "FASTSOCK_LIBRARY" and lib.get("path") == real_lib,
      "info honours FASTSOCK_LIBRARY", lib)
p = tool("info", env=clean_env(FASTSOCK_LIBRARY="/nonexistent/libfastsock.so"))
check(p.returncode == 0 and "not found" in p.stdout and "/nonexistent/libfastsock.so" in p.stdout,
      "info reports a FASTSOCK_LIBRARY that does not exist", describe(p))

# An installed tree: bin/fastsock finds <bindir>/FASTSOCK_LIBDIR_FROM_BINDIR/libfastsock.so.
libdir_from_bindir = os.environ.get("FASTSOCK_LIBDIR_FROM_BINDIR", "")
if libdir_from_bindir:
    with tempfile.TemporaryDirectory() as prefix:
        bindir = os.path.join(prefix, "bin")
        libdir = os.path.normpath(os.path.join(bindir, libdir_from_bindir))
        os.makedirs(bindir)
        os.makedirs(libdir, exist_ok=True)
        shutil.copy(TOOL, os.path.join(bindir, "fastsock"))
        shutil.copy(LIB, os.path.join(libdir, "libfastsock.so"))
        p = subprocess.run([os.path.join(bindir, "fastsock"), "info", "--json"], env=clean_env(),
                           capture_output=True, text=True, timeout=30)
        lib = (parse_json(p.stdout) or {}).get("library", {})
        check(lib.get("source") == "installed layout"
              and lib.get("path") == os.path.realpath(os.path.join(libdir, "libfastsock.so")),
              "an installed fastsock finds the library in its libdir", describe(p))
else:
    print("skip - installed layout (FASTSOCK_LIBDIR_FROM_BINDIR not set by meson)")

finish()
