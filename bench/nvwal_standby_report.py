"""Report of bench/nvwal_standby.sh: per client count, the median TPS,
mean and p99 commit latency of each variant over the rounds, and latency
ratios taken within each round (median and range), with the targets of a
synchronous standby that uses a non-volatile WAL buffer.

Input lines: round clients variant tps mean_ms p99_ms."""
import collections
import statistics
import sys

from benchstats import spread

VARIANTS = ['plain-on', 'plain-remote_write', 'plain-remote_apply',
            'nvwal-on', 'nvwal-remote_apply']
# (numerator, denominator, target, what): mean-latency ratios, lower is
# faster; a target is met when the median ratio is at most it.
RATIOS = [
    ('nvwal-on', 'plain-remote_write', 1.10,
     "NVWAL standby's on / remote_write without NVWAL"),
    ('nvwal-remote_apply', 'plain-remote_apply', 1.00,
     "NVWAL standby's remote_apply / remote_apply without NVWAL"),
    ('nvwal-on', 'plain-on', None,
     "NVWAL standby's on / on without NVWAL"),
]


def main(path):
    runs = collections.defaultdict(dict)
    for line in open(path):
        rnd, clients, variant, tps, mean, p99, median, stalls = line.split()
        runs[(int(clients), int(rnd))][variant] = (
            float(tps), float(mean), float(p99), float(median), int(stalls))
    for clients in sorted({c for c, _ in runs}):
        rounds = [runs[k] for k in sorted(runs) if k[0] == clients]
        print(f"\n{clients} client(s), {len(rounds)} round(s)")
        print(f"  {'variant':22} {'TPS':>9} {'spread':>7} {'mean ms':>8}"
              f" {'median':>8} {'p99 ms':>8} {'>100ms':>7}")
        for v in VARIANTS:
            got = [r[v] for r in rounds if v in r]
            if not got:
                continue
            tps = [g[0] for g in got]
            print(f"  {v:22} {statistics.median(tps):9.1f} {spread(tps):6.0f}%"
                  f" {statistics.median(g[1] for g in got):8.3f}"
                  f" {statistics.median(g[3] for g in got):8.3f}"
                  f" {statistics.median(g[2] for g in got):8.3f}"
                  f" {sum(g[4] for g in got):7d}")
        for num, den, target, what in RATIOS:
            for col, measure in ((1, 'mean'), (3, 'median')):
                ratios = [r[num][col] / r[den][col] for r in rounds
                          if num in r and den in r]
                if not ratios:
                    continue
                med = statistics.median(ratios)
                verdict = ''
                if target is not None:
                    verdict = ('PASS: ' if med <= target else 'FAIL: ')
                tail = (f" (target <= {target:.2f})"
                        if target is not None else '')
                print(f"  {verdict}{what}, {measure} latency: {med:.3f}"
                      f" (range {min(ratios):.2f}-{max(ratios):.2f}){tail}")


if __name__ == '__main__':
    main(sys.argv[1])
