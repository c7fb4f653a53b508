"""The GPU check's judge: reads what scripts/gpu-check.sh ran (LOGS/runs.jsonl, one line
per run, and each run's stdout/stderr) and writes OUT/results.json and OUT/summary.txt.

usage: judge.py --logs LOGS --out OUT [--mode real|fake] [--final]

One entry per check: name, status (PASS, FAIL or SKIPPED), measured numbers, reason,
and the two runs beside each other (directly and under tessera). The tolerances:

  torch.limits   under tessera torch.cuda.mem_get_info's total is the --memory limit
                 (to 1 MiB), a tensor past it raises torch.OutOfMemoryError within 5 s,
                 the allocator's own free-and-retry and empty_cache + a smaller retry work
  torch.graph    replay = eager (relative 1e-5) in both runs, and the replayed
                 checksums under tessera = without (relative 1e-6)
  torch.dataloader  every sample arrives (exact sum), from forked workers
  torch.train    step time under tessera <= 1.05 x the step time without, in this call
  torch.share    the weight-1 program's share of the pair's kernel time 0.25 +- 0.05;
                 the pair without tessera is reported, not judged
  cupy, numba, cuda-core  the kernel's result checked; total = the limit (1 MiB); past it
                 refused as out-of-memory within 5 s; a quarter of the limit then works
  nvidia-smi     the tenant sees one GPU, the GPU nvidia-smi shows first without tessera
                 (its UUID), with the limit as its memory total (to 1 MiB)
  c.axpy         a C driver-API program: result correct, one device, the limit as total
  daemon         the script's own daemon (`--cuda --policy fair` on the GPU) started
                 and never died; when the CUDA daemon does not start, the tenants run
                 under an emulated one over the real GPU, and this check FAILS
  selftest       `tessera selftest --json` exits 0 with a JSON report, no check FAIL
                 (nor in its text table's run, nor in any repeat of its launch and
                 fair-weights checks: TESSERA_GPU_CHECK_REPEAT)

A step that fails without tessera too is the machine's, not tessera's: it is not
judged, and a check left with nothing to judge is SKIPPED with that reason. A check
that did not run (the script was stopped before it) is SKIPPED: "not run".
"""

import argparse
import json
import os
import re
import sys
import time

MIB = 1 << 20

CHECKS = [
    "daemon",
    "selftest",
    "nvidia-smi",
    "c.axpy",
    "torch.limits",
    "torch.train",
    "torch.share",
    "torch.graph",
    "torch.dataloader",
    "cupy",
    "numba",
    "cuda-core",
]

TRAIN_MAX_RATIO = 1.05
SHARE_WANT, SHARE_TOL = 0.25, 0.05
REFUSAL_MAX_S = 5.0


def read_text(path, limit=None):
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return ""
    return text if limit is None else text[-limit:]


def last_json(text):
    """The last line of stdout that is a JSON object: the program's findings so far."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def stderr_hint(path):
    """The line of a run's stderr most worth quoting: tessera's own one-line errors
    first (`tessera: ...`), else the last non-empty line."""
    lines = [l.strip() for l in read_text(path, 200_000).splitlines() if l.strip()]
    for l in reversed(lines):
        if l.startswith("tessera:") or "tessera:" in l[:40]:
            return l[:400]
    for l in reversed(lines):
        # clap's and Python's own last words: "error: unrecognized subcommand ...",
        # "RuntimeError: ..."
        if l.startswith("error:") or re.match(r"^[A-Za-z_.]*(Error|Exception)\b", l):
            return l[:400]
    return lines[-1][:400] if lines else ""


class Run:
    """One run's outcome: kind is ok, skip (nothing of tessera's tried), or bad."""

    def __init__(self, rec, text=False):
        self.rec = rec
        self.data = None
        self.kind, self.why = "ok", ""
        self.stdout_tail = None
        if rec.get("skipped"):
            self.kind, self.why = "skip", rec["skipped"]
            return
        if rec.get("error"):
            self.kind, self.why = "bad", rec["error"]
            return
        hint = stderr_hint(rec.get("err", ""))
        if text:
            # a program that prints text, not JSON lines (the C program, selftest's table)
            self.stdout_tail = read_text(rec.get("out", ""), 1000)
            if rec.get("timed_out"):
                self.kind, self.why = "bad", f"timed out after {rec.get('limit_s')} s"
            elif rec.get("rc") != 0:
                self.kind = "bad"
                self.why = f"exit status {rec.get('rc')}" + (f"; stderr: {hint}" if hint else "")
            return
        self.data = last_json(read_text(rec.get("out", "")))
        stage = (self.data or {}).get("stage", "start")
        if rec.get("timed_out"):
            self.kind = "bad"
            self.why = f"timed out after {rec.get('limit_s')} s (in step {stage!r})" + (f"; stderr: {hint}" if hint else "")
        elif self.data is None:
            self.kind = "bad"
            self.why = f"exit status {rec.get('rc')}, no result printed" + (f"; stderr: {hint}" if hint else "")
        elif self.data.get("skipped"):
            self.kind, self.why = "skip", self.data["skipped"]
        elif self.data.get("error"):
            self.kind, self.why = "bad", self.data["error"]
        elif stage != "done":
            self.kind = "bad"
            self.why = f"exit status {rec.get('rc')} in step {stage!r}" + (f"; stderr: {hint}" if hint else "")
        elif rec.get("rc") not in (0, None):
            # finished its work, then died: at exit, in a destructor, in the interposer
            self.kind = "bad"
            self.why = f"finished, then exit status {rec.get('rc')}" + (f"; stderr: {hint}" if hint else "")

    def step(self, name):
        return ((self.data or {}).get("steps") or {}).get(name) or {}

    def ok(self, name):
        return bool(self.step(name).get("ok"))

    def summary(self):
        """What results.json keeps of the run."""
        r = {k: self.rec.get(k) for k in ("mode", "rc", "wall_s", "limit_s", "timed_out", "memory", "weight")}
        r["outcome"] = self.kind
        if self.why:
            r["why"] = self.why
        if self.data is not None:
            r["result"] = self.data
        if self.stdout_tail is not None:
            r["stdout_tail"] = self.stdout_tail
        r["log"] = os.path.basename(self.rec.get("err", "")) or None
        return r


def mib(b):
    return "?" if b is None else f"{b / MIB:.0f} MiB"


def pct(x):
    return f"{100 * x:+.1f}%"


class Verdict:
    def __init__(self, name):
        self.name = name
        self.status = "PASS"
        self.measured = {}
        self.text = []  # what was measured, in words
        self.reasons = []
        self.runs = {}

    def fail(self, why):
        self.status = "FAIL"
        self.reasons.append(why)

    def skip(self, why):
        if self.status != "FAIL":
            self.status = "SKIPPED"
        self.reasons.append(why)

    def entry(self):
        return {
            "name": self.name,
            "status": self.status,
            "measured": self.measured,
            "summary": "; ".join(self.text),
            "reason": "; ".join(self.reasons),
            "runs": self.runs,
        }


def pair_gate(v, direct, tess):
    """The usual opening: both runs known, neither skipped, the tenant run finished.
    False when there is nothing more to judge."""
    for mode, run in (("direct", direct), ("tessera", tess)):
        if run is not None:
            v.runs[mode] = run.summary()
    if tess is None and direct is None:
        v.skip("not run")
        return False
    if tess is None:
        v.skip("not run under tessera")
        return False
    if tess.kind == "skip":
        v.skip(tess.why + (f"; without tessera: {direct.why}" if direct is not None and direct.why and direct.why != tess.why else ""))
        return False
    if tess.kind == "bad":
        if direct is not None and direct.kind == "bad":
            # the machine's (a framework broken, a driver without an entry point), not
            # tessera's: nothing to compare with
            v.skip(f"fails without tessera too: {direct.why} (under tessera: {tess.why})")
        else:
            v.fail(f"under tessera: {tess.why}")
        return False
    return True


def judge_steps(v, direct, tess, judged):
    """Each (step, test) with test(tess_step, direct_step) -> None or a failure text.
    A step that fails without tessera too is not judged."""
    excluded = []
    for name, test in judged:
        t, d = tess.step(name), (direct.step(name) if direct is not None else {})
        if not t and not d and (excluded or v.status == "FAIL"):
            continue  # neither run got this far: the earlier step says why
        direct_bad = direct is not None and direct.kind == "ok" and (not d.get("ok") or test(d, None) is not None)
        if direct is not None and direct.kind == "bad":
            direct_bad = True
        if not t:
            why = "not reached (an earlier step failed)"
        elif not t.get("ok"):
            why = t.get("error") or "failed"
        else:
            why = test(t, d)
        if why is None:
            continue
        if direct_bad:
            if not d:
                dwhy = direct.why or "not reached"
            elif not d.get("ok"):
                dwhy = d.get("error") or "failed"
            else:
                dwhy = test(d, None)
            excluded.append(f"{name} (fails without tessera too: {dwhy})")
        else:
            v.fail(f"{name}: {why}")
    if excluded and v.status != "FAIL":
        v.skip("not judged: " + "; ".join(excluded))


def limit_tests(limit):
    """The memory steps every framework check shares."""

    def meminfo(t, d):
        total = t.get("total_bytes")
        if d is None:  # the direct run's own sanity: any total at all
            return None if total else "no total"
        if limit is None:
            return "the run had no --memory limit"
        if total is None or abs(total - limit) > MIB:
            return f"total {mib(total)}, not the limit {mib(limit)}"
        return None

    def past_limit(t, d):
        if not t.get("refused"):
            return f"{mib(t.get('asked_bytes'))} past the limit was granted"
        if not t.get("is_oom"):
            return f"refused, but as {t.get('exception')}: {t.get('message')}, not out-of-memory"
        if t.get("refusal_s", 0) > REFUSAL_MAX_S:
            return f"refused only after {t.get('refusal_s')} s (waited, where it must fail at once)"
        return None

    return meminfo, past_limit


def ok_test(t, d):
    return None


def judge_framework(v, direct, tess, limit, kernel_key="correct"):
    if not pair_gate(v, direct, tess):
        return
    meminfo, past_limit = limit_tests(limit)

    def kernel(t, d):
        return None if t.get(kernel_key) else f"wrong result (max error {t.get('max_error')})"

    steps = [("meminfo", meminfo), ("kernel", kernel), ("past_limit", past_limit), ("retry", ok_test)]
    if "init" in (tess.data.get("steps") or {}):
        steps.insert(0, ("init", ok_test))
    judge_steps(v, direct, tess, steps)
    m = tess.step("meminfo")
    v.measured.update(
        total_mib=(m.get("total_bytes") or 0) // MIB,
        limit_mib=(limit or 0) // MIB,
        kernel_max_error=tess.step("kernel").get("max_error"),
        refused_as=tess.step("past_limit").get("exception"),
        refusal_s=tess.step("past_limit").get("refusal_s"),
    )
    v.text.append(f"total {mib(m.get('total_bytes'))} (limit {mib(limit)})")
    k = tess.step("kernel")
    v.text.append("kernel " + ("correct" if k.get(kernel_key) else "NOT correct" if k.get("ok") else "failed"))
    p = tess.step("past_limit")
    if p.get("refused"):
        v.text.append(f"past it: {p.get('exception')} in {p.get('refusal_s')} s")
    v.text.append("retry " + ("ok" if tess.ok("retry") else "failed"))
    if direct is not None and direct.kind == "ok":
        dm = direct.step("meminfo")
        dk = direct.step("kernel")
        v.text.append(f"direct: total {mib(dm.get('total_bytes'))}, kernel " + ("correct" if dk.get(kernel_key) else "NOT correct" if dk.get("ok") else "failed"))
    if tess.data.get("numpy_shim"):
        # a third-party incompatibility worked around in both modes: said, not hidden
        v.measured["numpy_shim"] = tess.data["numpy_shim"]
        v.text.append(f"(with {tess.data['numpy_shim']})")


def judge_torch_limits(v, direct, tess, limit):
    if not pair_gate(v, direct, tess):
        return
    d = tess.data
    total = d.get("total_bytes")
    meminfo, past_limit = limit_tests(limit)
    why = meminfo({"total_bytes": total}, {})
    if why:
        v.fail(f"mem_get_info: {why}")
    judge_steps(
        v,
        direct,
        tess,
        [
            ("past_limit", past_limit),
            ("free_and_retry", ok_test),
            ("empty_cache_retry", lambda t, dd: None if t.get("sum_ok") else "the retried tensor is wrong"),
        ],
    )
    p = tess.step("past_limit")
    v.measured.update(
        total_mib=(total or 0) // MIB,
        limit_mib=(limit or 0) // MIB,
        device_total_mib=(d.get("device_total_bytes") or 0) // MIB,
        refused_as=p.get("exception"),
        refusal_s=p.get("refusal_s"),
    )
    v.text.append(f"mem_get_info total {mib(total)} (limit {mib(limit)})")
    if p.get("refused"):
        v.text.append(f"past it: {p.get('exception')} in {p.get('refusal_s')} s")
    v.text.append("free-and-retry " + ("ok" if tess.ok("free_and_retry") else "failed"))
    v.text.append("empty_cache + retry " + ("ok" if tess.ok("empty_cache_retry") else "failed"))
    if direct is not None and direct.kind == "ok":
        dp = direct.step("past_limit")
        v.text.append(f"direct: total {mib(direct.data.get('total_bytes'))}, past it {dp.get('exception') or 'granted'}")


def judge_torch_graph(v, direct, tess):
    if not pair_gate(v, direct, tess):
        return

    def replay(t, d):
        return None if t.get("matches_eager") else f"replay differs from eager by {t.get('max_rel_diff')} (relative)"

    judge_steps(v, direct, tess, [("capture", ok_test), ("replay", replay)])
    t = tess.step("replay")
    v.measured.update(max_rel_diff=t.get("max_rel_diff"), replay_ms=t.get("replay_ms"))
    v.text.append(f"replay vs eager: max relative difference {t.get('max_rel_diff')}")
    if direct is not None and direct.kind == "ok" and direct.ok("replay") and tess.ok("replay"):
        a, b = t.get("checksums") or [], direct.step("replay").get("checksums") or []
        if len(a) != len(b) or not a:
            v.fail("replay: checksums missing")
        else:
            rel = max(abs(x - y) / max(1.0, abs(y)) for x, y in zip(a, b))
            v.measured["checksum_rel_diff_vs_direct"] = rel
            v.text.append(f"vs without tessera: relative difference {rel:.2e}")
            if rel > 1e-6:
                v.fail(f"replayed results differ from the run without tessera by {rel:.2e} (relative)")
        v.measured["replay_ms_direct"] = direct.step("replay").get("replay_ms")
        v.text.append(f"replay {t.get('replay_ms')} ms (direct {direct.step('replay').get('replay_ms')} ms)")


def judge_torch_dataloader(v, direct, tess):
    if not pair_gate(v, direct, tess):
        return

    def epochs(t, d):
        if not t.get("correct"):
            return f"sum {t.get('sum')} != expected {t.get('expected_sum')} (labels ok: {t.get('labels_ok')})"
        if (t.get("workers_seen") or 0) < 2:
            return f"only {t.get('workers_seen')} worker(s) delivered batches"
        return None

    judge_steps(v, direct, tess, [("epochs", epochs)])
    t = tess.step("epochs")
    v.measured.update(batches=t.get("batches"), workers_seen=t.get("workers_seen"), seconds=t.get("seconds"))
    v.text.append(f"{t.get('batches')} batches from {t.get('workers_seen')} forked workers, sum " + ("correct" if t.get("correct") else "WRONG") + f", {t.get('seconds')} s")
    if direct is not None and direct.kind == "ok":
        v.text.append(f"direct {direct.step('epochs').get('seconds')} s")


def judge_torch_train(v, direct, tess):
    if not pair_gate(v, direct, tess):
        return
    judge_steps(v, direct, tess, [("warmup", ok_test), ("timed", lambda t, d: None if t.get("loss_finite") else "loss not finite")])
    t = tess.step("timed")
    v.measured.update(step_ms_tessera=t.get("step_ms"), rounds_ms_tessera=t.get("round_mean_ms"), model=tess.data.get("model"), batch=tess.data.get("batch"))
    if direct is None or direct.kind != "ok" or not direct.ok("timed"):
        v.skip("no step time without tessera to compare with" + (f": {direct.why}" if direct is not None and direct.why else ""))
        return
    d = direct.step("timed")
    v.measured.update(step_ms_direct=d.get("step_ms"), rounds_ms_direct=d.get("round_mean_ms"))
    if t.get("step_ms") and d.get("step_ms"):
        ratio = t["step_ms"] / d["step_ms"]
        v.measured["ratio"] = round(ratio, 4)
        v.text.append(
            f"ResNet-18 step {t['step_ms']:.2f} ms under tessera, {d['step_ms']:.2f} ms without: {pct(ratio - 1)} (limit {pct(TRAIN_MAX_RATIO - 1)})"
        )
        if ratio > TRAIN_MAX_RATIO:
            v.fail(f"the interposer costs {pct(ratio - 1)} of a training step (at most {pct(TRAIN_MAX_RATIO - 1)})")
    else:
        v.fail("no step time measured")


def share_of(runs, key_a, key_b):
    """Shares of two programs' kernel time (and of their kernel counts)."""
    a, b = runs[key_a].step("window"), runs[key_b].step("window")
    ka, kb = a.get("kernel_time_ms") or 0.0, b.get("kernel_time_ms") or 0.0
    na, nb = a.get("kernels") or 0, b.get("kernels") or 0
    out = {}
    if ka + kb > 0:
        out["share_kernel_time"] = round(ka / (ka + kb), 4)
    if na + nb > 0:
        out["share_kernels"] = round(na / (na + nb), 4)
    window = max(a.get("window_s") or 0, b.get("window_s") or 0)
    if window > 0:
        out["gpu_busy"] = round((ka + kb) / 1e3 / window, 3)
    out["late_s"] = max(abs(a.get("late_s") or 0), abs(b.get("late_s") or 0))
    out["kernel_ms"] = [a.get("kernel_median_ms"), b.get("kernel_median_ms")]
    return out


def daemon_shares(logs, pids):
    """The daemon's received shares for the pair, from the last `tessera status --json`
    taken while both ran (informative)."""
    snaps = sorted(
        (f for f in os.listdir(logs) if re.fullmatch(r"torch\.share\.status\.\d+\.json", f)),
        key=lambda f: int(f.split(".")[-2]),
    )
    for f in reversed(snaps):
        try:
            s = json.loads(read_text(os.path.join(logs, f)))
        except ValueError:
            continue
        by_pid = {t.get("pid"): t for t in s.get("tenants", [])}
        if all(p in by_pid for p in pids):
            return [by_pid[p].get("received_share") for p in pids], [by_pid[p].get("gpu_ms") for p in pids]
    return None, None


def judge_torch_share(v, runs, logs):
    w1, w3 = runs.get("tessera.w1"), runs.get("tessera.w3")
    da, db = runs.get("direct.a"), runs.get("direct.b")
    for k, r in runs.items():
        v.runs[k] = r.summary()
    if da is not None and db is not None and da.kind == "ok" and db.kind == "ok":
        s = share_of({"a": da, "b": db}, "a", "b")
        v.measured["direct"] = s
        if "share_kernel_time" in s:
            v.text.append(
                f"without tessera (driver time slicing, not judged): {s['share_kernel_time']:.3f} / {1 - s['share_kernel_time']:.3f}"
            )
    if w1 is None or w3 is None:
        v.skip("not run under tessera")
        return
    for r in (w1, w3):
        if r.kind == "skip":
            v.skip(r.why)
            return
    bad = [f"weight {k[-1]}: {r.why}" for k, r in (("w1", w1), ("w3", w3)) if r.kind == "bad"]
    if bad:
        v.fail("under tessera: " + "; ".join(bad))
        return
    for r in (w1, w3):
        if not r.ok("window"):
            v.fail(f"window: {r.step('window').get('error') or r.step('barrier').get('error')}")
            return
    s = share_of({"w1": w1, "w3": w3}, "w1", "w3")
    v.measured["tessera"] = s
    got = s.get("share_kernel_time")
    if got is None:
        v.fail("no kernel time measured")
        return
    received, gpu_ms = daemon_shares(logs, [w1.data.get("pid"), w3.data.get("pid")])
    v.measured["daemon_received_share"] = received
    v.measured["daemon_gpu_ms"] = gpu_ms
    v.text.insert(
        0,
        f"weight 1 got {got:.3f} of the pair's kernel time (want {SHARE_WANT} +- {SHARE_TOL}); by kernel count {s.get('share_kernels')}; GPU busy {s.get('gpu_busy')}",
    )
    if received and None not in received:
        v.text.insert(1, f"daemon's received shares {received[0]:.3f} / {received[1]:.3f}")
    if s["late_s"] > 1.0:
        v.fail(f"a program started its window {s['late_s']:.2f} s late: the windows did not overlap")
    if abs(got - SHARE_WANT) > SHARE_TOL:
        v.fail(f"weight 1 received {got:.3f} of the GPU, not {SHARE_WANT} +- {SHARE_TOL}")


def judge_nvidia_smi(v, direct, tess, limit):
    if not pair_gate(v, direct, tess):
        return
    gpus = tess.step("query").get("gpus") or []
    if not tess.ok("query"):
        v.fail(f"query: {tess.step('query').get('error')}")
        return
    v.measured["tenant_gpus"] = gpus
    if len(gpus) != 1:
        v.fail(f"the tenant sees {len(gpus)} GPUs, not 1")
    g = gpus[0] if gpus else {}
    total = g.get("memory.total")
    v.text.append(f"tenant sees {len(gpus)} GPU(s): {g.get('uuid')} {g.get('name')}, {total} MiB total, {g.get('memory.used')} MiB used")
    if limit is None or not isinstance(total, int) or abs(total - limit // MIB) > 1:
        v.fail(f"memory.total {total} MiB, not the limit {mib(limit)}")
    if direct is not None and direct.kind == "ok" and direct.ok("query"):
        dg = direct.step("query").get("gpus") or []
        v.measured["direct_gpus"] = dg
        v.text.append(f"direct: {len(dg)} GPU(s), first {dg[0].get('memory.total') if dg else '?'} MiB")
        uuids = [x.get("uuid") for x in dg]
        if g.get("uuid") not in uuids:
            v.fail(f"the tenant's GPU {g.get('uuid')} is none of the machine's {uuids}")


def judge_axpy(v, direct, tess, limit):
    for mode, run in (("direct", direct), ("tessera", tess)):
        if run is not None:
            v.runs[mode] = run.summary()
    if tess is None:
        v.skip("not run")
        return
    if tess.kind == "skip":
        v.skip(tess.why)
        return
    if tess.rec.get("timed_out") or tess.rec.get("error"):
        v.fail(f"under tessera: {tess.why or tess.rec.get('error')}")
        return
    out = read_text(tess.rec.get("out", ""))
    m = re.search(r"(\d+) device\(s\) visible.*?cuMemGetInfo: (\d+) MiB free of (\d+) MiB", out)
    correct = "correct" in out and tess.rec.get("rc") == 0
    if m:
        v.measured.update(devices=int(m.group(1)), free_mib=int(m.group(2)), total_mib=int(m.group(3)))
        v.text.append(f"tenant: {m.group(1)} device(s), {m.group(3)} MiB total")
    v.text.append("result " + ("correct" if correct else "NOT correct"))
    direct_out = read_text(direct.rec.get("out", "")) if direct is not None and direct.kind != "skip" else ""
    direct_ok = "correct" in direct_out and direct is not None and direct.rec.get("rc") == 0
    if direct is not None and direct.kind != "skip":
        v.text.append("direct " + ("correct" if direct_ok else "NOT correct"))
    if not correct:
        if direct is not None and not direct_ok:
            v.skip(f"fails without tessera too: {stderr_hint(direct.rec.get('err', ''))}")
        else:
            v.fail(f"under tessera: exit {tess.rec.get('rc')}: {stderr_hint(tess.rec.get('err', '')) or 'no result'}")
        return
    if not m:
        v.fail("no cuMemGetInfo line in its output")
        return
    if int(m.group(1)) != 1:
        v.fail(f"the tenant sees {m.group(1)} devices, not 1")
    if limit is not None and abs(int(m.group(3)) - limit // MIB) > 1:
        v.fail(f"cuMemGetInfo total {m.group(3)} MiB, not the limit {mib(limit)}")


def count_statuses(obj, counts):
    """PASS/FAIL/... counts anywhere in a selftest report (its format is its own)."""
    if isinstance(obj, dict):
        for key in ("status", "result", "outcome", "verdict"):
            val = obj.get(key)
            if isinstance(val, str) and val.upper() in ("PASS", "FAIL", "SKIP", "SKIPPED", "OK", "ERROR", "PASSED", "FAILED"):
                counts[val.upper()] = counts.get(val.upper(), 0) + 1
                break
        for val in obj.values():
            count_statuses(val, counts)
    elif isinstance(obj, list):
        for val in obj:
            count_statuses(val, counts)


def judge_selftest(v, runs):
    j, t = runs.get("tessera.json"), runs.get("tessera.text")
    for k, r in runs.items():
        # its stdout is selftest.json / selftest.txt beside results.json, not JSON lines
        v.runs[k] = {kk: r.rec.get(kk) for kk in ("mode", "rc", "wall_s", "limit_s", "timed_out", "skipped", "error")}
        v.runs[k]["stdout"] = os.path.basename(r.rec.get("out", "")) or None
    if j is None:
        v.skip("not run")
        return
    if j.rec.get("skipped"):
        v.skip(j.rec["skipped"])
        return
    if j.rec.get("error"):
        v.fail(j.rec["error"])
        return
    text = read_text(j.rec.get("out", ""))
    hint = stderr_hint(j.rec.get("err", ""))
    if j.rec.get("timed_out"):
        v.fail(f"timed out after {j.rec.get('limit_s')} s" + (f"; stderr: {hint}" if hint else ""))
        return
    try:
        report = json.loads(text)
    except ValueError:
        report = None
    if report is None:
        v.fail(f"exit status {j.rec.get('rc')}, no JSON report" + (f"; stderr: {hint}" if hint else ""))
        return
    counts = {}
    count_statuses(report, counts)
    v.measured["counts"] = counts
    head = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "a JSON report"
    if isinstance(report, dict):
        v.measured.update({k: report.get(k) for k in ("device", "cuda", "stand_in", "daemon") if k in report})
        if report.get("device"):
            head += f" on {report['device']} (CUDA {report.get('cuda')})" + (", a STAND-IN driver" if report.get("stand_in") else "")
    v.text.append(head)
    checks = report.get("checks") if isinstance(report, dict) else None
    for c in checks if isinstance(checks, list) else []:
        if isinstance(c, dict) and str(c.get("result", "")).upper() == "FAIL":
            v.fail(f"{c.get('name')}: {c.get('measured')} (expected {c.get('expected')})")
    if j.rec.get("rc") != 0:
        v.fail(f"exit status {j.rec.get('rc')}" + (f"; stderr: {hint}" if hint else ""))
    # repeats of the noisiest checks (TESSERA_GPU_CHECK_REPEAT): each is one more
    # sample of the same claim, so a check any of them fails is a finding, and the
    # numbers across all runs are reported side by side
    across = {}

    def note(rep):
        for c in rep.get("checks", []) if isinstance(rep, dict) else []:
            if not isinstance(c, dict):
                continue
            nums = c.get("numbers") or {}
            for key in ("hook_ns", "control_ns", "over_ns", "share"):
                if isinstance(nums, dict) and isinstance(nums.get(key), (int, float)):
                    across.setdefault(f"{c.get('name')}.{key}", []).append(round(nums[key], 3))

    note(report)
    for k in sorted(runs, key=lambda m: (len(m), m)):
        if not k.startswith("repeat."):
            continue
        r = runs[k]
        if r.rec.get("skipped"):
            continue
        try:
            rep = json.loads(read_text(r.rec.get("out", "")))
        except ValueError:
            rep = None
        if not isinstance(rep, dict):
            v.fail(f"{k}: exit status {r.rec.get('rc')}, no JSON report")
            continue
        note(rep)
        for c in rep.get("checks", []):
            if isinstance(c, dict) and str(c.get("result", "")).upper() == "FAIL":
                v.fail(f"{k}: {c.get('name')}: {c.get('measured')}")
    if across:
        v.measured["across_runs"] = across
    if t is not None and t.rec.get("rc") not in (0, None) and not t.rec.get("skipped"):
        # the table is a second run of the same checks: a check it fails is a finding
        # too (on the H200 a run's table failed two checks its JSON run had passed,
        # and the summary said PASS)
        failed = [
            " ".join(line.split())
            for line in read_text(t.rec.get("out", "")).splitlines()
            if len(line.split()) > 1 and line.split()[1] == "FAIL"
        ]
        for line in failed:
            v.fail(f"text table run: {line}")
        if not failed:
            v.fail(f"text table run: exit status {t.rec.get('rc')}")


def judge_daemon(v, recs):
    """recs: the daemon's records by mode (start.N, died.N, stop.N)."""
    for k, r in recs.items():
        v.runs[k] = {kk: r.get(kk) for kk in ("kind", "rc", "wall_s", "note", "error") if r.get(kk) is not None}
    starts = sorted((k for k in recs if k.startswith("start.")), key=lambda k: int(k.split(".")[1]))
    if not starts:
        v.skip("not run")
        return
    first = recs[starts[0]]
    if first.get("error"):
        v.fail(first["error"])
    for k in starts[1:]:
        r = recs[k]
        if r.get("kind") == "fallback" and not r.get("error"):
            v.fail("the tenants ran under an EMULATED daemon over the real GPU (the fallback), not tessera's CUDA executor")
        elif r.get("error"):
            v.fail(r["error"])
    for k in sorted(recs):
        if k.startswith("died."):
            v.fail(recs[k].get("error") or "died")
    ok = [recs[k] for k in starts if not recs[k].get("error")]
    if ok:
        v.text.append(ok[-1].get("note") or "listening")
        v.measured["kind"] = ok[-1].get("kind")
        v.measured["start_s"] = ok[0].get("wall_s")
    v.measured["starts"] = len(starts)


def judge_all(logs, mode):
    records = []
    path = os.path.join(logs, "runs.jsonl")
    for line in read_text(path).splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    by_check = {}
    for rec in records:
        by_check.setdefault(rec["check"], {})[rec["mode"]] = rec
    out = []
    for name in CHECKS:
        v = Verdict(name)
        recs = by_check.get(name, {})
        runs = {m: Run(r, text=name in ("c.axpy", "selftest")) for m, r in recs.items()}
        limit = None
        for r in recs.values():
            if r.get("mode", "").startswith("tessera") and r.get("memory"):
                limit = parse_size(r["memory"])
        try:
            if name == "daemon":
                judge_daemon(v, recs)
            elif not runs:
                v.skip("not run")
            elif name == "selftest":
                judge_selftest(v, runs)
            elif name == "torch.share":
                judge_torch_share(v, runs, logs)
            elif name == "torch.limits":
                judge_torch_limits(v, runs.get("direct"), runs.get("tessera"), limit)
            elif name == "torch.graph":
                judge_torch_graph(v, runs.get("direct"), runs.get("tessera"))
            elif name == "torch.dataloader":
                judge_torch_dataloader(v, runs.get("direct"), runs.get("tessera"))
            elif name == "torch.train":
                judge_torch_train(v, runs.get("direct"), runs.get("tessera"))
            elif name == "nvidia-smi":
                judge_nvidia_smi(v, runs.get("direct"), runs.get("tessera"), limit)
            elif name == "c.axpy":
                judge_axpy(v, runs.get("direct"), runs.get("tessera"), limit)
            else:
                judge_framework(v, runs.get("direct"), runs.get("tessera"), limit)
        except Exception as e:  # noqa: BLE001 - a judge bug must not hide the other checks
            v.fail(f"the judge failed on this check: {type(e).__name__}: {e}")
        if limit is not None:
            v.measured.setdefault("limit_mib", limit // MIB)
        out.append(v)
    extra = sorted(set(by_check) - set(CHECKS))
    return out, by_check.get("daemon", {}), extra


def parse_size(text):
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", text or "", re.IGNORECASE)
    if not m:
        return None
    return int(float(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2).upper()])


def wrap(text, width, indent):
    words, lines, line = text.split(), [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    if line:
        lines.append(line)
    return ("\n" + " " * indent).join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--logs", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--mode", default="real", choices=["real", "fake"])
    p.add_argument("--final", action="store_true", help="the script's last judgement (else: progress so far)")
    a = p.parse_args()
    verdicts, daemon, extra = judge_all(a.logs, a.mode)
    meta = {
        "mode": a.mode,
        "final": a.final,
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpu": read_text(os.path.join(a.logs, "gpu-name.txt")).strip() or None,
        "daemon_kind": next((r.get("kind") for k, r in sorted(daemon.items(), reverse=True) if k.startswith("start.") and not r.get("error")), None),
        "elapsed_s": read_text(os.path.join(a.logs, "elapsed.txt")).strip() or None,
    }
    counts = {}
    for v in verdicts:
        counts[v.status] = counts.get(v.status, 0) + 1
    meta["counts"] = counts
    results = {"meta": meta, "checks": [v.entry() for v in verdicts]}
    tmp = os.path.join(a.out, ".results.json.tmp")
    with open(tmp, "w") as f:
        json.dump(results, f, indent=2, default=str)
    os.replace(tmp, os.path.join(a.out, "results.json"))

    lines = []
    head = "tessera GPU check (issue 52, item 3)"
    if a.mode == "fake":
        head += " -- FAKE MODE: tessera's fake CUDA driver and an emulated daemon, no GPU"
    lines.append(head)
    lines.append(f"written {meta['written']}" + ("" if a.final else "  (PROGRESS: the script has not finished)"))
    if meta["gpu"]:
        lines.append(f"GPU: {meta['gpu']}")
    if meta["elapsed_s"]:
        lines.append(f"script ran {meta['elapsed_s']} s")
    if meta["daemon_kind"] == "fallback":
        lines.append("NOTE: tessera's CUDA daemon did not start: the tenants ran under an EMULATED daemon over the real GPU")
    lines.append("totals: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    lines.append("")
    width = max(len(v.name) for v in verdicts)
    for v in verdicts:
        lines.append(f"{v.status:<8} {v.name:<{width}}  " + wrap("; ".join(v.text) or "-", 100, width + 11))
        if v.reasons:
            lines.append(" " * (width + 11) + wrap("why: " + "; ".join(v.reasons), 100, width + 11))
    if extra:
        lines.append("")
        lines.append("runs of no known check: " + ", ".join(extra))
    lines.append("")
    lines.append("results.json has every number; logs.tar.gz each run's stdout and stderr, the daemon's log and events.")
    with open(os.path.join(a.out, "summary.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    if a.final:
        sys.stdout.write("\n".join(lines) + "\n")
        sys.exit(1 if counts.get("FAIL") else 0)


if __name__ == "__main__":
    main()
