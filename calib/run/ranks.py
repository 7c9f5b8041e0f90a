"""The ranks ``mlx.launch`` started: what each says about itself, which of them compete for one host's CPU cores or
one GPU, the collectives between them, and what the rows they write say about them.

A plain run is one rank of size 1 (:func:`connect` without ``mlx.launch``). Provenance names hosts by index, never
by name; a table whose rows were timed on several hardware is refused where speedups would be pooled
(:func:`one_hardware`).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import mlx.core as mx
import numpy as np

from teacache.errors import TeaCacheError
from teacache.provenance import hardware_slug

if TYPE_CHECKING:
    import pandas as pd


class ShardError(TeaCacheError, RuntimeError):
    """The ranks cannot work together (a broken launch, ranks with different plans); the message says why."""


class MixedHardware(TeaCacheError, ValueError):
    """A table holds runs timed on several hardware: their speedups must not be pooled."""


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


def sharding_provenance(world: World, rows: pd.DataFrame) -> dict:
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


def one_hardware(runs: pd.DataFrame, unit: str = "pair_id") -> str | None:
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
