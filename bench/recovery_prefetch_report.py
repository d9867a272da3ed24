#!/usr/bin/env python3
"""Report of bench/recovery_prefetch.sh: a table of redo times with ratios,
the pass/fail of the targets, and a PNG of replay progress per variant.

usage: recovery_prefetch_report.py WORKDIR OUTDIR DESCRIPTION
"""
import collections
import os
import re
import subprocess
import sys

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


def main():
    work, out, description = sys.argv[1], sys.argv[2], sys.argv[3]
    times = collections.OrderedDict()
    prefetch_stats = {}
    with open(os.path.join(work, "times")) as f:
        for line in f:
            fpw, name, seconds, stats = (line.split() + ["-"])[:4]
            times.setdefault(fpw, collections.OrderedDict())[name] = float(seconds)
            if stats != "-":
                prefetch_stats[(fpw, name)] = stats

    print(f"Crash recovery, redo time in seconds ({description})")
    print("Ratios are to vanilla_off of the same row; lower is faster.")
    for fpw, row in times.items():
        base = row.get("vanilla_off")
        print(f"\n{row_title(fpw)}")
        print(f"  {'variant':<19} {'redo s':>8} {'vs off':>8}  pg_stat_recovery_prefetch (ours)")
        for name, t in row.items():
            ratio = f"{t / base:8.2f}" if base else f"{'':>8}"
            print(f"  {name:<19} {t:8.1f} {ratio}  {prefetch_stats.get((fpw, name), '')}")

        def check(label, ok_value, value, target, lower_is_pass=True):
            if value is None:
                return
            ok = value <= target if lower_is_pass else value >= target
            print(f"  {'PASS' if ok else 'FAIL'}: {label}: {value:.2f} (target {'<=' if lower_is_pass else '>='} {target})")

        advice = [n for n in ("vanilla_advice", "vanilla_advice_deep") if n in row]
        best_advice = min(advice, key=lambda n: row[n]) if advice else None
        if "ours_read_single" in row and "ours_read_uring" in row:
            print(f"  combining neighbours: ours_read_single (io_combine_limit = 1) / ours_read_uring: "
                  f"{row['ours_read_single'] / row['ours_read_uring']:.2f}")
        if fpw not in ("on", "off"):
            continue  # the targets are for the pgbench rows
        for n in ("ours_read_uring", "ours_read_worker", "ours_read_deep"):
            if n in row and "vanilla_cached" in row:
                check(f"{n} / vanilla_cached", None, row[n] / row["vanilla_cached"], 1.25)
            if n in row and best_advice:
                check(f"{best_advice} (vanilla's better advice) / {n}", None, row[best_advice] / row[n], 1.3, False)
        if "ours_direct" in row and "vanilla_direct" in row:
            check("vanilla_direct / ours_direct", None, row["vanilla_direct"] / row["ours_direct"], 2.5, False)
        if "ours_cached" in row and "vanilla_cached" in row:
            check("ours_cached / vanilla_cached", None, row["ours_cached"] / row["vanilla_cached"], 1.05)

    # One plot per row, one line per variant.
    for fpw, row in times.items():
        png = os.path.join(out, f"recovery-prefetch-fpw-{fpw}.png")
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
set title 'Crash recovery progress, {row_title(fpw)}'
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
