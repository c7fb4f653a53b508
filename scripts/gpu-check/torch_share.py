"""One of a pair of PyTorch programs sharing the GPU (issue 52, item 3): gpu-check.sh
starts two at once, under `tessera run --weight 1` and `--weight 3` (and, beside them
in the same call, two without tessera, where the driver's own time slicing shares the
GPU). Each runs the same matrix product back to back for a fixed window and measures
its own kernels with CUDA events.

usage: torch_share.py --name NAME --barrier DIR [--parties 2] [--seconds 10] [--n 4096]

The two programs meet at a barrier (a file each in DIR) after their set-up and warm-up,
so that their windows start together whatever their start-up took: the window starts
half a second after the later one is ready, the same moment for both. In the window
each counts the kernels it launched (no more than --depth in flight, so launched is
done to within a few kernels) and times every kernel with a pair of CUDA events. Its
kernel time is the count times the median kernel time: under tessera's launch gate a
kernel is timed alone, and the median discards the few whose events also span a wait
for the other program's slice. judge.py takes each program's share of the pair's
kernel time.
"""

import argparse
import collections
import glob
import os
import time

from common import Report, import_or_skip


def barrier(directory, name, parties, timeout_s=90):
    """Meet the other programs; the agreed start time, the same for all."""
    path = os.path.join(directory, f"ready.{name}")
    with open(path + ".tmp", "w") as f:
        f.write(repr(time.time()))
    os.rename(path + ".tmp", path)  # atomic: a reader sees the time whole or not at all
    deadline = time.time() + timeout_s
    while True:
        ready = glob.glob(os.path.join(directory, "ready.*"))
        ready = [r for r in ready if not r.endswith(".tmp")]
        if len(ready) >= parties:
            times = []
            for r in ready:
                with open(r) as f:
                    times.append(float(f.read()))
            return max(times) + 0.5
        if time.time() > deadline:
            raise TimeoutError(f"only {len(ready)} of {parties} programs reached the barrier in {timeout_s} s")
        time.sleep(0.01)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--name", required=True)
    p.add_argument("--barrier", required=True)
    p.add_argument("--parties", type=int, default=2)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--depth", type=int, default=4)
    a = p.parse_args()
    report = Report("torch_share", a.name)
    report.set(name=a.name, weight=os.environ.get("TESSERA_WEIGHT"), seconds=a.seconds, n=a.n)
    torch = import_or_skip(report, "torch")
    if not torch.cuda.is_available():
        report.set(error="torch.cuda.is_available() is False")
        report.done()
        return
    torch.backends.cuda.matmul.allow_tf32 = False  # the same kernel in every run
    with report.step("warmup") as entry:
        a_ = torch.randn(a.n, a.n, device="cuda")
        b_ = torch.randn(a.n, a.n, device="cuda")
        out = torch.empty(a.n, a.n, device="cuda")
        for _ in range(5):
            torch.mm(a_, b_, out=out)
        torch.cuda.synchronize()
        times = []
        for _ in range(10):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            torch.mm(a_, b_, out=out)
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1))
        # alone or not, depending on whether the other is already running: informative
        entry["kernel_ms_at_start"] = sorted(times)[len(times) // 2]
    with report.step("barrier") as entry:
        start_at = barrier(a.barrier, a.name, a.parties)
        entry["start_at"] = start_at
    with report.step("window") as entry:
        while time.time() < start_at:
            time.sleep(min(0.005, max(0.0, start_at - time.time())))
        t_start = time.time()
        end = start_at + a.seconds
        pending = collections.deque()
        elapsed = []
        count = 0
        while time.time() < end:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            torch.mm(a_, b_, out=out)
            e1.record()
            pending.append((e0, e1))
            count += 1
            if len(pending) > a.depth:
                f0, f1 = pending.popleft()
                f1.synchronize()
                elapsed.append(f0.elapsed_time(f1))
        t_end = time.time()
        while pending:
            f0, f1 = pending.popleft()
            f1.synchronize()
            elapsed.append(f0.elapsed_time(f1))
        t_drained = time.time()
        elapsed.sort()
        median = elapsed[len(elapsed) // 2] if elapsed else 0.0
        entry.update(
            late_s=round(t_start - start_at, 4),
            window_s=round(t_end - t_start, 4),
            drain_s=round(t_drained - t_end, 4),
            kernels=count,
            kernel_median_ms=round(median, 4),
            kernel_p10_ms=round(elapsed[len(elapsed) // 10], 4) if elapsed else 0.0,
            kernel_p90_ms=round(elapsed[(len(elapsed) * 9) // 10], 4) if elapsed else 0.0,
            # what the events say, wait and all: under driver time slicing it counts
            # the other program's turns too
            events_sum_ms=round(sum(elapsed), 3),
            kernel_time_ms=round(count * median, 3),
        )
    report.done()


if __name__ == "__main__":
    main()
