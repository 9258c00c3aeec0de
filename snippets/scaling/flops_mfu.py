"""A training step's FLOPs, counted by FlopCounterMode, equal 6N + 12Lsd
per token plus what the hardware recomputes; MFU and HFU from a step time."""
# launch: python snippets/scaling/flops_mfu.py
# output-varies: ^this CPU.s matmul peak: (\S+)
# output-varies: : step (\S+) ms, (\S+) tokens/s
# output-varies: ^  MFU (\S+), HFU (\S+)$
# output-excerpt: counts ^(TinyGPT|s = |model|counted)
# output-excerpt: mfu ^(this CPU|no check|every block|  MFU)
# output-excerpt: llama ^Llama

import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils import flop_counter
from torch.utils.checkpoint import checkpoint
from torch.utils.flop_counter import FlopCounterMode, register_flop_formula

VOCAB, HIDDEN, HEADS, LAYERS = 256, 64, 4, 2
BATCH, SEQ = 4, 32


# --8<-- [start:model]
class Block(nn.Module):
    """A GPT block: attention and a 4d MLP, matmuls without bias."""

    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(HIDDEN), nn.LayerNorm(HIDDEN)
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN, bias=False)
        self.out = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.up = nn.Linear(HIDDEN, 4 * HIDDEN, bias=False)
        self.down = nn.Linear(4 * HIDDEN, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(HIDDEN, dim=-1)
        q, k, v = (t.view(b, s, HEADS, -1).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, s, HIDDEN))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class TinyGPT(nn.Module):
    def __init__(self, checkpointing: bool = False):
        super().__init__()
        self.checkpointing = checkpointing
        self.embed = nn.Embedding(VOCAB, HIDDEN)  # a lookup: no FLOPs
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(HIDDEN)
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            if self.checkpointing:  # run the block again in backward
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.head(self.norm(x))


# --8<-- [end:model]


# --8<-- [start:formulas]
def model_flops_per_token(params: int, layers: int, hidden: int, seq: int):
    """PaLM's count (appendix B): 2 FLOPs per matmul parameter forward,
    4 backward; attention's two s x d matmuls per layer, 4sd forward and
    8sd backward. params: the weights that multiply (not the embedding)."""
    return 6 * params + 12 * layers * hidden * seq


def hardware_flops_per_token(
    params: int, layers: int, hidden: int, seq: int, recomputed: int = 0
):
    """What the device runs: the model's FLOPs, the score matmul that
    flash attention's backward recomputes (2sd per layer) and, with every
    block checkpointed, the blocks' forward again (recomputed: their
    matmul parameters; 0 without checkpointing)."""
    flops = model_flops_per_token(params, layers, hidden, seq)
    flops += 2 * layers * hidden * seq
    if recomputed:
        flops += 2 * recomputed + 4 * layers * hidden * seq
    return flops


def tokens_per_second(tokens: int, step_seconds: float, devices: int):
    """Per device: the global batch's tokens over the step time."""
    return tokens / (step_seconds * devices)


def utilization(
    flops_per_token: int,
    tokens: int,
    step_seconds: float,
    devices: int,
    peak_flops: float,
):
    """MFU with model_flops_per_token, HFU with hardware_flops_per_token."""
    per_device = tokens_per_second(tokens, step_seconds, devices)
    return flops_per_token * per_device / peak_flops


# --8<-- [end:formulas]


# --8<-- [start:cpu_attention]
# torch before 2.15 counts no FLOPs for attention's CPU kernel (pytorch
# #195460): register the formulas the GPU kernels have. Shapes in.
def attention_flops(q, k, v, *args, out_shape=None, **kwargs) -> int:
    b, h, s_q, d = q
    return 2 * 2 * b * h * s_q * k[2] * d  # q @ k.T and scores @ v


def attention_backward_flops(dout, q, k, v, *args, out_shape=None, **kw):
    b, h, s_q, d = q
    # q @ k.T once more (flash attention saves no scores), then the
    # four matmuls that give the scores', v's, q's and k's gradients
    return 5 * 2 * b * h * s_q * k[2] * d


aten = torch.ops.aten
for op, formula in [
    (aten._scaled_dot_product_flash_attention_for_cpu, attention_flops),
    (
        aten._scaled_dot_product_flash_attention_for_cpu_backward,
        attention_backward_flops,
    ),
]:
    if op not in flop_counter.flop_registry:
        register_flop_formula(op)(formula)
# --8<-- [end:cpu_attention]


# --8<-- [start:count]
def count_step(checkpointing: bool) -> tuple[int, float]:
    """FLOPs of one training step as FlopCounterMode counts them, and the
    step's time (one step first, untimed, to warm up)."""
    torch.manual_seed(0)
    model = TinyGPT(checkpointing)
    ids = torch.randint(VOCAB, (BATCH, SEQ))

    def step():
        logits = model(ids[:, :-1])  # predict the next token
        loss = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
        loss.backward()

    with FlopCounterMode(display=False) as counter:
        step()
    start = time.perf_counter()
    for _ in range(5):
        step()
    return counter.get_total_flops(), (time.perf_counter() - start) / 5


# --8<-- [end:count]


def check_counts() -> dict:
    # --8<-- [start:check]
    model = TinyGPT()
    n = sum(m.weight.numel() for m in model.modules() if type(m) is nn.Linear)
    in_blocks = n - model.head.weight.numel()
    s = SEQ - 1  # tokens per sequence the model sees
    tokens = BATCH * s
    counted, seconds = count_step(checkpointing=False)
    hardware = hardware_flops_per_token(n, LAYERS, HIDDEN, s) * tokens
    assert counted == hardware, (counted, hardware)
    counted_ac, seconds_ac = count_step(checkpointing=True)
    # recomputation stops once backward has what it needs: a block's last
    # matmul (down) saves nothing, so it does not run again
    down = sum(b.down.weight.numel() for b in model.blocks)
    again = hardware_flops_per_token(n, LAYERS, HIDDEN, s, in_blocks - down)
    assert counted_ac == again * tokens, (counted_ac, again)
    # --8<-- [end:check]
    model_flops = model_flops_per_token(n, LAYERS, HIDDEN, s) * tokens
    print(f"TinyGPT: N = {n:,} matmul parameters, L = {LAYERS}, d = {HIDDEN},")
    print(f"s = {s}, {tokens} tokens a step. FLOPs per token:")
    print(f"model (6N + 12Lsd):         {model_flops // tokens:>9,}")
    print(f"counted, no checkpointing:  {counted // tokens:>9,} = 6N + 14Lsd")
    print(f"counted, blocks checkpointed: {counted_ac // tokens:>7,}", end="")
    print(" = 6N + 18Lsd + 2(N_blocks - N_down)")
    return {
        "no checkpointing": (model_flops, counted, seconds, tokens),
        "every block checkpointed": (
            model_flops,
            counted_ac,
            seconds_ac,
            tokens,
        ),
    }


def matmul_peak() -> float:
    """This CPU's FLOP/s on a large matmul: a stand-in for the peak that a
    GPU's datasheet gives."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    a @ b
    start = time.perf_counter()
    for _ in range(10):
        a @ b
    return 10 * 2 * 1024**3 / (time.perf_counter() - start)


def main() -> None:
    torch.set_num_threads(1)  # one core: steadier times on a shared CPU
    runs = check_counts()
    peak = matmul_peak()
    print(f"this CPU's matmul peak: {peak:.3g} FLOP/s")
    for name, (model_flops, counted, seconds, tokens) in runs.items():
        # --8<-- [start:mfu]
        tps = tokens_per_second(tokens, seconds, devices=1)
        mfu = utilization(model_flops // tokens, tokens, seconds, 1, peak)
        hfu = utilization(counted // tokens, tokens, seconds, 1, peak)
        # --8<-- [end:mfu]
        print(f"{name}: step {seconds * 1e3:.2f} ms, {tps:,.0f} tokens/s,")
        print(f"  MFU {mfu:.2%}, HFU {hfu:.2%}")
    # --8<-- [start:llama]
    # torchtitan's Llama 3.1 8B on 8 H100s, FSDP, sequences of 8192 tokens:
    # 5,762 tokens/s per GPU, 6,667 with torch.compile (see the page)
    n = 8_030_261_248 - 128_256 * 4_096  # all parameters but the embedding
    per_token = model_flops_per_token(n, 32, 4_096, 8_192)
    h100 = 989e12  # bf16 dense, H100 SXM
    for tps in (5_762, 6_667):
        mfu = utilization(per_token, tps, 1.0, 1, h100)
        print(f"Llama 3.1 8B, {tps:,} tokens/s per GPU: MFU {mfu:.1%}")
        assert 0.33 < mfu < 0.40, mfu  # the benchmark's "33% to 39%"
    # --8<-- [end:llama]


if __name__ == "__main__":
    main()
