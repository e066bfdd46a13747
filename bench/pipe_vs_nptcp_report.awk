# bench/pipe_vs_nptcp_report.awk: the report of bench/pipe-vs-nptcp.sh. Run with stats.awk
# first. Input lines: "round tool row bytes seconds" (tool: nptcp or pipe; seconds: np.out's
# best-trial one-way time). -v json=FILE writes the rows as JSON too.

{
  key = $2 SUBSEP $3
  n[key]++
  t[key, n[key]] = $5
  if (!(($2, $3) in bytes)) bytes[$2, $3] = $4
  else if (bytes[$2, $3] != $4) { bad = "row " $3 " of " $2 " changed size between rounds"; exit 1 }
  rows[$2] = $3 > rows[$2] ? $3 : rows[$2]
}

function median_of(tool, row,    v, i, k) {
  k = n[tool, row]
  for (i = 1; i <= k; i++) v[i] = t[tool, row, i]
  return quantile(v, k, 0.5)
}

END {
  if (bad != "") { print "pipe_vs_nptcp_report: " bad > "/dev/stderr"; exit 1 }
  if (rows["nptcp"] != rows["pipe"] || rows["nptcp"] == 0) {
    printf "pipe_vs_nptcp_report: NPtcp has %d rows, fastsock-pipe %d\n", rows["nptcp"], rows["pipe"] > "/dev/stderr"
    exit 1
  }
  printf "\n%10s %12s %12s %9s %9s  %s\n", "bytes", "NPtcp_us", "pipe_us", "t_ratio", "bw_ratio", "within 10%"
  if (json != "") printf "{\"invocation\": %s, \"rounds\": %d, \"sizes\": [", jstr(invocation), rounds > json
  within = 0
  for (r = 1; r <= rows["nptcp"]; r++) {
    if (bytes["nptcp", r] != bytes["pipe", r]) {
      printf "pipe_vs_nptcp_report: row %d: NPtcp measured %d bytes, fastsock-pipe %d\n", r,
        bytes["nptcp", r], bytes["pipe", r] > "/dev/stderr"
      exit 1
    }
    a = median_of("nptcp", r); b = median_of("pipe", r)
    tr = b / a; br = a / b
    ok = (tr >= 0.9 && tr <= 1.1)
    within += ok
    ratios[r] = tr
    if (bytes["nptcp", r] <= 1024) lat[++nl] = tr
    if (bytes["nptcp", r] >= 65536) bw[++nb] = br
    printf "%10d %12.2f %12.2f %9.3f %9.3f  %s\n", bytes["nptcp", r], a * 1e6, b * 1e6, tr, br, ok ? "yes" : "NO"
    if (json != "")
      printf "%s\n  {\"bytes\": %d, \"nptcp_s\": %.9g, \"pipe_s\": %.9g, \"t_ratio\": %.5f, \"bw_ratio\": %.5f}",
        (r > 1 ? "," : ""), bytes["nptcp", r], a, b, tr, br > json
  }
  nr = rows["nptcp"]
  sorted_copy(ratios, nr, s)
  printf "\nsizes within 10%%: %d of %d (t_ratio from %.3f to %.3f)\n", within, nr, s[1], s[nr]
  if (nl) printf "latency, sizes <= 1 KiB: median t_ratio %.3f over %d sizes\n", quantile(lat, nl, 0.5), nl
  if (nb) printf "bandwidth, sizes >= 64 KiB: median bw_ratio %.3f over %d sizes\n", quantile(bw, nb, 0.5), nb
  print "t_ratio = fastsock-pipe / NPtcp best-trial one-way time, medians over the rounds;"
  print "bw_ratio = fastsock-pipe / NPtcp bandwidth (the inverse at one size)."
  if (json != "") printf "\n], \"within_10pct\": %d, \"sizes_total\": %d}\n", within, nr > json
}
