"""The chaos tests' oracle over the workers' records (tests/workers/oracle_worker.py with
``--record-versions``), across leaders.

A record line is ``S|E|C pid key token monotonic epoch rv`` (a reconcile's start, end, or cancel
because its Work stream broke), ``R pid key token monotonic reason`` (an outcome the daemon
refused) or ``X pid refusals`` (the worker's refusal count when it exits). All processes run on
this machine, so their ``time.monotonic()`` values share one clock with the test's.

What must hold:

- **exclusion**: no key is in two reconciles at once: the intervals [S, E or C] of one key never
  overlap, whichever worker and whichever leader they came from; a key's later reconcile has the
  greater token (tokens increase across leaders);
- **fencing**: every lease's token is above its stream's epoch (the leader's term), and the
  daemon refused no outcome (none was sent for a lease of an earlier stream or term);
- **convergence**: every object's last change (its final resourceVersion) was seen by a
  reconcile that ended (E).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Reconcile:
    pid: int
    key: str
    token: int
    epoch: int
    rv: str
    start: float
    end: float | None = None
    # "E" (it returned), "C" (cancelled: its stream broke), "K" (its process was killed),
    # None (still running)
    how: str | None = None


@dataclass
class Refusal:
    pid: int
    key: str
    token: int
    at: float
    reason: str


@dataclass
class _File:
    path: Path
    offset: int = 0
    partial: bytes = b""


@dataclass
class Records:
    """The workers' record files, read incrementally (only what was appended since the last
    :meth:`update`)."""

    paths: list[Path]
    reconciles: list[Reconcile] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)
    # The X lines: refusals each worker counted, by pid.
    refusal_counts: dict[int, int] = field(default_factory=dict)
    # The last reconcile that ended (E) of each key, by the rv it saw: key -> set of rvs.
    ended_versions: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    malformed: list[str] = field(default_factory=list)
    _files: dict[Path, _File] = field(default_factory=dict)
    _open: dict[tuple[int, str, int], Reconcile] = field(default_factory=dict)

    def update(self) -> Records:
        for path in self.paths:
            f = self._files.setdefault(path, _File(path))
            if not path.exists():
                continue
            with path.open("rb") as fh:
                fh.seek(f.offset)
                data = fh.read()
            f.offset += len(data)
            data = f.partial + data
            lines = data.split(b"\n")
            f.partial = lines.pop()  # "" after a complete last line
            for raw in lines:
                self._line(raw.decode(errors="replace"))
        return self

    def _line(self, line: str) -> None:
        parts = line.split()
        if not parts:
            return
        kind = parts[0]
        try:
            if kind in ("S", "E", "C") and len(parts) == 7:
                pid, key, token, at, epoch, rv = (
                    int(parts[1]),
                    parts[2],
                    int(parts[3]),
                    float(parts[4]),
                    int(parts[5]),
                    parts[6],
                )
                ident = (pid, key, token)
                if kind == "S":
                    r = Reconcile(pid, key, token, epoch, rv, at)
                    self._open[ident] = r
                    self.reconciles.append(r)
                    return
                started = self._open.pop(ident, None)
                if started is None:
                    self.malformed.append(f"{kind} without S: {line}")
                    return
                started.end, started.how = at, kind
                if kind == "E":
                    self.ended_versions[key].add(started.rv)
            elif kind == "R" and len(parts) == 6:
                self.refusals.append(
                    Refusal(int(parts[1]), parts[2], int(parts[3]), float(parts[4]), parts[5])
                )
            elif kind == "X" and len(parts) == 3:
                self.refusal_counts[int(parts[1])] = int(parts[2])
            else:
                self.malformed.append(line)
        except ValueError:
            self.malformed.append(line)

    # --- what the records say -------------------------------------------------------------

    def running(self) -> list[Reconcile]:
        return list(self._open.values())

    def process_died(self, pid: int, at: float) -> None:
        """Ends the reconciles still open of the process ``pid``, killed at ``at`` ("K")."""
        for ident, r in list(self._open.items()):
            if r.pid == pid:
                r.end, r.how = at, "K"
                del self._open[ident]

    def starts_after(self, at: float, epoch: int | None = None) -> list[Reconcile]:
        """Reconciles that started after ``at`` (of leases of the term ``epoch`` when given)."""
        return [r for r in self.reconciles if r.start > at and (epoch is None or r.epoch == epoch)]

    def first_start(self, after: float, epoch_above: int) -> Reconcile | None:
        """The first reconcile that started after ``after`` on a lease of a term after
        ``epoch_above``: the first key a new leader delivered."""
        found = [r for r in self.reconciles if r.start > after and r.epoch > epoch_above]
        return min(found, key=lambda r: r.start) if found else None

    def unreconciled(self, final: dict[str, str]) -> list[str]:
        """Keys (``namespace/name``) of ``final`` (key -> the object's last resourceVersion)
        whose last version no reconcile that ended (E) has seen."""
        return sorted(k for k, rv in final.items() if rv not in self.ended_versions.get(k, ()))

    def check(self) -> None:
        """Raises AssertionError naming the first violation of exclusion or fencing."""
        assert not self.malformed, f"malformed records: {self.malformed[:5]}"
        by_key: dict[str, list[Reconcile]] = defaultdict(list)
        for r in self.reconciles:
            assert r.token > r.epoch, (
                f"{r.key}: token {r.token} is not above its stream's epoch {r.epoch} (pid {r.pid})"
            )
            by_key[r.key].append(r)
        for key, spans in by_key.items():
            spans.sort(key=lambda r: r.start)
            for a, b in itertools.pairwise(spans):
                assert a.end is not None, (
                    f"{key}: token {b.token} (pid {b.pid}, epoch {b.epoch}) started at "
                    f"{b.start:.3f} while token {a.token} (pid {a.pid}, epoch {a.epoch}, "
                    f"started {a.start:.3f}) has not ended"
                )
                assert b.start >= a.end, (
                    f"{key}: token {b.token} (pid {b.pid}, epoch {b.epoch}) started at "
                    f"{b.start:.3f} before token {a.token} (pid {a.pid}, epoch {a.epoch}) "
                    f"ended ({a.how}) at {a.end:.3f}"
                )
                assert b.token > a.token, f"{key}: token {b.token} after token {a.token}"
        assert not self.refusals, f"outcomes refused: {self.refusals[:5]}"
        assert not any(self.refusal_counts.values()), f"refusals: {self.refusal_counts}"

    def summary(self) -> str:
        ended = sum(1 for r in self.reconciles if r.how == "E")
        cancelled = sum(1 for r in self.reconciles if r.how == "C")
        killed = sum(1 for r in self.reconciles if r.how == "K")
        terms = len({r.epoch for r in self.reconciles})
        return (
            f"{len(self.reconciles)} reconciles ({ended} ended, {cancelled} cancelled, "
            f"{killed} killed with their worker, {len(self._open)} running) over {terms} terms, "
            f"{len(self.refusals)} refused"
        )
