"""PyTorch under tessera (issue 52, item 3): one part per run, each judged by judge.py.

usage: torch_check.py limits|graph|dataloader|train [--steps N] [--batch B] [--rounds R]

  limits      torch.cuda.mem_get_info shows the limit; a tensor past it raises
              torch.OutOfMemoryError at once; the caching allocator's own
              free-and-retry works; torch.cuda.empty_cache() and a smaller retry succeed
  graph       a CUDA graph captured and replayed gives what eager execution gives (and,
              judged across the two runs, what the same program gives without tessera)
  dataloader  a DataLoader with forked workers (fork after CUDA is initialised, as
              PyTorch does by default on Linux) delivers every sample, checked on the GPU
  train       ResNet-18 training steps on random data: the step time, compared by the
              judge with the same program's without tessera in the same call

Prints one JSON object per line on stdout (common.Report); the last is the result.
"""

import argparse
import os
import time

from common import GIB, MIB, PAST_LIMIT, Report, import_or_skip, log, oom_probe


def limits(report, torch):
    free, total = torch.cuda.mem_get_info()
    report.set(
        total_bytes=total,
        free_bytes=free,
        device_total_bytes=torch.cuda.get_device_properties(0).total_memory,
        gpu=torch.cuda.get_device_name(0),
    )

    # torch.OutOfMemoryError since PyTorch 2.5; torch.cuda.OutOfMemoryError before
    oom = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)

    def is_oom(e):
        return isinstance(e, oom)

    with report.step("past_limit") as entry:
        # past what mem_get_info says the program may have: directly that is the GPU
        # itself, under tessera the tenant's limit
        entry["asked_bytes"] = total + PAST_LIMIT
        oom_probe(
            entry,
            lambda: torch.empty(total + PAST_LIMIT, dtype=torch.uint8, device="cuda"),
            is_oom,
        )
    with report.step("free_and_retry") as entry:
        # 60% cached (freed into PyTorch's cache, still held from the driver), then 70%:
        # only fits once the allocator answers the driver's out-of-memory by releasing
        # its cache and retrying, which it does by itself
        a = torch.empty(int(total * 0.6), dtype=torch.uint8, device="cuda")
        del a
        entry["reserved_before"] = torch.cuda.memory_reserved()
        b = torch.empty(int(total * 0.7), dtype=torch.uint8, device="cuda")
        b[-1] = 7  # touch it: the memory is really there
        torch.cuda.synchronize()
        entry["reserved_after"] = torch.cuda.memory_reserved()
        del b
    with report.step("empty_cache_retry") as entry:
        # the user's own recovery after an out-of-memory: release the cache, retry smaller
        try:
            torch.empty(total + PAST_LIMIT, dtype=torch.uint8, device="cuda")
            entry["refused_again"] = False
        except oom:
            entry["refused_again"] = True
        torch.cuda.empty_cache()
        entry["free_after_empty_cache"] = torch.cuda.mem_get_info()[0]
        # a quarter of the limit, filled and summed (int32 ones: an exact sum)
        c = torch.ones(total // 4 // 4, dtype=torch.int32, device="cuda")
        entry["sum_ok"] = bool(int(c.sum().item()) == c.numel())
        if not entry["sum_ok"]:
            raise RuntimeError("a tensor of ones did not sum to its size")
        del c
        torch.cuda.empty_cache()


def graph(report, torch):
    # TF32 off: the same arithmetic with and without tessera, and in eager vs replay
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gen = torch.Generator().manual_seed(52)  # on the CPU: the same numbers in every run
    w1 = torch.randn(1024, 1024, generator=gen).cuda()
    w2 = torch.randn(1024, 256, generator=gen).cuda()
    inputs = [torch.randn(512, 1024, generator=gen).cuda() for _ in range(3)]

    def f(x):
        h = torch.relu(x @ w1) * 0.01
        return torch.tanh(h @ w2).sum(dim=0)

    static_x = inputs[0].clone()
    with report.step("capture") as entry:
        # warm-up on a side stream before capture, as PyTorch's documentation says
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                f(static_x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_out = f(static_x)
        entry["captured"] = True
    with report.step("replay") as entry:
        diffs, sums = [], []
        for x in inputs:
            static_x.copy_(x)
            g.replay()
            torch.cuda.synchronize()
            eager = f(x)
            scale = max(1.0, float(eager.abs().max().item()))
            diffs.append(float((static_out - eager).abs().max().item()) / scale)
            sums.append(float(static_out.double().sum().item()))
        entry["max_rel_diff"] = max(diffs)
        entry["checksums"] = sums
        entry["first_values"] = [float(v) for v in static_out[:4].tolist()]
        # a few hundred replays, timed: informative (the gate charges graph launches)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(200):
            g.replay()
        torch.cuda.synchronize()
        entry["replay_ms"] = round((time.perf_counter() - t) * 1e3 / 200, 4)
        entry["matches_eager"] = bool(entry["max_rel_diff"] <= 1e-5)


def dataloader(report, torch):
    data = torch.utils.data

    class Samples(data.Dataset):
        def __len__(self):
            return 1024

        def __getitem__(self, i):
            info = data.get_worker_info()
            return torch.full((3, 32, 32), float(i % 97)), i, (info.id if info else -1), os.getpid()

    # CUDA initialised before the workers fork: the case a tenant meets in practice
    torch.ones(1, device="cuda").sum().item()
    epochs, workers = 2, 4
    expected = float(sum(3 * 32 * 32 * (i % 97) for i in range(1024))) * epochs
    expected_labels = float(sum(range(1024))) * epochs
    with report.step("epochs") as entry:
        loader = data.DataLoader(
            Samples(),
            batch_size=64,
            shuffle=True,
            num_workers=workers,
            multiprocessing_context="fork",
            pin_memory=True,
            timeout=60,  # a worker that hangs raises here rather than hanging the run
        )
        total = torch.zeros((), dtype=torch.float64, device="cuda")
        labels = torch.zeros((), dtype=torch.float64, device="cuda")
        worker_ids, worker_pids, batches = set(), set(), 0
        for _ in range(epochs):
            for xb, yb, wid, wpid in loader:
                total += xb.cuda(non_blocking=True).double().sum()
                labels += yb.cuda(non_blocking=True).double().sum()
                worker_ids.update(int(w) for w in wid)
                worker_pids.update(int(p) for p in wpid)
                batches += 1
        torch.cuda.synchronize()
        entry["batches"] = batches
        entry["sum"] = total.item()
        entry["expected_sum"] = expected
        entry["labels_ok"] = labels.item() == expected_labels
        entry["workers_seen"] = len(worker_ids)
        entry["worker_pids_distinct_from_parent"] = os.getpid() not in worker_pids
        entry["correct"] = bool(entry["sum"] == expected and entry["labels_ok"])


def resnet18_fallback(nn):
    """ResNet-18 (He et al.; torchvision's layout) for a machine without torchvision."""

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.b2(self.c2(nn.functional.relu(self.b1(self.c1(x)))))
            return nn.functional.relu(y + (x if self.down is None else self.down(x)))

    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)]
    return nn.Sequential(*layers)


def train(report, torch, steps, batch, rounds):
    nn = torch.nn
    try:
        import torchvision

        model = torchvision.models.resnet18(weights=None, num_classes=1000)
        report.set(model=f"torchvision {torchvision.__version__} resnet18")
    except Exception as e:  # noqa: BLE001 - the same network without torchvision
        log(f"torchvision unavailable ({e}); using the script's own ResNet-18")
        model = resnet18_fallback(nn)
        report.set(model="resnet18 (gpu-check's own; torchvision unavailable)")
    torch.backends.cudnn.benchmark = True
    model = model.cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator(device="cuda").manual_seed(52)
    x = torch.randn(batch, 3, 224, 224, device="cuda", generator=gen)
    y = torch.randint(0, 1000, (batch,), device="cuda", generator=gen)
    report.set(batch=batch, steps_per_round=steps, rounds=rounds)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    with report.step("warmup") as entry:
        for _ in range(10):
            step()
        torch.cuda.synchronize()
        entry["steps"] = 10
    with report.step("timed") as entry:
        walls, medians = [], []
        for _ in range(rounds):
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(steps)]
            torch.cuda.synchronize()
            t = time.perf_counter()
            for e0, e1 in events:
                e0.record()
                loss = step()
                e1.record()
            torch.cuda.synchronize()
            walls.append((time.perf_counter() - t) * 1e3 / steps)
            per = sorted(e0.elapsed_time(e1) for e0, e1 in events)
            medians.append(per[len(per) // 2])
        entry["round_mean_ms"] = [round(v, 4) for v in walls]
        entry["round_event_median_ms"] = [round(v, 4) for v in medians]
        # the median round: one slow round (a clock change, a neighbour) does not decide
        entry["step_ms"] = round(sorted(walls)[len(walls) // 2], 4)
        entry["loss"] = float(loss.item())
        entry["loss_finite"] = bool(torch.isfinite(loss).item())
        entry["peak_allocated_mib"] = torch.cuda.max_memory_allocated() // MIB


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("part", choices=["limits", "graph", "dataloader", "train"])
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    report = Report("torch_check", a.part)
    torch = import_or_skip(report, "torch")
    report.set(torch=torch.__version__, torch_cuda=torch.version.cuda)
    if not torch.cuda.is_available():
        # importable but no GPU reachable: a failure of the run, not a missing framework
        report.set(error="torch.cuda.is_available() is False")
        report.done()
        return
    with report.step("init") as entry:
        torch.cuda.init()
        entry["device_count"] = torch.cuda.device_count()
        entry["gpu"] = torch.cuda.get_device_name(0)
    if a.part == "limits":
        limits(report, torch)
    elif a.part == "graph":
        graph(report, torch)
    elif a.part == "dataloader":
        dataloader(report, torch)
    else:
        train(report, torch, a.steps, a.batch, a.rounds)
    report.set(gib_total=round(torch.cuda.mem_get_info()[1] / GIB, 3))
    report.done()


if __name__ == "__main__":
    main()
