"""Statistics shared by the benchmark reports (bench/*_report.py): how far
repeated measurements on this noisy machine spread, and how far their
median could move."""
import random
import statistics


def spread(values):
    """Range of the values as a percentage of their median."""
    m = statistics.median(values)
    return 100.0 * (max(values) - min(values)) / m if m else 0.0


def bootstrap_median_ci(values, resamples=10000, level=0.95):
    """Percentile bootstrap interval of the median of values: how far the
    median could move had other rounds been drawn from the same machine.
    Seeded, so that the report is the same for the same runs."""
    rng = random.Random(20261122)
    medians = sorted(statistics.median(rng.choices(values, k=len(values)))
                     for _ in range(resamples))
    lo = medians[int((1 - level) / 2 * resamples)]
    hi = medians[int((1 + level) / 2 * resamples) - 1]
    return lo, hi
