#!/usr/bin/env python3
"""Report of bench/recovery_prefetch.sh: a table of redo times with ratios,
the pass/fail of the targets, and a PNG of replay progress per variant.

usage: recovery_prefetch_report.py WORKDIR OUTDIR DESCRIPTION [PREFIX [IOPS_CAP]]

PREFIX names the plots (PREFIX-fpw-ROW.png, default recovery-prefetch).
With IOPS_CAP (the cloud profile), the table adds the read requests the
device served and each variant's device limit, max(all cached, requests /
IOPS_CAP), and the cloud profile's targets are checked.
"""
import collections
import os
import re
import statistics
import subprocess
import sys

from benchstats import bootstrap_median_ci, spread

PROGRESS = re.compile(r"redo in progress, elapsed time: ([0-9.]+) s, current LSN: ([0-9A-F]+)/([0-9A-F]+)")
START = re.compile(r"redo starts at ([0-9A-F]+)/([0-9A-F]+)")
DONE = re.compile(r"redo done at ([0-9A-F]+)/([0-9A-F]+) .*elapsed: ([0-9.]+) s")


def row_title(row):
    if row == "ordered":
        return "DELETE of every 20th account and VACUUM, full_page_writes = off"
    return f"full_page_writes = {row}"


def lsn(hi, lo):
    return (int(hi, 16) << 32) + int(lo, 16)


def progress(path):
    """(seconds, MB replayed) points from a server log."""
    points, start = [(0.0, 0.0)], None
    with open(path, errors="replace") as f:
        for line in f:
            m = START.search(line)
            if m:
                start = lsn(*m.groups())
            m = PROGRESS.search(line)
            if m and start is not None:
                points.append((float(m.group(1)), (lsn(m.group(2), m.group(3)) - start) / 2**20))
            m = DONE.search(line)
            if m and start is not None:
                points.append((float(m.group(3)), (lsn(m.group(1), m.group(2)) - start) / 2**20))
    return points


def read_times(work):
    """{row: {variant: {round: seconds}}}, the last pg_stat_recovery_prefetch
    line of each of ours and {(row, variant): [(read requests, 8kB blocks)
    per round]},
    from the times file (one line per recovery: row, variant, seconds, the
    view's figures or "-", round, and on the cloud profile the device's read
    requests and 8kB blocks)."""
    times = collections.OrderedDict()
    prefetch_stats = {}
    device = collections.defaultdict(list)
    with open(os.path.join(work, "times")) as f:
        for line in f:
            fields = line.split()
            row, name, seconds = fields[:3]
            stats = fields[3] if len(fields) > 3 else "-"
            rnd = fields[4] if len(fields) > 4 else "1"
            times.setdefault(row, collections.OrderedDict()).setdefault(name, {})[int(rnd)] = float(seconds)
            if stats != "-":
                prefetch_stats[(row, name)] = stats
            if len(fields) > 6:
                device[(row, name)].append((int(fields[5]), int(fields[6])))
    return times, prefetch_stats, device


def within_rounds(row, num, den):
    """num / den in each round that ran both; num and den are variant names,
    or lists of them, of which the fastest in that round counts."""
    def best(names, rnd):
        ts = [row[n][rnd] for n in ([names] if isinstance(names, str) else names)
              if n in row and rnd in row[n]]
        return min(ts) if ts else None
    rounds = sorted({r for runs in row.values() for r in runs})
    pairs = [(best(num, r), best(den, r)) for r in rounds]
    return [a / b for a, b in pairs if a is not None and b is not None]


def main():
    work, out, description = sys.argv[1], sys.argv[2], sys.argv[3]
    prefix = sys.argv[4] if len(sys.argv) > 4 else "recovery-prefetch"
    iops_cap = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    times, prefetch_stats, device = read_times(work)
    rounds = max(len(runs) for row in times.values() for runs in row.values())

    description, _, device_lines = description.partition("\n")
    print(f"Crash recovery, redo time in seconds ({description})")
    if device_lines:
        print(device_lines)
    if rounds > 1:
        print("Times are medians over the rounds, spread their range as a percentage of the median.")
        print("Ratios are taken within each round and their median is given, with their range")
        print("(and, from ten rounds on, a 95% bootstrap interval of the median; with fewer, that")
        print("interval is about the range); lower is faster.  vs off is the ratio to vanilla_off")
        print("of the same row.  The times of each round follow each row's table.")
    else:
        print("Ratios are to vanilla_off of the same row; lower is faster.")
    for fpw, row in times.items():
        print(f"\n{row_title(fpw)}")
        cached = statistics.median(row["vanilla_cached"].values()) if "vanilla_cached" in row else 0.0
        limits = {}
        head = f"  {'variant':<20} {'redo s':>8} {'spread':>8} {'vs off':>8}"
        if iops_cap:
            head += f" {'dev reqs':>9} {'8kB blks':>9} {'limit s':>8} {'vs limit':>8}"
        print(head + "  pg_stat_recovery_prefetch (ours, last round)")
        for name, runs in row.items():
            t = statistics.median(runs.values())
            vs_off = within_rounds(row, name, "vanilla_off")
            ratio = f"{statistics.median(vs_off):8.2f}" if vs_off else f"{'':>8}"
            sp = f"{spread(list(runs.values())):7.0f}%" if len(runs) > 1 else f"{'':>8}"
            line = f"  {name:<20} {t:8.1f} {sp} {ratio}"
            if iops_cap:
                reads = device[(fpw, name)] or [(0, 0)]
                reqs = statistics.median(r for r, _ in reads)
                blocks = statistics.median(b for _, b in reads)
                limits[name] = max(cached, reqs / iops_cap)
                vs_limit = f"{t / limits[name]:8.2f}" if limits[name] > 0 else f"{'':>8}"
                line += f" {reqs:9.0f} {blocks:9.0f} {limits[name]:8.1f} {vs_limit}"
            print(f"{line}  {prefetch_stats.get((fpw, name), '')}")

        def check(label, values, target, lower_is_pass=True, verdict=True):
            if not values:
                return
            value = statistics.median(values)
            ok = value <= target if lower_is_pass else value >= target
            result = ("PASS" if ok else "FAIL") if verdict else "NO VERDICT"
            interval = ""
            if len(values) > 1:
                interval = f", range {min(values):.2f}-{max(values):.2f} over {len(values)} rounds"
            if len(values) >= 10:
                lo, hi = bootstrap_median_ci(values)
                interval += f", interval {lo:.2f}-{hi:.2f}"
            print(f"  {result}: {label}: {value:.3f} "
                  f"(target {'<=' if lower_is_pass else '>='} {target}{interval})")

        if rounds > 1:
            print("  per round (s): " + "; ".join(
                f"{name} " + " ".join(f"{runs[r]:.2f}" if r in runs else "-"
                                      for r in range(1, rounds + 1))
                for name, runs in row.items()))
        advice = [n for n in ("vanilla_advice", "vanilla_advice_deep") if n in row]
        single = within_rounds(row, "ours_read_single", "ours_read_uring")
        if single:
            print(f"  combining neighbours: ours_read_single (io_combine_limit = 1) / ours_read_uring: "
                  f"{statistics.median(single):.2f}")
        if advice:
            # Never slower than advice, in every row: the default against
            # vanilla's posix_fadvise at its defaults.
            check("vanilla_advice / ours_read_uring (never slower than advice)",
                  within_rounds(row, "vanilla_advice", "ours_read_uring"), 1.0, False)
        check("ours_cached / vanilla_cached (all cached)",
              within_rounds(row, "ours_cached", "vanilla_cached"), 1.03)
        if iops_cap:
            both = len(advice) == 2
            check("vanilla_direct_sized / ours_direct_sized",
                  within_rounds(row, "vanilla_direct_sized", "ours_direct_sized"), 5.0, False)
            if advice:
                check(f"vanilla's better advice ({', '.join(advice)}) / ours_read_uring",
                      within_rounds(row, advice, "ours_read_uring"),
                      2.0 if fpw == "ordered" else 1.0, False, verdict=both)
            # Both tuned alike for the device (maintenance_io_concurrency
            # = 100): reads in flight are what that setting bounds.
            check("vanilla_advice_deep / ours_read_deep (tuned alike)",
                  within_rounds(row, "vanilla_advice_deep", "ours_read_deep"),
                  2.0 if fpw == "ordered" else 1.0, False)
            for n in ("ours_read_uring", "ours_read_deep"):
                if fpw != "ordered" and n in limits and limits[n] > 0:
                    check(f"{n} / its device limit",
                          [t / limits[n] for t in row[n].values()], 1.25)
            continue
        if fpw not in ("on", "off"):
            continue  # the remaining targets are for the pgbench rows
        for n in ("ours_read_uring", "ours_read_worker", "ours_read_deep"):
            check(f"{n} / vanilla_cached", within_rounds(row, n, "vanilla_cached"), 1.25)
            if advice:
                # The target is against the better of the two; with one of
                # them missing, the ratio decides nothing.
                both = len(advice) == 2
                label = "vanilla's better advice" if both else \
                    "vanilla's advice, one of its two settings only"
                check(f"{label} ({', '.join(advice)}) / {n}",
                      within_rounds(row, advice, n), 1.3, False, verdict=both)
        check("vanilla_direct / ours_direct", within_rounds(row, "vanilla_direct", "ours_direct"), 2.5, False)

    # One plot per row, one line per variant.
    for fpw, row in times.items():
        png = os.path.join(out, f"{prefix}-fpw-{fpw}.png")
        data = os.path.join(work, f"plot-{fpw}.dat")
        names = []
        with open(data, "w") as f:
            for name in row:
                log = os.path.join(work, f"{name}-fpw-{fpw}.log")
                if not os.path.exists(log):
                    continue
                names.append(name)
                f.write(f"# {name}\n")
                for t, mb in progress(log):
                    f.write(f"{t} {mb}\n")
                f.write("\n\n")
        colors = ["#000000", "#e41a1c", "#ff7f00", "#377eb8", "#4daf4a", "#984ea3",
                  "#a65628", "#f781bf", "#999999", "#17becf", "#bcbd22", "#1f3f7f"]
        plots = ", ".join(
            f"'{data}' index {i} with lines lw 2 lc rgb '{colors[i % len(colors)]}'"
            f" dt {2 if 'cached' in n else 1} title '{n}'"
            for i, n in enumerate(names))
        script = f"""
set terminal png size 1000,600 noenhanced
set output '{png}'
set title 'Crash recovery progress{", emulated cloud volume" if iops_cap else ""}, {row_title(fpw)}'
set xlabel 'seconds since redo started'
set ylabel 'WAL replayed (MB)'
set key bottom right
set grid
plot {plots}
"""
        subprocess.run(["gnuplot"], input=script.encode(), check=True)
        print(f"\nplot: {png}")


if __name__ == "__main__":
    main()
