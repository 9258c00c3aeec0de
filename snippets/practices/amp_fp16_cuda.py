"""fp16 autocast with torch.amp.GradScaler on a GPU: scaled
backward, unscale before clipping, skipped overflows."""
# launch: python snippets/practices/amp_fp16_cuda.py
# requires: cuda

import torch
import torch.nn as nn


def main() -> None:
    device = torch.device("cuda")
    torch.manual_seed(0)
    x = torch.randn(512, 32, device=device)
    y = (x @ torch.randn(32, 8, device=device)).tanh()
    model = nn.Sequential(
        nn.Linear(32, 128),
        nn.GELU(),
        nn.Linear(128, 8),
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

    # --8<-- [start:loop]
    # one per training run; starts at scale 2**16
    scaler = torch.amp.GradScaler("cuda")
    losses = []
    for _ in range(60):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            out = model(x)
            loss = nn.functional.mse_loss(out, y)
        # gradients of loss * scale: small values survive fp16
        scaler.scale(loss).backward()
        # true gradients from here on: clip after this
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        scaler.step(optimizer)  # skips the step if any gradient is inf/NaN
        # halves the scale after an overflow, grows it after 2000 clean steps
        scaler.update()
        losses.append(loss.item())
    # --8<-- [end:loop]
    assert out.dtype == torch.float16 and all(
        p.dtype == torch.float32 for p in model.parameters()
    )
    assert losses[-1] < 0.5 * losses[0], (
        f"loss did not fall: {losses[0]:.4f} -> {losses[-1]:.4f}"
    )

    # --8<-- [start:overflow]
    before = [p.detach().clone() for p in model.parameters()]
    scale = scaler.get_scale()
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type="cuda", dtype=torch.float16):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    model[0].weight.grad[0, 0] = float("inf")  # simulate an fp16 overflow
    scaler.step(optimizer)
    scaler.update()
    assert all(torch.equal(b, p) for b, p in zip(before, model.parameters())), (
        "overflow step was not skipped"
    )
    assert scaler.get_scale() == scale * 0.5  # backoff_factor=0.5
    # --8<-- [end:overflow]
    print(
        f"fp16 + GradScaler: loss {losses[0]:.4f} -> {losses[-1]:.4f}, "
        f"scale {scale:g} -> {scaler.get_scale():g}"
    )


if __name__ == "__main__":
    main()
