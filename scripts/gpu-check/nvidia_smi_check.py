"""nvidia-smi inside a tenant (issue 52, item 3): what NVIDIA's own tool shows a program
under `tessera run --memory ...` — its one GPU and its memory limit — beside what it
shows without tessera.

usage: nvidia_smi_check.py

Runs nvidia-smi three times (each run a tenant of its own under tessera, since
`tessera run` passes LD_PRELOAD and TESSERA_* on to this program's children): the GPU
query (index, UUID, name, memory total and used, MiB), `-L`, and the plain table (to
the log). Prints one JSON object per line (common.Report); the last is the result.
"""

import shutil
import subprocess
import sys

from common import Report

FIELDS = ["index", "uuid", "name", "memory.total", "memory.used"]


def run(args, timeout=30):
    p = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def main():
    report = Report("nvidia_smi_check", "all")
    if shutil.which("nvidia-smi") is None:
        report.skip("nvidia-smi is not on the PATH")
    with report.step("query") as entry:
        rc, out, err = run(["--query-gpu=" + ",".join(FIELDS), "--format=csv,noheader,nounits"])
        entry["rc"] = rc
        entry["stderr"] = err.strip()[-500:]
        gpus = []
        for line in out.splitlines():
            cells = [c.strip() for c in line.split(",")]
            if len(cells) != len(FIELDS):
                continue
            g = dict(zip(FIELDS, cells))
            for k in ("memory.total", "memory.used"):
                try:
                    g[k] = int(g[k])
                except ValueError:
                    pass
            gpus.append(g)
        entry["gpus"] = gpus
        if rc != 0:
            raise RuntimeError(f"nvidia-smi exited {rc}: {err.strip()[-300:]}")
    with report.step("list") as entry:
        rc, out, err = run(["-L"])
        entry.update(rc=rc, lines=out.strip().splitlines(), stderr=err.strip()[-300:])
    with report.step("table") as entry:
        rc, out, err = run([])
        entry["rc"] = rc
        print(out, err, file=sys.stderr, sep="\n")
        entry["processes_section"] = out.split("Processes:")[-1].strip()[-1500:] if "Processes:" in out else None
    report.done()


if __name__ == "__main__":
    main()
