"""context_parallel on CPU: causal SDPA has no ring
there; the two errors, by the SDPA kernel chosen."""

import gc

import torch
import torch._dynamo  # before init_process_group: see the debugging page
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.experimental import context_parallel
from torch.nn.attention import SDPBackend, sdpa_kernel

# One process is enough: the error comes from
# DTensor's sharding rules, before any communication.
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
mesh = init_device_mesh("cpu", (1,))

errors = []
# --8<-- [start:try]
# CPU default, then math only
for backends in (
    [SDPBackend.FLASH_ATTENTION, SDPBackend.MATH],
    [SDPBackend.MATH],
):
    q, k, v = (torch.randn(1, 2, 16, 8) for _ in range(3))
    try:
        with (
            sdpa_kernel(backends),
            context_parallel(
                mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2]
            ),
        ):
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
    except (NotImplementedError, RuntimeError) as error:
        print(
            f"{', '.join(b.name for b in backends)}: "
            f"{type(error).__name__}: {error}"
        )
        errors.append(str(error))
# --8<-- [end:try]

assert (
    "_scaled_dot_product_flash_attention_for_cpu.default does not have a "
    "sharding strategy" in errors[0]
)
assert "got mixed torch.Tensor and DTensor" in errors[1], errors
# the teardown of the parallelism chapter's DTensor
# programs: no gloo thread left at exit (debugging page)
gc.collect()
dist.destroy_process_group()
getattr(mesh, "_pg_registry", {}).clear()
