"""What every process of `make bench-sdk` shares: /proc readings, the stamp format of changes,
the workers' output protocol (``seen KEY`` lines, ``ready``, a last ``result {json}`` line) and
latency percentiles."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")
SEEN = "seen "
READY = "ready"
RESULT = "result "


def status_kib(pid: int, field: str) -> int:
    """A ``/proc/PID/status`` memory field (VmHWM, VmRSS ...) in KiB; 0 once the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def stamp() -> str:
    """A change's stamp: wall-clock nanoseconds (CLOCK_REALTIME is shared by all processes)."""
    return str(time.time_ns())


STARTED_NS = time.time_ns()


def since_stamp_us(value: str, now_ns: int) -> float | None:
    """Microseconds from a change's stamp to ``now_ns``; None for a change made before this
    process started (an earlier contender's, seen again in the initial list)."""
    t = int(value)
    return (now_ns - t) / 1e3 if t > STARTED_NS else None


def percentiles_us(samples: list[float]) -> dict[str, float]:
    """p50/p90/p99/max of ``samples`` (microseconds) and their count."""
    if not samples:
        return {"count": 0, "p50_us": 0.0, "p90_us": 0.0, "p99_us": 0.0, "max_us": 0.0}
    s = sorted(samples)

    def at(q: float) -> float:
        return s[min(len(s) - 1, int(q * len(s)))]

    return {
        "count": len(s),
        "p50_us": at(0.5),
        "p90_us": at(0.9),
        "p99_us": at(0.99),
        "max_us": s[-1],
    }


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def emit_seen(keys: list[str]) -> None:
    """Records keys a reconcile saw (one ``seen`` line each, one write)."""
    if keys:
        sys.stdout.write("".join(f"{SEEN}{k}\n" for k in keys))
        sys.stdout.flush()


def emit_result(result: dict[str, Any]) -> None:
    emit(RESULT + json.dumps(result))
