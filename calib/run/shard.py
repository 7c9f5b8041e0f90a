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
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypeVar

import mlx.core as mx
import numpy as np

from calib.run import fingerprint
from calib.run.folder_lock import FolderLocked, folder_lock
from calib.run.interrupts import Interrupted, interruptions
from teacache.io import atomic_path
from teacache.provenance import hardware_slug

SHARDS = "shards"  # OUT/shards/rank-<r>/: the folder rank r writes when there are several ranks
MAX_NAMED = 8  # units named in one message before "and N more"
MAX_ERROR = 300  # characters of a rank's error carried to rank 0

Measured = TypeVar("Measured")


class ShardError(RuntimeError):
    """The ranks cannot work together (a broken launch, ranks with different plans); the message says why."""


class ShardsIncomplete(RuntimeError):
    """Units are not done after every rank finished; the message names them and what went wrong."""


class MixedHardware(ValueError):
    """A table holds runs timed on several hardware: their speedups must not be pooled."""


class Stopped(BaseException):  # noqa: N818 - like KeyboardInterrupt: not an error of this rank's own
    """SIGTERM during the work (mlx.launch stops every rank when one fails)."""


# ------------------------------------------------------------------------------------------- the ranks


@dataclass(frozen=True)
class Peer:
    """What one rank says about itself, to find ranks that compete for one host's cores or one GPU."""

    rank: int
    host: str  # host name; compared only, never written (provenance gives host indices)
    device: str  # MLX backend of the default device: cpu, metal or cuda
    gpu: str | None  # which GPU of the host (CUDA_VISIBLE_DEVICES as mlx.launch sets it); None on cpu
    cores: tuple[int, ...] | None  # CPU affinity where the OS tells it (Linux); None: every core
    hardware: str  # teacache.provenance.hardware_slug() of this rank


def contention(peers: Sequence[Peer]) -> dict[int, tuple[int, ...]]:
    """For each rank, the ranks that run on its host and compete for the same cores (cpu) or GPU."""
    shared: dict[int, list[int]] = {p.rank: [] for p in peers}
    for a in peers:
        for b in peers:
            if a.rank == b.rank or a.host != b.host or a.device != b.device:
                continue
            if a.device == "cpu":
                competes = a.cores is None or b.cores is None or bool(set(a.cores) & set(b.cores))
            else:
                competes = a.gpu == b.gpu
            if competes:
                shared[a.rank].append(b.rank)
    return {rank: tuple(others) for rank, others in shared.items()}


def _device() -> str:
    if mx.metal.is_available():
        return "metal"
    if hasattr(mx, "cuda") and mx.cuda.is_available():
        return "cuda"
    return "cpu"


def _self_peer(rank: int, hardware: str) -> Peer:
    device = _device()
    gpu = None
    if device == "metal":
        gpu = "0"  # one GPU per Mac
    elif device == "cuda":
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
        gpu = visible.split(",")[0].strip() if visible else "0"  # MLX uses the first visible device
    cores = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else None
    return Peer(rank=rank, host=socket.gethostname(), device=device, gpu=gpu, cores=cores, hardware=hardware)


def _backend_name(size: int) -> str:
    """Which distributed backend mlx.launch started, from the environment it sets (for provenance and streams)."""
    env = os.environ
    if size == 1:
        return "none"
    if "NCCL_HOST_IP" in env:
        return "nccl"
    if "MLX_JACCL_COORDINATOR" in env or "MLX_IBV_DEVICES" in env:
        return "jaccl"
    if env.get("MLX_HOSTFILE"):
        return "ring"
    if "OMPI_COMM_WORLD_SIZE" in env or "PMI_SIZE" in env:
        return "mpi"
    return "unknown"


@dataclass(frozen=True)
class World:
    """This process's rank among ``size`` ranks, what every rank said about itself, and the collectives."""

    rank: int
    size: int
    backend: str  # none (one process), ring, mpi, nccl, jaccl
    peers: tuple[Peer, ...]
    group: object = field(default=None, repr=False, compare=False)

    @property
    def me(self) -> Peer:
        return self.peers[self.rank]

    @property
    def contended_with(self) -> tuple[int, ...]:
        return contention(self.peers)[self.rank]

    @property
    def contended(self) -> bool:
        return bool(self.contended_with)

    def row_fields(self) -> dict:
        """Columns every row this rank writes carries."""
        return {"rank": self.rank, "hardware": self.me.hardware, "contended": self.contended}

    def host_index(self, rank: int) -> int:
        hosts = list(dict.fromkeys(p.host for p in self.peers))
        return hosts.index(self.peers[rank].host)

    def provenance(self) -> dict:
        """The ranks of the run as provenance.json records them: no host names, host indices instead."""
        shared = contention(self.peers)
        return {
            "size": self.size,
            "backend": self.backend,
            "ranks": [
                {
                    "rank": p.rank,
                    "host": self.host_index(p.rank),
                    "device": p.device,
                    "gpu": p.gpu,
                    "hardware": p.hardware,
                    "contended_with": list(shared[p.rank]),
                }
                for p in self.peers
            ],
        }

    def contention_message(self) -> str | None:
        groups = {tuple(sorted((r, *others))) for r, others in contention(self.peers).items() if others}
        if not groups:
            return None
        parts = []
        for ranks in sorted(groups):
            peer = self.peers[ranks[0]]
            what = "the CPU cores" if peer.device == "cpu" else f"GPU {peer.gpu}"
            parts.append(f"ranks {', '.join(map(str, ranks))} share {what} of host {self.host_index(ranks[0])}")
        return (
            f"contended: {'; '.join(parts)}; their rows are flagged contended (speedups stay same-rank ratios, "
            "but the ranks slow each other down)"
        )

    def hardware_message(self) -> str | None:
        """Said at the start when the ranks run on different hardware (a report refuses to pool them)."""
        kinds = sorted({p.hardware for p in self.peers})
        if len(kinds) < 2:
            return None
        by = {h: [p.rank for p in self.peers if p.hardware == h] for h in kinds}
        listed = "; ".join(f"{h}: rank(s) {', '.join(map(str, ranks))}" for h, ranks in by.items())
        return f"the ranks run on {len(kinds)} kinds of hardware ({listed}): speedups are kept apart per hardware"

    # -------------------------------------------------------------------------------- collectives

    def _stream(self):
        # NCCL reduces on the GPU; ring, MPI and JACCL reduce on the CPU (and some Metal builds refuse
        # a collective on the GPU stream)
        return None if self.backend == "nccl" else mx.cpu

    def all_sum(self, values: np.ndarray) -> np.ndarray:
        """Element-wise sum over ranks of an int32 array; also the barrier (every rank must call it)."""
        values = np.ascontiguousarray(values, dtype=np.int32)
        if self.size == 1:
            return values

        total = mx.distributed.all_sum(mx.array(values), group=self.group, stream=self._stream())
        mx.eval(total)
        return np.array(total, dtype=np.int32)

    def barrier(self) -> None:
        self.all_sum(np.ones(1, dtype=np.int32))

    def exchange(self, payload: bytes) -> list[bytes]:
        """Every rank's bytes, in rank order, on every rank (small payloads: one int32 per byte)."""
        return self._padded(payload, self._summed_rows)

    def gather_bytes(self, payload: bytes) -> list[bytes]:
        """Like :meth:`exchange` for files: one uint8 all_gather (used only between hosts without a shared folder)."""
        return self._padded(payload, self._gathered_rows)

    def _padded(self, payload: bytes, collect: Callable[[bytes, int], np.ndarray]) -> list[bytes]:
        """Every rank's bytes: the lengths first, then ``collect`` of the payloads padded to the longest, as
        a (size, width) array of bytes, one row a rank."""
        if self.size == 1:
            return [payload]
        lengths = self._lengths(len(payload))
        width = int(lengths.max())
        if width == 0:
            return [b""] * self.size
        rows = collect(payload, width)
        return [rows[r, : lengths[r]].tobytes() for r in range(self.size)]

    def _summed_rows(self, payload: bytes, width: int) -> np.ndarray:
        slots = np.zeros((self.size, width), dtype=np.int32)
        slots[self.rank, : len(payload)] = np.frombuffer(payload, dtype=np.uint8)
        return self.all_sum(slots).astype(np.uint8)

    def _gathered_rows(self, payload: bytes, width: int) -> np.ndarray:
        buffer = np.zeros(width, dtype=np.uint8)
        buffer[: len(payload)] = np.frombuffer(payload, dtype=np.uint8)
        gathered = mx.distributed.all_gather(mx.array(buffer), group=self.group, stream=self._stream())
        mx.eval(gathered)
        return np.array(gathered, dtype=np.uint8).reshape(self.size, width)

    def _lengths(self, length: int) -> np.ndarray:
        mine = np.zeros(self.size, dtype=np.int32)
        mine[self.rank] = length
        return self.all_sum(mine)


def sharding_provenance(world: World, rows) -> dict:
    """provenance.json's ``distributed``: this run's ranks, or, when one process resumed what several ranks
    began, the ranks its rows name (a resume in one process does not make them one process's rows)."""
    if world.size > 1:
        return {"distributed": world.provenance()}
    if "rank" not in rows.columns:
        return {}
    ranks = sorted(int(r) for r in rows["rank"].dropna().unique())
    if ranks in ([], [0]):
        return {}
    contended = bool(rows["contended"].fillna(False).astype(bool).any()) if "contended" in rows.columns else False
    return {"distributed": {"size": None, "ranks_in_rows": ranks, "contended_rows": contended,
                            "resumed_in_one_process": True}}  # fmt: skip


def connect(hardware: str | None = None) -> World:
    """Join the ranks ``mlx.launch`` started (one rank of size 1 when it did not) and learn about each other.

    With several ranks this is a collective: every rank must call it.
    """
    group = mx.distributed.init()
    size, rank = group.size(), group.rank()
    launched_rank = os.environ.get("MLX_RANK", "0").strip() or "0"
    if size == 1 and launched_rank != "0":
        raise ShardError(
            f"mlx.launch started this process as rank {launched_rank}, but MLX's distributed group has one "
            "process: the backend did not start (is the hostfile right, and the same MLX build on every host?)"
        )
    if hardware is None:
        hardware = hardware_slug()
    me = _self_peer(rank, hardware)
    world = World(rank=rank, size=size, backend=_backend_name(size), peers=(me,), group=group)
    if size == 1:
        return world
    said = [json.loads(b) for b in world.exchange(json.dumps(asdict(me)).encode())]
    peers = tuple(Peer(**{**d, "cores": tuple(d["cores"]) if d["cores"] is not None else None}) for d in said)
    return World(rank=rank, size=size, backend=world.backend, peers=peers, group=group)


def one_hardware(runs, unit: str = "pair_id") -> str | None:
    """The one hardware a table's rows were timed on (None: the table predates the column).

    A speedup is a ratio of two timings on one device; pooling ratios of different devices into one median
    would describe no machine, so a table with rows of several hardware is refused with the counts.
    """
    if "hardware" not in runs.columns:
        return None
    kinds = sorted(str(h) for h in runs["hardware"].dropna().unique())
    if len(kinds) <= 1:
        return kinds[0] if kinds else None
    counts = runs.groupby("hardware")[unit].nunique() if unit in runs.columns else runs.groupby("hardware").size()
    listed = ", ".join(f"{h}: {int(counts[h])}" for h in kinds)
    raise MixedHardware(
        f"the runs were timed on {len(kinds)} kinds of hardware ({listed} {unit.removesuffix('_id')}s): speedups "
        "are not pooled across hardware; select one hardware's rows (column 'hardware') before reporting"
    )


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


def force_new(world: World, out: Path, folder: Path, command: str, outputs: tuple[str, ...]) -> None:
    """--force-new under any number of ranks: rank 0 clears OUT (shard folders included) before any rank
    claims its folder; a rank on a host without a shared folder then clears its own shard folder."""
    error = None
    try:
        if world.rank == 0:
            with folder_lock(out, command):
                removed = fingerprint.clear(out, outputs)
            if removed:
                print(f"--force-new: removed {', '.join(removed)} from {out}")
    except FolderLocked as exc:
        error = exc
    agree(world, error)
    if world.rank > 0 and folder.is_dir():
        with folder_lock(folder, command):
            fingerprint.clear(folder, outputs)


def claim(stack, world: World, out: Path, folder: Path, command: str, check: Callable[[Path], None]) -> None:
    """Lock this rank's folder (and OUT on rank 0, which writes the merged tables) and ``check`` the settings
    of every folder whose units the merge may take; then :func:`agree` (every rank calls this)."""
    error = None
    try:
        if world.size > 1 and world.rank == 0:
            stack.enter_context(folder_lock(out, command))
        lock = stack.enter_context(folder_lock(folder, command))
        if lock.stale_message():
            print(lock.stale_message())
        for _rank, other in shard_folders(out):
            if other == folder or (other / fingerprint.FILE).is_file() or any(other.iterdir()):
                check(other)
    except (ValueError, FolderLocked) as exc:
        error = exc
    agree(world, error)


# ------------------------------------------------------------------------------------------- the units


def assign(keys: Sequence[str], size: int, sticky: dict[str, int] | None = None) -> list[list[str]]:
    """Deterministic, disjoint shares of ``keys`` that cover them all, in plan order.

    A key in ``sticky`` goes to that rank (a unit a rank already started stays with it); every other key
    goes to the rank with the fewest keys so far, the lowest rank on a tie (round robin when nothing is
    sticky).
    """
    if size < 1:
        raise ValueError(f"size: expected at least 1 rank, got {size}")
    sticky = {k: r for k, r in (sticky or {}).items() if 0 <= r < size}
    shares: list[list[str]] = [[] for _ in range(size)]
    for key in keys:
        if key in sticky:
            shares[sticky[key]].append(key)
    for key in keys:
        if key not in sticky:
            min(shares, key=len).append(key)  # min() returns the first (lowest) rank among equals
    order = {k: i for i, k in enumerate(keys)}
    return [sorted(share, key=order.__getitem__) for share in shares]


@dataclass(frozen=True)
class UnitLayout:
    """Where a command keeps one unit's files inside the folder a rank writes."""

    subdir: str  # "pairs" (sweep) or "runs" (record)
    marker: str  # name ending of the file written last, which marks a unit saved: ".runs.parquet"
    noun: str = "pairs"  # what a unit is called in messages
    shared: tuple[str, ...] = ()  # files under OUT itself that belong to a unit, "{key}" in the pattern

    def saved(self, folder: Path) -> set[str]:
        parts = folder / self.subdir
        if not parts.is_dir():
            return set()
        names = (p.name for p in parts.iterdir() if not p.name.startswith("."))
        return {n.removesuffix(self.marker) for n in names if n.endswith(self.marker)}

    def files(self, out: Path, folder: Path, key: str) -> list[Path]:
        """The unit's files, relative to ``out``, marker last (it is the one that says the unit is saved)."""
        own = sorted((folder / self.subdir).glob(f"{_glob_escape(key)}.*"))
        marker = folder / self.subdir / f"{key}{self.marker}"
        listed = [p for p in own if p != marker and not p.name.startswith(".")]
        for pattern in self.shared:
            listed += sorted(out.glob(pattern.format(key=_glob_escape(key))))
        return [p.relative_to(out) for p in [*listed, marker]]


def _glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def shard_folders(out: Path) -> list[tuple[int | None, Path]]:
    """Every folder under ``out`` that holds units: ``out`` itself (rank None), then shards/rank-<r> by rank."""
    found: list[tuple[int | None, Path]] = [(None, out)]
    root = out / SHARDS
    if root.is_dir():
        ranks = []
        for p in root.iterdir():
            number = p.name.removeprefix("rank-")
            if p.is_dir() and p.name.startswith("rank-") and number.isdigit():
                ranks.append((int(number), p))
        found += sorted(ranks)
    return found


def writer_folder(out: Path, world: World) -> Path:
    """The one folder this rank writes: ``out`` for a plain run, ``out/shards/rank-<r>`` under mlx.launch."""
    return out if world.size == 1 else out / SHARDS / f"rank-{world.rank}"


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


def locate(out: Path, plan: Sequence[str], layout: UnitLayout, complete=None) -> dict[str, Path]:
    """Each complete unit of the plan and the folder holding it: ``out`` first, then shards by rank."""
    located: dict[str, Path] = {}
    wanted = set(plan)
    for _rank, folder in shard_folders(out):
        for key in sorted(layout.saved(folder) & wanted):
            if key not in located and (complete is None or complete(folder, key)):
                located[key] = folder
    return located


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
        sticky = {}
        for key in todo:
            started = np.flatnonzero(state[:, index[key]] == 1)
            if started.size:
                sticky[key] = int(started[0])
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
