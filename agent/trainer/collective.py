"""Sharing rank 0's decisions with every rank of a torch.distributed job.

Only used when the training script already initialised a process group; torch is
never imported here unless the script imported it first.  One int64 broadcast per
call carries the payload length; a second one, only when there is a payload, carries
the bytes (msgpack, never pickle).
"""

from __future__ import annotations

import sys
from typing import Any

import msgpack


def process_group() -> Any | None:
    """torch.distributed if the script initialised a group of more than one process."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
        return None
    return dist


class Broadcaster:
    def __init__(self, dist: Any):
        import torch

        self.torch = torch
        self.dist = dist
        self.rank = dist.get_rank()
        backend = dist.get_backend()
        self.device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
        self._length = torch.zeros(1, dtype=torch.int64, device=self.device)

    def share(self, obj: Any = None) -> Any:
        """Rank 0 passes ``obj``; every rank returns it."""
        torch = self.torch
        payload = msgpack.packb(obj, use_bin_type=True) if self.rank == 0 and obj else b""
        self._length.fill_(len(payload))
        self.dist.broadcast(self._length, src=0)
        size = int(self._length.item())
        if size == 0:
            return None
        data = (torch.frombuffer(bytearray(payload), dtype=torch.uint8).to(self.device) if self.rank == 0
                else torch.empty(size, dtype=torch.uint8, device=self.device))
        self.dist.broadcast(data, src=0)
        return msgpack.unpackb(data.cpu().numpy().tobytes(), raw=False)

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` in rank order, on every rank: two all_gathers, the lengths then the bytes."""
        torch, dist = self.torch, self.dist
        payload = msgpack.packb(obj, use_bin_type=True)
        lengths = [torch.zeros(1, dtype=torch.int64, device=self.device) for _ in range(dist.get_world_size())]
        dist.all_gather(lengths, torch.tensor([len(payload)], dtype=torch.int64, device=self.device))
        sizes = [int(n.item()) for n in lengths]
        mine = torch.zeros(max(sizes), dtype=torch.uint8)
        mine[:len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        parts = [torch.empty(max(sizes), dtype=torch.uint8, device=self.device) for _ in sizes]
        dist.all_gather(parts, mine.to(self.device))
        return [msgpack.unpackb(p.cpu().numpy().tobytes()[:n], raw=False) for p, n in zip(parts, sizes)]
