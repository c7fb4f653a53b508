"""What the GPU check's programs share (scripts/gpu-check.sh runs them; judge.py reads them).

Each program runs twice in one call of the check, directly and under `tessera run`,
and prints its findings as one JSON object per line on stdout: the object so far
after every step, the last one with "stage": "done". So a program that hangs and is
killed by the check's time limit still leaves what it found, and the name of the step
it hung in, on its last line. Progress and tracebacks go to stderr (the check's log).
A framework that cannot be imported makes the program say {"skipped": reason} and
exit 0: the check is then SKIPPED, not FAILED, since nothing of tessera's was tried.
"""

import contextlib
import importlib
import json
import os
import re
import sys
import time
import traceback

MIB = 1 << 20
GIB = 1 << 30

# Past the limit by more than any rounding: what each program asks for to be refused.
PAST_LIMIT = 512 * MIB


def under_tessera():
    """True when the interposer is preloaded: `tessera run` sets LD_PRELOAD."""
    return "libtessera_cuda" in os.environ.get("LD_PRELOAD", "")


def parse_size(text):
    """Bytes in a TESSERA_MEMORY value (`4GiB`, `4096MiB`, `4G`: binary units, as
    tessera reads it), or None when unset or unreadable."""
    if not text:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m:
        return None
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2).upper()]
    return int(float(m.group(1)) * scale)


def declared_limit():
    """The tenant's declared memory limit in bytes (TESSERA_MEMORY), or None."""
    return parse_size(os.environ.get("TESSERA_MEMORY"))


def log(*words):
    print(*words, file=sys.stderr, flush=True)


def error_text(e, limit=600):
    """An exception as one short line: type and message."""
    text = f"{type(e).__name__}: {e}".replace("\n", " | ")
    return text[:limit]


class Report:
    """The findings of one run, printed whole after every step."""

    def __init__(self, program, part):
        self.data = {
            "program": program,
            "part": part,
            "mode": "tessera" if under_tessera() else "direct",
            "pid": os.getpid(),
            "limit_bytes": declared_limit(),
            "stage": "start",
            "steps": {},
        }
        self.t0 = time.monotonic()

    def emit(self):
        self.data["elapsed_s"] = round(time.monotonic() - self.t0, 3)
        print(json.dumps(self.data, default=str), flush=True)

    # keys the report keeps itself: a finding named like one would overwrite it (a
    # training run's step count once replaced the steps' findings, on the H200)
    RESERVED = ("program", "part", "mode", "pid", "stage", "steps", "elapsed_s")

    def set(self, **values):
        clash = [k for k in values if k in self.RESERVED]
        if clash:
            raise KeyError(f"Report.set: {clash} name the report's own fields")
        self.data.update(values)

    @contextlib.contextmanager
    def step(self, name):
        """A step whose failure is recorded (ok: false, error) without stopping the
        program: the later steps still run and are judged on their own."""
        self.data["stage"] = name
        entry = {}
        self.data["steps"][name] = entry
        self.emit()
        log(f"[{self.data['mode']}] {name} ...")
        t = time.monotonic()
        try:
            yield entry
            entry.setdefault("ok", True)
        except Exception as e:  # noqa: BLE001 - every failure is a finding
            entry["ok"] = False
            entry["error"] = error_text(e)
            traceback.print_exc()
        entry["seconds"] = round(time.monotonic() - t, 3)
        log(f"[{self.data['mode']}] {name}: {json.dumps(entry, default=str)}")
        self.emit()

    def skip(self, reason):
        self.data["skipped"] = reason
        self.data["stage"] = "done"
        self.emit()
        sys.exit(0)

    def done(self):
        self.data["stage"] = "done"
        self.emit()


def import_or_skip(report, name):
    """The module, or the run ends as SKIPPED with the import's error."""
    try:
        return importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 - a broken install is a reason to skip too
        traceback.print_exc()
        report.skip(f"import {name} failed: {error_text(e, 300)}")
        raise  # not reached: skip exits


def oom_probe(entry, allocate, is_oom):
    """Ask `allocate()` for memory that must be refused: records whether it was,
    how (the exception's type and message) and how long the refusal took (a refusal
    beyond the tenant's own limit must come at once, never after a wait)."""
    t = time.monotonic()
    try:
        held = allocate()
    except Exception as e:  # noqa: BLE001 - which exception it is, is the finding
        entry["refused"] = True
        entry["is_oom"] = bool(is_oom(e))
        entry["exception"] = type(e).__name__
        entry["message"] = str(e).replace("\n", " | ")[:400]
    else:
        entry["refused"] = False
        del held
    entry["refusal_s"] = round(time.monotonic() - t, 3)
