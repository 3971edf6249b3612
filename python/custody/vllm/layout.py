"""How vLLM's KV cache becomes one custody pool.

vLLM (0.32, CPU) allocates every layer's KV cache in one backing buffer of
int8 and views layer ``l`` of block ``b`` at ``l * layer_stride + b *
block_stride`` (layout LBHNC: layers outermost). custody moves equal blocks
of one pool, so the whole backing buffer is registered as one pool of
``layers * num_blocks`` custody blocks of ``block_stride`` bytes, and vLLM
block ``b`` is the custody blocks ``b, N + b, 2N + b, ...`` (``N`` the
number of vLLM blocks). A request's blocks on every layer are then one
part, so one transfer handle per remote rank, as vLLM's NixlConnector
posts one transfer with every layer's descriptors.

The buffer lives in a shared-memory file (:func:`shm_allocation`), so the
transport process maps the very bytes the model reads: no copy.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Layout:
    """Where vLLM's KV cache lies in the custody pool.

    Attributes:
        path: the shared-memory file holding the backing buffer.
        block_bytes: one layer's share of one vLLM block, a custody block.
        num_blocks: vLLM's number of KV blocks (``N``).
        layers: the number of layers that own a view of the buffer.
    """

    path: str
    block_bytes: int
    num_blocks: int
    layers: int

    @property
    def custody_blocks(self) -> int:
        """The pool's size in custody blocks."""
        return self.layers * self.num_blocks

    def to_custody(self, blocks: Sequence[int]) -> list[int]:
        """The custody blocks of vLLM blocks, layer by layer (every layer's
        share of every block, in one list: one part)."""
        for b in blocks:
            if not 0 <= b < self.num_blocks:
                raise ValueError(
                    f"vLLM block {b} is outside the KV cache's {self.num_blocks} blocks"
                )
        return [layer * self.num_blocks + b for layer in range(self.layers) for b in blocks]

    def to_vllm(self, custody_block: int) -> int:
        """The vLLM block a custody block belongs to."""
        if not 0 <= custody_block < self.custody_blocks:
            raise ValueError(
                f"custody block {custody_block} is outside the pool's {self.custody_blocks} blocks"
            )
        return custody_block % self.num_blocks


# The name of a KV cache file (Regions.allocate): custody-NAME-PID-RANDOM.kv.
_FILE = re.compile(r"^custody-.+-(\d+)-[0-9a-f]{8}\.kv$")


def _alive(pid: int) -> bool:
    """Whether a process of that pid exists (it may be another than the one
    that made a file: then the file stays, which is safe)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Regions:
    """The shared-memory files this process allocated KV caches in."""

    def __init__(self, directory: str, name: str) -> None:
        self.directory = directory
        self.name = name
        self.files: list[tuple[str, torch.Tensor]] = []

    def sweep(self) -> list[str]:
        """Remove the files of this directory that engine processes no longer
        alive allocated (a worker that was killed cannot remove its own);
        returns their paths. A file's name carries the pid of the process
        that made it. The file of a host's pool that still maps it stays
        mapped; only its name goes."""
        gone = []
        for name in os.listdir(self.directory):
            m = _FILE.match(name)
            if m is None:
                continue
            pid = int(m.group(1))
            if pid == os.getpid() or _alive(pid):
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.directory, name))
                gone.append(os.path.join(self.directory, name))
        return gone

    def allocate(self, nbytes: int) -> torch.Tensor:
        """A zeroed int8 tensor of nbytes backed by a new 0600 file."""
        path = os.path.join(
            self.directory, f"custody-{self.name}-{os.getpid()}-{secrets.token_hex(4)}.kv"
        )
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, nbytes)
        finally:
            os.close(fd)
        t = torch.from_file(path, shared=True, size=nbytes, dtype=torch.int8)
        self.files.append((path, t))
        return t

    def find(self, ptr: int) -> tuple[str, torch.Tensor] | None:
        """The file whose mapping holds address ptr."""
        for path, t in self.files:
            start = t.data_ptr()
            if start <= ptr < start + t.numel():
                return path, t
        return None

    def remove(self) -> None:
        """Unlink every file (the mappings stay valid while referenced)."""
        for path, _ in self.files:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        self.files.clear()


@contextlib.contextmanager
def shm_allocation(regions: Regions) -> Iterator[None]:
    """Place the KV cache's backing buffer in shared memory.

    vLLM runs its KV cache allocation inside the connector's memory pool
    context (``get_mem_pool_context``); on a GPU that is a CUDA memory
    pool. PyTorch has no such pool for host memory, so for the duration of
    the allocation ``torch.zeros`` of a flat int8 CPU buffer — the one
    allocation vLLM makes there — returns a tensor mapped from a
    shared-memory file instead. Every other call goes to ``torch.zeros``
    unchanged, and :func:`describe` checks afterwards that every layer's
    view lies in such a file, so a vLLM that allocates otherwise is
    refused with a clear error instead of being served wrong memory.
    """
    real = torch.zeros

    def zeros(*size: Any, **kw: Any) -> torch.Tensor:
        device = kw.get("device")
        flat = len(size) == 1 and isinstance(size[0], int)
        if (
            flat
            and kw.get("dtype") is torch.int8
            and set(kw) <= {"dtype", "device"}
            and (device is None or torch.device(device).type == "cpu")
        ):
            return regions.allocate(size[0])
        return real(*size, **kw)

    torch.zeros = zeros
    try:
        yield
    finally:
        torch.zeros = real


def describe(kv_caches: dict[str, torch.Tensor], regions: Regions) -> Layout:
    """The layout of vLLM's registered KV caches, or a ValueError naming
    what does not fit one custody pool (a layer outside shared memory,
    layers of different block sizes, gaps between layers)."""
    if not kv_caches:
        raise ValueError("custody.vllm: vLLM registered no KV cache")
    offsets: dict[int, str] = {}
    path = ""
    block_bytes = num_blocks = 0
    for name, t in kv_caches.items():
        found = regions.find(t.data_ptr())
        if found is None:
            raise ValueError(
                f"custody.vllm: layer {name}'s KV cache is not in shared memory; this vLLM did not "
                "allocate its KV cache inside the connector's memory pool context"
            )
        p, base = found
        if path and p != path:
            raise ValueError(
                f"custody.vllm: layer {name}'s KV cache is in another buffer than the first layer's"
            )
        path = p
        bb = t[0].numel() * t.element_size()
        if t.stride(0) * t.element_size() != bb or not t[0].is_contiguous():
            raise ValueError(
                f"custody.vllm: layer {name}'s blocks are not contiguous (shape {tuple(t.shape)}, strides {t.stride()})"
            )
        if block_bytes and (bb, t.shape[0]) != (block_bytes, num_blocks):
            raise ValueError(
                f"custody.vllm: layer {name} has {t.shape[0]} blocks of {bb} bytes, another layer "
                f"{num_blocks} of {block_bytes}; custody needs one block size"
            )
        block_bytes, num_blocks = bb, t.shape[0]
        off = t.data_ptr() - base.data_ptr()
        offsets.setdefault(off, name)  # layers that share a cache count once
    layer_bytes = block_bytes * num_blocks
    layers = len(offsets)
    if sorted(offsets) != [i * layer_bytes for i in range(layers)]:
        raise ValueError(
            f"custody.vllm: the layers' KV caches are not packed one after another at offset 0 (offsets {sorted(offsets)}, layer size {layer_bytes})"
        )
    return Layout(path=path, block_bytes=block_bytes, num_blocks=num_blocks, layers=layers)
