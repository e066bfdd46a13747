# bench/nptcp_summary.awk: reads NetPIPE's np.out and prints "<latency us> <bandwidth MB/s>".
# Run with bench/stats.awk first. -v quick=1: bandwidth of the largest size only.
#
# np.out columns (NetPIPE 3.7): message size (bytes), bandwidth (Mbit/s, 1e6 bits), half
# round trip (seconds). Latency is the median over the 1-16 byte sizes, which are all
# latency-bound (one row alone is noisy); bandwidth is the median over the 1-4 MiB sizes.

$1 <= 16 { lat[++nl] = $3 * 1e6 }
quick || ($1 >= 1048576 && $1 <= 4194304) { bw[++nb] = $2 / 8 }

END {
  if (!nl || !nb) exit 1
  if (quick) { bw[1] = bw[nb]; nb = 1 }
  printf "%.3f %.1f\n", quantile(lat, nl, 0.5), quantile(bw, nb, 0.5)
}
