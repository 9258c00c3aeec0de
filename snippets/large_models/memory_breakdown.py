"""Where one training step's memory goes: parameters, gradients, Adam's state
and the activations saved for backward, each measured beside its formula."""
# launch: python snippets/large_models/memory_breakdown.py

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


# --8<-- [start:model]
class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then a GELU MLP."""

    def __init__(self, hidden: int, heads: int, dropout: float = 0.0):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)
        # one per branch; p=0: saves nothing
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        qkv = self.qkv(x).view(b, t, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # 3 × (b, heads, t, d/heads)
        # flash-style kernels keep no t × t matrix for backward
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(out.transpose(1, 2).reshape(b, t, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop1(self.attention(self.ln1(x)))
        return x + self.drop2(self.fc2(F.gelu(self.fc1(self.ln2(x)))))


class TinyLM(nn.Module):
    def __init__(self, vocab, hidden, heads, layers, dropout=0.0, ckpt=False):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        blocks = [Block(hidden, heads, dropout) for _ in range(layers)]
        self.blocks = nn.ModuleList(blocks)
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)
        self.ckpt = ckpt  # activation checkpointing of every block

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            if self.ckpt:  # keep only the block's input
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.head(self.norm(x))


# --8<-- [end:model]


# --8<-- [start:count]
class SavedBytes(torch.autograd.graph.saved_tensors_hooks):
    """Counts the bytes autograd keeps for backward inside a `with` block.

    Each storage counts once (a tensor and its views share one), parameters
    not at all: they are counted as weights.
    """

    def __init__(self):
        self.storages = {}  # data pointer -> bytes
        super().__init__(self.pack, lambda tensor: tensor)

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        # _base: the tensor a view was taken from
        base = tensor if tensor._base is None else tensor._base
        # a weight, or its transpose as nn.Linear saves it, is no activation
        if not isinstance(base, nn.Parameter):
            storage = tensor.untyped_storage()
            self.storages[storage.data_ptr()] = storage.nbytes()
        return tensor  # autograd keeps the tensor as always: we only look

    def __enter__(self) -> "SavedBytes":
        super().__enter__()
        return self

    @property
    def total(self) -> int:
        return sum(self.storages.values())


# --8<-- [end:count]


# --8<-- [start:formula]
def parameter_count(vocab: int, hidden: int, layers: int) -> int:
    """Embedding and head: V·d each; a block: 12·d² + 13·d; last norm: 2·d."""
    d = hidden
    return 2 * vocab * d + layers * (12 * d * d + 13 * d) + 2 * d


def activation_bytes(
    tokens, hidden, heads, layers, vocab,
    residual=4, compute=4, stats=4, mask=0, checkpointing=False,
):  # fmt: skip
    """Bytes one forward of TinyLM saves for backward (derived on the page).

    Bytes per element: residual, of the residual stream (what the LayerNorms
    save); compute, of what the matmuls, attention and GELU save; stats, of
    LayerNorm's mean and rstd; mask, of a dropout mask (0: no dropout).
    """
    d, n = hidden, tokens
    per_token = (2 * residual + 14 * compute + 2 * mask) * d
    block = n * (per_token + 4 * stats + 4 * heads)
    if checkpointing:  # only the block's input; backward recomputes the rest
        block = n * residual * d
    # last norm (input, mean, rstd), the head's input, the fp32 log-softmax
    top = n * (residual * d + 2 * stats + compute * d + 4 * vocab)
    # int64 token ids and targets, the loss's weight sum
    return layers * block + top + 2 * 8 * n + 4


# --8<-- [end:formula]


def storage_bytes(tensors) -> int:
    storages = {t.untyped_storage().data_ptr(): t for t in tensors}
    return sum(t.untyped_storage().nbytes() for t in storages.values())


def saved_by_forward(model, ids, targets, autocast=None) -> SavedBytes:
    on = autocast is not None
    amp = torch.autocast(ids.device.type, dtype=autocast, enabled=on)
    with amp, SavedBytes() as saved:
        logits = model(ids).flatten(0, 1).float()  # the loss in fp32
        loss = F.cross_entropy(logits, targets.flatten())
    del loss  # the graph goes, and with it what it saved
    return saved


VOCAB, HIDDEN, HEADS, LAYERS = 256, 64, 4, 4
SHAPE = (VOCAB, HIDDEN, HEADS, LAYERS)


def measure_step(ids: torch.Tensor, targets: torch.Tensor) -> dict:
    """Two training steps; the second one measured: what its forward saves,
    and, on a GPU, what the CUDA caching allocator holds after each phase."""
    cuda = ids.is_cuda
    allocated = torch.cuda.memory_allocated if cuda else (lambda: 0)

    def cross_entropy(logits):
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    # --8<-- [start:step]
    start = allocated()
    with torch.device(ids.device):
        model = TinyLM(*SHAPE)
    params_alloc = allocated() - start
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    # a first step: on a GPU it also allocates cuBLAS's workspace
    cross_entropy(model(ids)).backward()
    before = allocated()
    optimizer.step()  # the first step creates Adam's state
    state_alloc = allocated() - before
    optimizer.zero_grad(set_to_none=True)  # frees the gradients

    # the measured step: what forward saves, what backward leaves, the peak
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    before = allocated()
    with SavedBytes() as saved:
        loss = cross_entropy(model(ids))
    forward_alloc = allocated() - before  # the saved tensors and the loss
    loss.backward()  # frees the saved tensors, makes the gradients
    del loss
    grads_alloc = allocated() - before
    optimizer.step()
    peak = torch.cuda.max_memory_allocated() if cuda else 0
    # --8<-- [end:step]
    return dict(
        model=model, optimizer=optimizer, saved=saved, peak=peak,
        params_alloc=params_alloc, state_alloc=state_alloc,
        forward_alloc=forward_alloc, grads_alloc=grads_alloc,
    )  # fmt: skip


def training_state(model: TinyLM, optimizer) -> list[tuple[str, int, int]]:
    """Parameters, gradients and Adam's state: (name, formula, measured)."""
    params = storage_bytes(model.parameters())
    grads = storage_bytes(p.grad for p in model.parameters())
    states = optimizer.state.values()
    state = storage_bytes(t for s in states for t in s.values())
    n_params = sum(p.numel() for p in model.parameters())
    n_tensors = len(list(model.parameters()))
    assert n_params == parameter_count(VOCAB, HIDDEN, LAYERS)
    assert params == grads == 4 * n_params, "fp32: 4 bytes each"
    # exp_avg, exp_avg_sq, and a 4-byte `step` per tensor
    adam = 2 * 4 * n_params + 4 * n_tensors
    assert state == adam, (state, adam)
    return [
        ("parameters (P × 4 B)", 4 * n_params, params),
        ("gradients (P × 4 B)", 4 * n_params, grads),
        ("Adam state (2 × P × 4 B + 4 B × tensors)", adam, state),
    ]


def activation_rows(model, ids, targets) -> list[tuple[str, int, int]]:
    """The forward pass in five settings, each measured against
    activation_bytes(): (name, formula, measured)."""
    device, cuda = ids.device, ids.is_cuda
    # --8<-- [start:variants]
    bf16_model = TinyLM(*SHAPE).to(device, torch.bfloat16)
    dropout_model = TinyLM(*SHAPE, dropout=0.1).to(device)
    checkpointed = TinyLM(*SHAPE, ckpt=True).to(device)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    matmul_weights = sum(m.weight.numel() for m in linears)
    fp32 = dict(residual=4, compute=4)
    # LayerNorm's mean and rstd: fp32 on CUDA, the input's dtype on CPU
    bf16 = dict(residual=2, compute=2, stats=4 if cuda else 2)
    # dropout saves a bool mask on CUDA (1 B); on CPU, the scaled noise
    # in the input's dtype (4 B here)
    dropout = dict(fp32, mask=1 if cuda else 4)
    # (name, model, autocast dtype, formula arguments, bytes not in formula)
    variants = [
        ("fp32", model, None, fp32, 0),
        ("bf16 autocast", model, torch.bfloat16, dict(residual=4, compute=2),
         2 * matmul_weights),  # autocast's bf16 copies of the weights
        ("pure bf16", bf16_model, None, bf16, 0),
        ("fp32, dropout 0.1", dropout_model, None, dropout, 0),
        ("fp32, checkpointing", checkpointed, None,
         dict(fp32, checkpointing=True), 0),
    ]  # fmt: skip
    # --8<-- [end:variants]
    # CUDA's attention kernels also save their RNG seed and offset
    tolerance = 0.0 if device.type == "cpu" else 0.005
    rows = []
    for name, net, autocast, kwargs, extra in variants:
        measured = saved_by_forward(net, ids, targets, autocast).total
        formula = activation_bytes(ids.numel(), *SHAPE[1:], VOCAB, **kwargs)
        predicted = formula + extra
        assert abs(measured - predicted) <= tolerance * predicted, name
        rows.append((f"activations, {name}", predicted, measured))
    return rows


def allocator_table(step: dict, ids, targets) -> None:
    """On a GPU: what torch.cuda.memory_allocated saw, beside the bytes
    counted. The allocator rounds each block up to 512 bytes; Adam's `step`
    counters stay on the CPU; the inputs were allocated before the forward."""
    print("CUDA caching allocator (torch.cuda.memory_allocated):")
    model, saved = step["model"], step["saved"]
    params = storage_bytes(model.parameters())
    grads = storage_bytes(p.grad for p in model.parameters())
    n_tensors = len(list(model.parameters()))
    inputs = ids.nbytes + targets.nbytes
    for name, value, exact, blocks in [
        ("parameters", step["params_alloc"], params, n_tensors),
        ("Adam state", step["state_alloc"], 2 * params, 2 * n_tensors),
        ("after forward: activations + loss", step["forward_alloc"],
         saved.total - inputs, len(saved.storages) + 1),
        ("after backward: gradients", step["grads_alloc"], grads, n_tensors),
    ]:  # fmt: skip
        assert abs(value - exact) <= 0.02 * exact + 512 * blocks, name
        print(f"{name:44}{exact:>12,}{value:>12,}")
    resting = step["params_alloc"] + step["state_alloc"]
    assert step["peak"] >= resting + max(
        step["forward_alloc"], step["grads_alloc"]
    )
    print(f"{'peak of the step (max_memory_allocated)':56}{step['peak']:>12,}")


def main() -> None:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    batch, seq = 4, 64
    torch.manual_seed(0)
    ids = torch.randint(VOCAB, (batch, seq), device=device)
    targets = torch.randint(VOCAB, (batch, seq), device=device)

    step = measure_step(ids, targets)
    model = step["model"]
    rows = training_state(model, step["optimizer"])
    activations = activation_rows(model, ids, targets)
    assert activations[0][2] == step["saved"].total, "the same forward"
    rows += activations

    n_params = sum(p.numel() for p in model.parameters())
    n_tensors = len(list(model.parameters()))
    print(f"TinyLM: V={VOCAB}, d={HIDDEN}, h={HEADS}, L={LAYERS}; ", end="")
    print(f"P={n_params:,} parameters in {n_tensors} tensors")
    print(f"one micro-batch: {batch} sequences × {seq} tokens, n={ids.numel()}")
    print(f"{'':44}{'predicted':>12}{'measured':>12}")
    for name, predicted, measured in rows:
        print(f"{name:44}{predicted:>12,}{measured:>12,}")
    fp32, ckpt = rows[3][2], rows[-1][2]
    print(
        f"checkpointing every block: {fp32 / ckpt:.1f}× fewer activation bytes"
    )
    if device.type == "cuda":
        allocator_table(step, ids, targets)


if __name__ == "__main__":
    main()
