#!/usr/bin/env bash
# plots.sh: --plot PREFIX with two transports writes the latency and bandwidth graphs as SVG
# (well-formed XML naming both transports and the axis units) and PNG (PNG signature), plus
# the gnuplot script. Skipped when gnuplot is not installed.
source "$(dirname "$0")/lib_pipe.sh"
pipe_init pipe_plots
command -v gnuplot >/dev/null || skip "gnuplot not installed (Debian: gnuplot-nox)"

run_fg plot 60 "$PIPE" --local --compare tcp,unix -u 65536 "${QUICK[@]}" -q --plot "$WORK/p"
png=1
gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1 || gnuplot -e 'set terminal png' >/dev/null 2>&1 || png=0
python3 - "$WORK/p" "$png" <<'PY' || fail "plot files invalid"
import sys, xml.etree.ElementTree as ET
prefix, png = sys.argv[1], sys.argv[2] == "1"
for graph, unit in (("latency", "µs"), ("bandwidth", "bit/s")):
    root = ET.parse(prefix + "-" + graph + ".svg").getroot()
    if not root.tag.endswith("svg"):
        print("FAIL: not an SVG root:", root.tag); sys.exit(1)
    text = " ".join(t for t in root.itertext())
    for want in ("tcp", "unix", unit, "message size"):
        if want not in text:
            print("FAIL: %s.svg lacks %r" % (graph, want)); sys.exit(1)
    if png:
        with open(prefix + "-" + graph + ".png", "rb") as f:
            if f.read(8) != b"\x89PNG\r\n\x1a\n":
                print("FAIL: %s.png is not a PNG" % graph); sys.exit(1)
print("ok")
PY
[[ -s "$WORK/p.gp" ]] || fail "no gnuplot script kept"
grep -q '^# plot: .*p-latency.svg' "$WORK/plot.out" || fail "the written files are not listed"
[[ $png -eq 1 ]] || note "no PNG terminal in this gnuplot: only SVG checked"
note "PASS"
