"""A minimal PyTorch DDP job for Tessera's bring-your-own-trainer mode.

Reads only the torchrun environment (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK), so it runs the
same under `torchrun`, under Tessera's worker agent, or by hand. Fits y = 3x - 1 with a linear
model on CPU (gloo), checks that every rank ends with identical weights, and exits 0.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> int:
    dist.init_process_group(backend="gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial weights on every rank
    model = DistributedDataParallel(torch.nn.Linear(1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(1000 + rank)  # a different shard per rank
    for step in range(200):
        x = torch.rand(32, 1, generator=generator) * 2 - 1
        loss = torch.nn.functional.mse_loss(model(x), 3 * x - 1)
        optimizer.zero_grad()
        loss.backward()  # DDP all-reduces the gradients here
        optimizer.step()
        if rank == 0 and step % 50 == 0:
            print(f"step {step} loss {loss.item():.5f}", flush=True)
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(weights) for _ in range(world)]
    dist.all_gather(gathered, weights)
    dist.destroy_process_group()
    if any(not torch.equal(g, weights) for g in gathered):
        print(f"rank {rank}: replicas diverged", file=sys.stderr)
        return 1
    if rank == 0:
        w, b = weights.tolist()
        print(f"done: world {world}, w {w:.3f} (want 3), b {b:.3f} (want -1)", flush=True)
    return 0 if abs(weights[0] - 3) < 0.1 and abs(weights[1] + 1) < 0.1 else 1


if __name__ == "__main__":
    sys.exit(main())
