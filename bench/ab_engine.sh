#!/bin/sh
# A/B of two builds' bench_engine, interleaved so both see the same machine.
# usage: bench/ab_engine.sh BEFORE_DIR AFTER_DIR ROUNDS -- bench_engine args...
# Each round runs BEFORE then AFTER (the order alternates every round, so neither
# always runs on a warmer or a quieter machine); the outputs are kept under
# ${AB_OUT:-build/ab}/ as <round>-<label>.txt and the tables' rows are printed.
set -eu
before=$1; after=$2; rounds=$3; shift 3
[ "$1" = "--" ] && shift
out=${AB_OUT:-build/ab}
mkdir -p "$out"
r=1
while [ "$r" -le "$rounds" ]; do
    if [ $((r % 2)) -eq 1 ]; then order="before after"; else order="after before"; fi
    for label in $order; do
        eval dir=\$$label
        "$dir/build/bench/bench_engine" "$@" > "$out/$r-$label.txt" 2>&1
        echo "== round $r $label (load $(cut -d' ' -f1 /proc/loadavg))"
        grep -E '^ +[0-9]+ ' "$out/$r-$label.txt" || cat "$out/$r-$label.txt"
    done
    r=$((r + 1))
done
