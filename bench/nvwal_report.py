#!/usr/bin/env python3
"""Report of bench/nvwal.sh: median TPS per variant and client count, the
ratios against the targets with PASS/FAIL, commit latencies, what
pg_stat_nvwal counted, and a PNG of TPS against clients per variant.

usage: nvwal_report.py WORKDIR OUTDIR DESCRIPTION
"""
import collections
import os
import re
import statistics
import subprocess
import sys

from benchstats import bootstrap_median_ci, spread

FDATASYNC = re.compile(r"^\s*fdatasync\s+([0-9.]+) ops/sec\s+([0-9]+) usecs/op")


def parse_stats(text):
    if text == "-":
        return {}
    return {k: int(v) for k, v in (kv.split("=") for kv in text.split(","))}


def per_txn(run, counter):
    """A run's count of counter (perf stat) per transaction, or None."""
    stats, txns = run[3], run[2]
    return stats[counter] / txns if counter in stats and txns else None


def cpu_report(tpcb, clients, names):
    """CPU cycles and instructions per TPC-B transaction (the whole machine,
    pgbench included), and their ratios between variants within a round.
    Where both CPUs are busy, TPS is what they can do per transaction, and
    these counts vary much less between rounds than TPS does."""
    if not any(per_txn(r, "cycles") for c in clients for rs in tpcb[c].values() for r in rs):
        return
    print("\nCPU per TPC-B transaction, whole machine (perf stat -a; median over rounds,"
          " in brackets the range over rounds as % of the median)")
    for counter, unit in (("cycles", "kcycles"), ("instructions", "kinstr")):
        print_per_txn_table(tpcb, clients, names, counter, f"{counter} ({unit})", 1e3)

    for counter in ("cycles", "instructions"):
        print_per_txn_ratios(tpcb, clients, counter, counter,
                             (("nvwal", "async"), ("nvwal", "tmpfs"), ("nvwal", "disk"), ("tmpfs", "async")))


def print_per_txn_table(tpcb, clients, names, counter, heading, unit):
    """A variant's median of counter per transaction (in units of unit),
    per client count, with its range over rounds."""
    print(f"\n  {heading:<22}" + "".join(f"{str(c) + ' cl':>16}" for c in clients))
    for n in names:
        cells = []
        for c in clients:
            vals = [v for v in (per_txn(r, counter) for r in tpcb[c].get(n, [])) if v]
            cells.append(f"{statistics.median(vals) / unit:>8.1f} [{spread(vals):4.1f}%]" if vals else "-")
        print(f"  {n:<22}" + "".join(f"{cell:>16}" for cell in cells))


def print_per_txn_ratios(tpcb, clients, counter, what, pairs):
    """For each pair of variants, the median over rounds of the ratio
    within a round of counter per transaction, with its 95% interval."""
    def ratios(a, b, c):
        pa = {r[4]: per_txn(r, counter) for r in tpcb[c].get(a, [])}
        pb = {r[4]: per_txn(r, counter) for r in tpcb[c].get(b, [])}
        return [pa[k] / pb[k] for k in pa if k in pb and pa[k] and pb[k]]

    print(f"\n  Ratios of {what} per transaction (below 1: the first variant needs less;"
          " median over rounds of the ratio within a round, 95% interval)")
    for a, b in pairs:
        within = [ratios(a, b, c) for c in clients]
        if not any(within):
            continue
        cells = []
        for w in within:
            if w:
                lo, hi = bootstrap_median_ci(w)
                cells.append(f"{statistics.median(w):.3f} ({lo:.3f}-{hi:.3f})")
            else:
                cells.append("-")
        print(f"  {a + ' / ' + b:<22}" + "".join(f"{cell:>22}" for cell in cells))
    print(f"  {'clients':<22}" + "".join(f"{c:>22}" for c in clients))


def server_cpu_report(tpcb, clients, names):
    """CPU time of the server (its processes' user and system time, from
    /proc) per TPC-B transaction, and its ratio between variants within a
    round: what a change to the commit path costs, without pgbench."""
    if not any(per_txn(r, "server_cpu_us") for c in clients for rs in tpcb[c].values() for r in rs):
        return
    print("\nServer CPU time per TPC-B transaction, us (median over rounds,"
          " in brackets the range over rounds as % of the median)")
    print_per_txn_table(tpcb, clients, names, "server_cpu_us", "variant", 1)

    print_per_txn_ratios(tpcb, clients, "server_cpu_us", "server CPU time",
                         (("nvwal", "nvwal-base"), ("nvwal", "async"), ("nvwal", "tmpfs"), ("nvwal", "disk")))


def main():
    work, out, description = sys.argv[1], sys.argv[2], sys.argv[3]
    # runs[kind][clients][variant] = [(tps, latency_ms, transactions, stats, round)]
    runs = collections.defaultdict(lambda: collections.defaultdict(lambda: collections.OrderedDict()))
    rounds = set()
    with open(os.path.join(work, "runs")) as f:
        for line in f:
            kind, clients, name, rnd, tps, lat, txns, stats = line.split()
            rounds.add(rnd)
            runs[kind][int(clients)].setdefault(name, []).append(
                (float(tps), float(lat), int(txns or 0), parse_stats(stats), rnd))

    tpcb = runs["tpcb"]
    clients = sorted(tpcb)
    names = []
    for c in clients:
        for n in tpcb[c]:
            if n not in names:
                names.append(n)
    tps = {(n, c): statistics.median(r[0] for r in tpcb[c][n]) for c in clients for n in tpcb[c]}

    print(f"Non-volatile WAL buffer: commit throughput ({description})")
    print(f"TPS, median of {len(rounds)} round(s); in brackets the range over rounds as % of the median.")
    print(f"\n  {'variant':<13}" + "".join(f"{str(c) + (' client' if c == 1 else ' clients'):>20}" for c in clients))
    for n in names:
        cells = []
        for c in clients:
            if (n, c) in tps:
                cells.append(f"{tps[(n, c)]:>11.0f} [{spread([r[0] for r in tpcb[c][n]]):4.1f}%]")
            else:
                cells.append(f"{'-':>20}")
        print(f"  {n:<13}" + "".join(f"{cell:>20}" for cell in cells))

    # The machine drifts by more than the differences asked about, so a
    # ratio is taken within each round, where both runs are close in time,
    # and the median over rounds is reported.
    def ratio(a, b, c):
        pa = {r[4]: r[0] for r in tpcb[c].get(a, [])}
        pb = {r[4]: r[0] for r in tpcb[c].get(b, [])}
        return [pa[k] / pb[k] for k in pa if k in pb and pb[k]]

    print("\nRatios of TPS (same client count; median over rounds of the ratio within a round)")
    verdicts = []
    for label, a, b, target, strict in (
            ("nvwal / async", "nvwal", "async", 0.95, False),
            ("nvwal / tmpfs", "nvwal", "tmpfs", 1.0, True),
            ("nvwal / disk", "nvwal", "disk", None, False),
            ("patched-disk / disk", "patched-disk", "disk", None, False),
            ("nvwal-async / async", "nvwal-async", "async", None, False),
            ("nvwal / nvwal-base", "nvwal", "nvwal-base", None, False)):
        within = [ratio(a, b, c) for c in clients]
        values = [statistics.median(w) if w else None for w in within]
        if all(v is None for v in values):
            continue
        cells = "".join(f"{v:>10.3f}" if v is not None else f"{'-':>10}" for v in values)
        ranges = "".join(f"{min(w):>5.2f}-{max(w):.2f}" if w else f"{'-':>10}" for w in within)
        cis = [bootstrap_median_ci(w) if w else None for w in within]
        ci_cells = "".join(f"{ci[0]:>5.2f}-{ci[1]:.2f}" if ci else f"{'-':>10}" for ci in cis)
        of_medians = "".join(
            f"{tps[(a, c)] / tps[(b, c)]:>10.3f}" if (a, c) in tps and (b, c) in tps else f"{'-':>10}"
            for c in clients)
        if target is None:
            note = "(for information)"
        else:
            note = f"target {'>' if strict else '>='} {target} at every client count"
            ok = all(v is not None and (v > target if strict else v >= target) for v in values)
            verdicts.append((ok, label, values, target, strict, cis))
        print(f"  {label:<22}{cells}   {note}")
        print(f"  {'  95% interval':<22}{ci_cells}")
        print(f"  {'  range over rounds':<22}{ranges}")
        print(f"  {'  ratio of medians':<22}{of_medians}")
    print(f"  {'clients':<22}" + "".join(f"{c:>10}" for c in clients))
    print()
    for ok, label, values, target, strict, cis in verdicts:
        shown = ", ".join(f"{c}: {v:.3f}" if v is not None else f"{c}: -" for c, v in zip(clients, values))
        print(f"  {'PASS' if ok else 'FAIL'}: {label} {'>' if strict else '>='} {target} ({shown})")
        # Client counts where the interval straddles the target: there the
        # verdict is the machine's noise as much as a measurement.
        unsure = [str(c) for c, ci in zip(clients, cis) if ci and ci[0] <= target <= ci[1]]
        if unsure:
            print(f"        the 95% interval of the median includes {target} at {', '.join(unsure)}"
                  f" client(s): this run cannot tell there")
    print("  (95% interval: percentile bootstrap of the median over rounds, 10000 resamples)")

    cpu_report(tpcb, clients, names)
    server_cpu_report(tpcb, clients, names)

    commit = runs["commit"].get(1, {})
    if commit:
        print("\nCommit latency: one-row INSERT, autocommit, 1 client (pgbench latency average, median of rounds)")
        print("  (pgbench prints the latency to the microsecond; us/commit is 1/TPS, finer for one client)")
        async_tps = statistics.median(r[0] for r in commit["async"]) if "async" in commit else None
        print(f"  {'variant':<13} {'latency ms':>11} {'us/commit':>10} {'TPS':>9} {'vs async':>9}")
        for n, rs in commit.items():
            lat = statistics.median(r[1] for r in rs)
            t = statistics.median(r[0] for r in rs)
            vs = f"{async_tps / t:9.2f}" if async_tps else f"{'':>9}"
            print(f"  {n:<13} {lat:>11.3f} {1e6 / t:>10.1f} {t:>9.0f} {vs}")

    # What the nvwal variant's buffer did during the measured runs.
    rows = []
    for kind, label in (("tpcb", "TPC-B"), ("commit", "INSERT")):
        for c in sorted(runs[kind]):
            for n, rs in runs[kind][c].items():
                if not any("flushes" in r[3] for r in rs):
                    continue
                txns = sum(r[2] for r in rs)
                f = sum(r[3].get("flushes", 0) for r in rs)
                full = sum(r[3].get("ring_full", 0) for r in rs)
                wb = sum(r[3].get("written_back", 0) for r in rs)
                rows.append((n, f"{label} -c{c}", txns, f, f / txns if txns else 0.0, full, wb / 2**20))
    if rows:
        print("\npg_stat_nvwal during the measured runs (sums over rounds)")
        print(f"  {'variant':<12} {'workload':<12} {'transactions':>12} {'flushes':>10} {'per txn':>8} {'ring_full':>10} {'written back MB':>16}")
        for n, w, txns, f, per, full, wb in rows:
            print(f"  {n:<12} {w:<12} {txns:>12} {f:>10} {per:>8.2f} {full:>10} {wb:>16.1f}")

    # How often every variant went to pg_wal: with NVWAL only the WAL
    # writer (or an inserter finding the ring full) should.
    rows = []
    for kind, label in (("tpcb", "TPC-B"), ("commit", "INSERT")):
        for c in sorted(runs[kind]):
            for n, rs in runs[kind][c].items():
                txns = sum(r[2] for r in rs)
                if not txns or not any("wal_fsyncs" in r[3] for r in rs):
                    continue
                w = sum(r[3].get("wal_writes", 0) for r in rs)
                s = sum(r[3].get("wal_fsyncs", 0) for r in rs)
                rows.append((n, f"{label} -c{c}", txns, 1000 * w / txns, 1000 * s / txns))
    if rows:
        print("\nWAL writes and fsyncs to pg_wal per 1000 transactions (pg_stat_io, all processes)")
        print(f"  {'variant':<12} {'workload':<12} {'transactions':>12} {'writes':>10} {'fsyncs':>10}")
        for n, wl, txns, w, s in rows:
            print(f"  {n:<12} {wl:<12} {txns:>12} {w:>10.1f} {s:>10.1f}")

    fsync_txt = os.path.join(work, "pg_test_fsync.txt")
    if os.path.exists(fsync_txt):
        with open(fsync_txt, errors="replace") as f:
            for line in f:
                m = FDATASYNC.match(line)
                if m:
                    print(f"\nfdatasync of one 8kB write on the disk holding the data directories"
                          f" (pg_test_fsync): {float(m.group(1)):.0f} ops/sec, {m.group(2)} usecs/op")
                    break

    checkpoints = os.path.join(work, "checkpoints")
    if os.path.exists(checkpoints):
        with open(checkpoints) as f:
            extra = [line.split() for line in f if line.split()[1] != "0"]
        for n, count in extra:
            print(f"\nWARNING: {n} had {count} checkpoint(s) triggered by WAL volume or time;"
                  " a run may have been disturbed (see its server log)")

    # Grouped bars: TPS against clients, one bar per variant, and the
    # commit latency per variant beside it.
    png = os.path.join(out, "nvwal.png")
    tps_dat = os.path.join(work, "plot-tps.dat")
    with open(tps_dat, "w") as f:
        f.write("clients " + " ".join(names) + "\n")
        for c in clients:
            f.write(f"{c} " + " ".join(f"{tps.get((n, c), float('nan')):.1f}" for n in names) + "\n")
    colors = {"disk": "#999999", "tmpfs": "#377eb8", "nvwal": "#e41a1c",
              "async": "#4daf4a", "patched-disk": "#555555",
              "nvwal-async": "#a65628"}
    def color(n):
        return colors.get(n, "#984ea3")
    lat_dat = os.path.join(work, "plot-latency.dat")
    with open(lat_dat, "w") as f:
        for n, rs in commit.items():
            # gnuplot's "lc rgb variable" takes the colour as a number
            # 1/TPS: pgbench's latency average is rounded to the microsecond
            f.write(f"{n} {1e6 / statistics.median(r[0] for r in rs):.2f} {int(color(n)[1:], 16)}\n")
    tps_plot = ", ".join(
        f"'{tps_dat}' using {i + 2}:xtic(1) title columnheader({i + 2}) lc rgb '{color(n)}'"
        for i, n in enumerate(names))
    lat_plot = (f"plot '{lat_dat}' using 0:2:(0.6):3:xtic(1) with boxes lc rgb variable,"
                f" '' using 0:2:(sprintf('%.1f', $2)) with labels offset 0,0.7"
                if commit else "")
    script = f"""
set terminal png size 1200,550 noenhanced
set output '{png}'
set multiplot layout 1,2 title 'Non-volatile WAL buffer, {len(rounds)} round(s), medians'
set grid ytics
set yrange [0:*]
set style fill solid 0.9 border -1
set title 'pgbench TPC-B'
set style data histograms
set style histogram clustered gap 1
set key top left
set xlabel 'clients'
set ylabel 'TPS'
plot {tps_plot}
set title 'commit latency: one-row INSERT, 1 client (1/TPS)'
set xlabel ''
set ylabel 'microseconds per commit'
unset key
set boxwidth 0.6
set offsets 0, 0, graph 0.1, 0
set xrange [-0.5:{max(len(commit), 1) - 0.5}]
{lat_plot}
unset multiplot
"""
    subprocess.run(["gnuplot"], input=script.encode(), check=True)
    print(f"\nplot: {png}")


if __name__ == "__main__":
    main()
