"""Sharding a recording or a sweep over the processes of ``mlx.launch`` and merging what they wrote.

``mlx.launch`` starts one process (rank) per host or GPU: ring or MPI across Macs, NCCL across the GPUs
of one host. Each rank takes a deterministic share of the units of work -- a (prompt, seed) pair, its
vanilla run and every arm together, so every speedup stays a ratio measured on one device -- and writes
them into its own folder ``OUT/shards/rank-<r>/``, one unit at a time and atomically, so a rerun resumes.
A plain run (one process) writes ``OUT`` itself, as it always did.

When every rank is through, a collective is the barrier: each rank says which units it holds and whether
it failed. Units rank 0 cannot see on its own disk (hosts without a shared folder) are copied to it
through the collective; then rank 0 merges. Units that are not done are named in one error, and a rerun
does only those. Ranks that share one host's CPU cores, or one GPU, are flagged as contended: their
timings slow each other down.

The ranks and their collectives are :mod:`calib.run.ranks`; the units' shares and folders, :mod:`calib.run.units`;
locking, --force-new and the settings check of each rank's folder, :mod:`calib.run.folder`.
"""

from __future__ import annotations

import hashlib
import json
import signal
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np

from calib.run.interrupts import Interrupted, interruptions
from calib.run.ranks import ShardError, World
from calib.run.units import UnitLayout, assign, locate, writer_folder
from teacache.errors import TeaCacheError
from teacache.io import atomic_path

MAX_NAMED = 8  # units named in one message before "and N more"
MAX_ERROR = 300  # characters of a rank's error carried to rank 0

Measured = TypeVar("Measured")


class ShardsIncomplete(TeaCacheError, RuntimeError):
    """Units are not done after every rank finished; the message names them and what went wrong."""

    exit_status = 1  # the work ran and part of it failed: not a refused input


class Stopped(BaseException):  # noqa: N818 - like KeyboardInterrupt: not an error of this rank's own
    """SIGTERM during the work (mlx.launch stops every rank when one fails)."""


def agree(world: World, error: BaseException | None) -> None:
    """A collective after each rank checked its own inputs and folder: go on only when every rank may.

    A rank that refused raises its own error; the others raise ShardError naming it, so no rank waits in a
    later collective for a rank that has left.
    """
    said = [b.decode() for b in world.exchange((_describe(error) or "").encode())] if world.size > 1 else []
    if error is not None:
        raise error
    refused = [(rank, text) for rank, text in enumerate(said) if text]
    if refused:
        listed = "; ".join(f"rank {rank}: {text}" for rank, text in refused)
        raise ShardError(f"{len(refused)} of {world.size} ranks refused to start ({listed})")


@dataclass(frozen=True)
class RankStatus:
    rank: int
    ok: bool
    error: str | None
    held: tuple[str, ...]  # units complete in the folders this rank can see


@dataclass(frozen=True)
class Outcome:
    """What the barrier found, the same on every rank: the units not done and what each rank said.

    ``locations`` (unit -> the folder on rank 0's disk that holds it complete) is filled on rank 0 only.
    """

    plan: tuple[str, ...]
    not_done: tuple[str, ...]
    statuses: tuple[RankStatus, ...]
    locations: dict[str, Path] = field(default_factory=dict)
    noun: str = "pairs"
    out: Path | None = None

    @property
    def complete(self) -> bool:
        return not self.not_done

    def message(self) -> str | None:
        """One line naming the units not done and what went wrong; None when everything is done."""
        if not self.not_done:
            return None
        reasons = [f"rank {s.rank} failed: {s.error}" for s in self.statuses if not s.ok]
        if not reasons:
            reasons = ["every rank finished without an error, but these never reached rank 0's disk"]
        where = f" under {self.out}" if self.out is not None else ""
        return (
            f"{len(self.not_done)} of {len(self.plan)} {self.noun} not done: {_named(self.not_done)} "
            f"({'; '.join(reasons)}); the finished {self.noun} are saved{where}; rerun the same command to do "
            "only those"
        )


def _named(keys: Sequence[str]) -> str:
    shown = ", ".join(keys[:MAX_NAMED])
    return shown + (f" and {len(keys) - MAX_NAMED} more" if len(keys) > MAX_NAMED else "")


class ShardedRun:
    """One command's units spread over the ranks of a :class:`World`.

    ``start()`` (a collective) agrees on what is done and returns this rank's share; the rank writes its
    units into ``folder``; ``finish(error)`` (a collective) is the barrier and brings every unit to rank 0;
    ``close()`` (a collective) keeps every rank alive until rank 0 has merged, because mlx.launch stops
    the other ranks as soon as one exits with an error.
    """

    def __init__(
        self,
        world: World,
        out: Path,
        plan: Sequence[str],
        layout: UnitLayout,
        settings: dict | None = None,
        complete: Callable[[Path, str], bool] | None = None,
    ) -> None:
        if len(set(plan)) != len(plan):
            raise ValueError("plan: units must be unique")
        self.world = world
        self.out = Path(out)
        self.plan = tuple(plan)
        self.layout = layout
        self.settings = settings or {}
        self.complete = complete  # (folder, key) -> True when a saved unit needs no more work (default: saved)
        self.folder = writer_folder(self.out, world)
        self.shares: list[list[str]] = []
        self._previous_handler = None

    @property
    def share(self) -> list[str]:
        return self.shares[self.world.rank] if self.shares else []

    @property
    def todo(self) -> list[str]:
        return [k for share in self.shares for k in share]

    def _held(self) -> dict[str, Path]:
        return locate(self.out, self.plan, self.layout, self.complete)

    def start(self) -> list[str]:
        """Agree with every rank on the plan and on what is done; return this rank's share of the rest."""
        world = self.world
        digest = hashlib.sha256(
            json.dumps({"plan": self.plan, "settings": self.settings}, sort_keys=True, default=str).encode()
        ).hexdigest()
        digests = [b.decode() for b in world.exchange(digest.encode())]
        differ = [r for r, d in enumerate(digests) if d != digests[0]]
        if differ:
            raise ShardError(
                f"rank(s) {', '.join(map(str, differ))} have another plan or other settings than rank 0 "
                f"(other {self.layout.noun}, seeds, options or versions on another host?): every rank must run "
                "the same command on the same inputs"
            )
        index = {k: i for i, k in enumerate(self.plan)}
        state = np.zeros((world.size, len(self.plan)), dtype=np.int32)
        for key in self._held():
            state[world.rank, index[key]] = 2
        for key in self.layout.saved(self.folder) & set(self.plan):
            if state[world.rank, index[key]] == 0:
                state[world.rank, index[key]] = 1  # started in this rank's own folder, not complete
        state = world.all_sum(state)
        done = (state == 2).any(axis=0)
        todo = [k for k in self.plan if not done[index[k]]]
        started = state == 1
        first = started.argmax(axis=0)  # the lowest rank that started each unit (one pass, not one per unit)
        sticky = {key: int(first[index[key]]) for key in todo if started[first[index[key]], index[key]]}
        self.shares = assign(todo, world.size, sticky)
        if world.size > 1:
            self._previous_handler = signal.signal(signal.SIGTERM, _raise_stopped)
        return self.share

    def finish(self, error: BaseException | None = None) -> Outcome:
        """The barrier: every rank reports; units rank 0 cannot see are copied to it; the verdict is shared."""
        world = self.world
        if self._previous_handler is not None:
            signal.signal(signal.SIGTERM, self._previous_handler)  # a collective must stay killable
            self._previous_handler = None
        held = self._held()
        status = RankStatus(world.rank, error is None, _describe(error), tuple(sorted(held)))
        statuses = tuple(RankStatus(**{**d, "held": tuple(d["held"])}) for d in self._exchange_json(asdict(status)))
        requests: dict[int, list[str]] = {}
        if world.rank == 0:
            for key in self.plan:
                if key in held:
                    continue
                owner = next((s.rank for s in statuses if key in s.held), None)
                if owner is not None:
                    requests.setdefault(owner, []).append(key)
        requests = {int(r): keys for r, keys in self._exchange_json(requests if world.rank == 0 else None)[0].items()}
        if any(requests.values()):
            self._transfer(requests.get(world.rank, []), held)
        located = self._held() if world.rank == 0 else {}
        not_done = [k for k in self.plan if k not in located]
        not_done = self._exchange_json(not_done if world.rank == 0 else None)[0]  # rank 0's verdict, for all
        return Outcome(self.plan, tuple(not_done), statuses, located, self.layout.noun, self.out)

    def close(self) -> None:
        """The last collective: no rank exits before rank 0 has merged."""
        self.world.barrier()

    def measure(
        self, work: Callable[[], Measured], interrupted: Callable[[], str]
    ) -> tuple[Measured | None, Exception | None]:
        """:meth:`start`, then this rank's ``work``: what it measured, or the error it stored.

        Ctrl-C or SIGTERM raise Interrupted: ``interrupted()`` says what a plain run saved, a rank of several
        says what its host holds. A plain run raises any error at once; a rank of several stores it for
        :meth:`conclude`, so no rank waits in a collective for one that has left.
        """
        try:
            self.start()
            return work(), None
        except (*interruptions(), Stopped):
            raise Interrupted(self.stopped_message() if self.world.size > 1 else interrupted()) from None
        except ShardError:  # the ranks disagree on the plan: every rank raises it at start()
            raise
        except Exception as exc:
            if self.world.size == 1:
                raise
            return None, exc  # said at the barrier, in rank 0's verdict

    def conclude(self, error: BaseException | None, merge: Callable[[dict[str, Path]], Path] | None) -> Path | None:
        """The barrier, rank 0's merge and the last collective; every rank raises the one verdict.

        ``merge`` (None when this rank measured nothing) writes the merged output from the folder holding each
        unit; rank 0 calls it when every unit is done and returns its path. A rank that died inside a
        collective makes the others raise ShardsIncomplete, and so do units not done; otherwise rank 0
        re-raises the ``error`` a rank stored (said at the barrier, in rank 0's verdict).
        """
        world = self.world
        path = None
        try:
            outcome = self.finish(error)
            try:
                if world.rank == 0 and outcome.complete and merge is not None:
                    path = merge(outcome.locations)
            finally:
                self.close()
        except RuntimeError as exc:  # a rank died inside a collective ("[ring] connection to a peer was lost")
            if world.size == 1 or isinstance(exc, ShardError):
                raise
            raise ShardsIncomplete(f"another rank stopped ({exc}); {self.stopped_message()}") from None
        if not outcome.complete:
            raise ShardsIncomplete(outcome.message())
        if error is not None and world.rank == 0:
            raise error
        return path

    def stopped_message(self) -> str:
        """What a rank stopped by SIGTERM leaves behind, as far as this host can see."""
        held = self._held()
        missing = [k for k in self.plan if k not in held]
        return (
            f"stopped (mlx.launch stops every rank when one fails): {len(held)} of {len(self.plan)} "
            f"{self.layout.noun} are saved on this host; not done: {_named(missing) or 'none'}; rerun the same "
            "command to do only those"
        )

    def _exchange_json(self, value) -> list:
        """Every rank's JSON value (None sends nothing)."""
        payload = json.dumps(value).encode() if value is not None else b""
        return [json.loads(b) if b else None for b in self.world.exchange(payload)]

    def _transfer(self, keys: list[str], held: dict[str, Path]) -> None:
        """Send the files of ``keys`` to rank 0, one file per rank per round; rank 0 writes them where they were."""
        mine = [str(p) for key in keys for p in self.layout.files(self.out, held[key], key)]
        manifests = self._exchange_json(mine)
        for i in range(max(len(m) for m in manifests)):
            payload = (self.out / mine[i]).read_bytes() if i < len(mine) else b""
            received = self.world.gather_bytes(payload)
            if self.world.rank != 0:
                continue
            for rank, manifest in enumerate(manifests):
                if rank == 0 or i >= len(manifest):
                    continue
                relative = Path(manifest[i])
                if relative.is_absolute() or ".." in relative.parts:
                    raise ShardError(f"rank {rank} sent a file outside the output folder: {relative}")
                with atomic_path(self.out / relative) as tmp:
                    tmp.write_bytes(received[rank])


def _raise_stopped(signum, frame) -> None:
    raise Stopped()


def _describe(error: BaseException | None) -> str | None:
    if error is None:
        return None
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= MAX_ERROR else text[: MAX_ERROR - 3] + "..."
