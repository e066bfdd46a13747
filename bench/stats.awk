# bench/stats.awk: helpers shared by the benchmark report scripts (awk -f stats.awk -f ...).
# Portable awk (mawk, gawk, busybox): no gawk extensions.

function sorted_copy(src, n, dst,    i, j, t) {
  for (i = 1; i <= n; i++) dst[i] = src[i]
  for (i = 2; i <= n; i++) {
    t = dst[i]
    for (j = i - 1; j >= 1 && dst[j] > t; j--) dst[j + 1] = dst[j]
    dst[j + 1] = t
  }
}

# Quantile q in [0, 1] with linear interpolation; q = 0.5 is the median.
function quantile(src, n, q,    s, pos, lo) {
  sorted_copy(src, n, s)
  pos = 1 + q * (n - 1)
  lo = int(pos)
  return lo >= n ? s[n] : s[lo] + (pos - lo) * (s[lo + 1] - s[lo])
}

function join(src, n,    i, out) {
  out = ""
  for (i = 1; i <= n; i++) out = out (i > 1 ? ", " : "") src[i]
  return out
}

function jstr(s) {
  gsub(/\\/, "\\\\", s)
  gsub(/"/, "\\\"", s)
  return "\"" s "\""
}

# The opening of a results JSON file, common to both reports: run metadata, then the
# "results" array the caller fills. Uses the variables the drivers pass with -v.
function print_json_header() {
  printf "{\n  \"date\": %s,\n  \"machine\": {\"nproc\": %d, \"cpu\": %s, \"kernel\": %s},\n",
    jstr(date), nproc, jstr(cpu), jstr(kernel) > json
  printf "  \"command\": %s,\n  \"library\": %s,\n  \"mode\": %s,\n  \"rounds\": %d,\n",
    jstr(invocation), jstr(lib), jstr(mode), rounds > json
  printf "  \"placement\": %s,\n  \"cpu_busy_before_pct\": %d,\n  \"results\": [\n",
    jstr(placement), busy_before > json
}
