"""NVTX ranges around training phases, for an Nsight
Systems timeline (run it under `nsys profile`)."""
# launch: python snippets/practices/nvtx_cuda.py
# requires: cuda

import torch
import torch.nn as nn


def main() -> None:
    device = torch.device("cuda")
    torch.manual_seed(0)
    x = torch.randn(1024, 64, device=device)
    y = (x @ torch.randn(64, 8, device=device)).tanh()
    model = nn.Sequential(
        nn.Linear(64, 256),
        nn.ReLU(),
        nn.Linear(256, 8),
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

    losses = []
    # --8<-- [start:ranges]
    for step in range(20):
        # one bar per step on the NVTX row
        torch.cuda.nvtx.range_push(f"step {step}")
        with torch.cuda.nvtx.range("forward"):
            loss = nn.functional.mse_loss(model(x), y)
        with torch.cuda.nvtx.range("backward"):
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
        with torch.cuda.nvtx.range("optimizer"):
            optimizer.step()
        torch.cuda.nvtx.range_pop()
        losses.append(loss.item())
    # --8<-- [end:ranges]

    # --8<-- [start:emit-nvtx]
    # every autograd op becomes an NVTX range: verbose, use for few steps
    with torch.autograd.profiler.emit_nvtx():
        for _ in range(2):
            optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
    torch.cuda.synchronize()
    # --8<-- [end:emit-nvtx]
    assert losses[-1] < 0.5 * losses[0], (
        f"loss did not fall: {losses[0]:.4f} -> {losses[-1]:.4f}"
    )
    assert torch.isfinite(loss), (
        "training under NVTX annotation must behave as without it"
    )
    print(f"20 annotated steps: loss {losses[0]:.4f} -> {losses[-1]:.4f}")


if __name__ == "__main__":
    main()
