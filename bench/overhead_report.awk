# bench/overhead_report.awk: turns bench/overhead.sh's raw samples into the table and JSON.
# Run with bench/stats.awk first (awk -f stats.awk -f overhead_report.awk).
#
# Input lines (one per program run):
#   <round> <without|with> <workload> <metric> <unit> <value> <lower|higher> <target %>
# Variables (-v): json (output file), date, nproc, cpu, kernel, busy_before (% of CPU time
# busy just before the run), lib, mode, rounds, placement,
# invocation (the driver's command line), cmdfile ("<workload> <argv...>" lines) and cgfile
# (callgrind lines "<workload> <calls> <instructions without> <instructions with>").

# Extra time per operation in percent. For rates (higher is better) time is the inverse.
function overhead_pct(ratio, direction) {
  return (direction == "lower" ? ratio - 1 : 1 / ratio - 1) * 100
}

{
  w = $3
  if (!(w in metric)) {
    order[++nw] = w
    metric[w] = $4; unit[w] = $5; dir[w] = $7; tgt[w] = $8
  }
  if ($2 == "with") { nb[w]++; with_v[w, nb[w]] = $6; by_round_with[w, $1] = $6 }
  else { na[w]++; without_v[w, na[w]] = $6; by_round_without[w, $1] = $6 }
}

END {
  while ((getline line < cmdfile) > 0) {
    split(line, f, " ")
    cmd[f[1]] = substr(line, length(f[1]) + 2)
  }
  header = "%-13s %-27s %11s %11s %6s %9s %7s %7s  %s\n"
  printf "\n" header, "workload", "metric", "without", "with", "ratio", "overhead", "target",
    "noise", "verdict"
  printf header, "--------", "------", "-------", "----", "-----", "--------", "------",
    "-----", "-------"
  print_json_header()

  for (k = 1; k <= nw; k++) {
    w = order[k]
    delete a; delete b; delete paired
    for (i = 1; i <= na[w]; i++) a[i] = without_v[w, i]
    for (i = 1; i <= nb[w]; i++) b[i] = with_v[w, i]
    m_without = quantile(a, na[w], 0.5)
    m_with = quantile(b, nb[w], 0.5)
    ratio = m_with / m_without
    over = overhead_pct(ratio, dir[w])
    # Noise: half the interquartile range of the per-round paired overheads (each round ran
    # both sides back to back, so a pair shares the machine's state of the moment).
    np = 0
    for (r = 1; r <= rounds; r++)
      if ((w, r) in by_round_with && (w, r) in by_round_without)
        paired[++np] = overhead_pct(by_round_with[w, r] / by_round_without[w, r], dir[w])
    noise = np >= 2 ? (quantile(paired, np, 0.75) - quantile(paired, np, 0.25)) / 2 : 0
    if (over <= tgt[w]) verdict = "meets target"
    else if (over - noise <= tgt[w]) verdict = "within noise of target"
    else verdict = "misses target"
    if (mode == "quick") verdict = verdict " (quick run: indicative only)"

    printf "%-13s %-27s %11.3f %11.3f %6.3f %+8.2f%% %6s%% %6.2f%%  %s\n", w,
      metric[w] " (" unit[w] ")", m_without, m_with, ratio, over, "<=" tgt[w], noise, verdict
    printf "    {\"workload\": %s, \"metric\": %s, \"unit\": %s, \"better\": %s,\n",
      jstr(w), jstr(metric[w]), jstr(unit[w]), jstr(dir[w]) > json
    printf "     \"command\": %s,\n", jstr(cmd[w]) > json
    printf "     \"without\": %.4f, \"with\": %.4f, \"ratio\": %.4f, \"overhead_pct\": %.3f,\n",
      m_without, m_with, ratio, over > json
    printf "     \"target_pct\": %s, \"noise_pct\": %.3f, \"verdict\": %s,\n",
      tgt[w], noise, jstr(verdict) > json
    printf "     \"samples_without\": [%s],\n     \"samples_with\": [%s]}%s\n",
      join(a, na[w]), join(b, nb[w]), (k < nw ? "," : "") > json
  }

  printf "  ],\n  \"callgrind\": [\n" > json
  ncg = 0
  while ((getline line < cgfile) > 0) cg[++ncg] = line
  if (ncg) {
    printf "\ncallgrind: user-space instructions per operation (two run lengths differenced, so "
    printf "start-up and set-up cancel out)\n"
    printf "%-13s %10s %10s %10s %10s\n", "workload", "operations", "without", "with", "added/op"
  }
  for (i = 1; i <= ncg; i++) {
    split(cg[i], f, " ")
    per_without = f[3] / f[2]
    per_with = f[4] / f[2]
    printf "%-13s %10d %10.1f %10.1f %10.1f\n", f[1], f[2], per_without, per_with,
      per_with - per_without
    printf "    {\"workload\": %s, \"operations\": %d, \"instructions_per_op_without\": %.2f,\n",
      jstr(f[1]), f[2], per_without > json
    printf "     \"instructions_per_op_with\": %.2f, \"added_per_op\": %.2f}%s\n",
      per_with, per_with - per_without, (i < ncg ? "," : "") > json
  }
  printf "  ]\n}\n" > json
}
