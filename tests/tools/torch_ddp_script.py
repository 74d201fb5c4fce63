"""An unmodified-style PyTorch DDP job (gloo, init_method env://) for the launcher tests.

Under paddlerun/torchrun it reads RANK/WORLD_SIZE; under mpirun (which sets only OMPI_COMM_WORLD_*)
it maps those first, the way a user's tiny wrapper would. Trains a linear model for a few steps on
rank-dependent data and checks that every rank ends with identical parameters; prints one line
"torch_ddp rank R/N ok checksum C".
"""
import os

for ours, theirs in (("RANK", "OMPI_COMM_WORLD_RANK"), ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"),
                     ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK")):
    if ours not in os.environ and theirs in os.environ:
        os.environ[ours] = os.environ[theirs]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(100 + rank)
for _ in range(5):
    x = torch.randn(16, 8, generator=gen)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
checksum = sum(float(p.detach().sum()) for p in model.parameters())
sums = [torch.zeros(1) for _ in range(world)]
dist.all_gather(sums, torch.tensor([checksum]))
assert all(abs(float(s) - checksum) < 1e-6 for s in sums), f"replicas differ: {sums}"
print(f"torch_ddp rank {rank}/{world} ok checksum {checksum:.6f}", flush=True)
dist.barrier()
dist.destroy_process_group()
