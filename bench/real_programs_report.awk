# bench/real_programs_report.awk: turns bench/real-programs.sh's samples into the table and
# JSON. Run with bench/stats.awk first (awk -f stats.awk -f real_programs_report.awk).
#
# Input lines (one per program run and metric):
#   <round> <without|with> <program> <metric> <value> <client lines> <server lines> <transports>
# Variables (-v): json (output file), date, nproc, cpu, kernel, lib, mode, rounds,
# invocation (the driver's command line), busy_before (% of CPU time busy before the run),
# placement (where the two ends ran).

{
  key = $3 " " $4
  if (!(key in seen)) { seen[key] = 1; order[++nk] = key }
  if ($2 == "with") {
    nw[key]++
    with_v[key, nw[key]] = $5
    by_round_with[key, $1] = $5
    clients[key] += $6
    servers[key] += $7
    if (!index("," transports[key] ",", "," $8 ","))
      transports[key] = transports[key] (transports[key] ? "," : "") $8
  } else {
    no[key]++
    without_v[key, no[key]] = $5
    by_round_without[key, $1] = $5
  }
}

END {
  fmt = "%-7s %-21s %11s %15s %6s %13s  %-9s %s\n"
  printf "\n" fmt, "program", "metric", "kernel TCP", "under fastsock", "ratio",
    "round ratios", "transport", "tracked (client/server lines)"
  printf fmt, "-------", "------", "----------", "--------------", "-----", "------------",
    "---------", "-----------------------------"
  print_json_header()
  for (k = 1; k <= nk; k++) {
    key = order[k]
    split(key, f, " ")
    delete a; delete b; delete paired
    for (i = 1; i <= no[key]; i++) a[i] = without_v[key, i]
    for (i = 1; i <= nw[key]; i++) b[i] = with_v[key, i]
    m_without = quantile(a, no[key], 0.5)
    m_with = quantile(b, nw[key], 0.5)
    # The spread of the per-round ratios (each round ran both sides back to back).
    np = 0
    for (r = 1; r <= rounds; r++)
      if ((key, r) in by_round_with && (key, r) in by_round_without)
        paired[++np] = by_round_with[key, r] / by_round_without[key, r]
    spread = sprintf("%.2f-%.2f", quantile(paired, np, 0), quantile(paired, np, 1))
    tracked = sprintf("%d/%d in %d runs", clients[key], servers[key], nw[key])
    printf "%-7s %-21s %11.2f %15.2f %6.3f %13s  %-9s %s\n", f[1], f[2], m_without, m_with,
      m_with / m_without, spread, transports[key], tracked
    printf "    {\"program\": %s, \"metric\": %s, \"kernel_tcp\": %.4f,\n", jstr(f[1]),
      jstr(f[2]), m_without > json
    printf "     \"under_fastsock\": %.4f, \"ratio\": %.4f, \"round_ratios\": [%s],\n",
      m_with, m_with / m_without, join(paired, np) > json
    printf "     \"transport\": %s, \"client_lines\": %d, \"server_lines\": %d, \"runs\": %d,\n",
      jstr(transports[key]), clients[key], servers[key], nw[key] > json
    printf "     \"samples_kernel_tcp\": [%s],\n     \"samples_under_fastsock\": [%s]}%s\n",
      join(a, no[key]), join(b, nw[key]), (k < nk ? "," : "") > json
  }
  printf "  ]\n}\n" > json
}
