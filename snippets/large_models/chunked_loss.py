"""Cross-entropy over a large vocabulary, chunk by chunk: what the loss
saves for backward falls by the number of chunks, and the gradients stay
those of the loss over the full logits."""
# launch: python snippets/large_models/chunked_loss.py
# output-varies: largest difference (\S+) of

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F


# same as snippets/large_models/memory_breakdown.py:SavedBytes
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


# --8<-- [start:model]
class Body(nn.Module):
    """Everything below the output layer: tokens -> hidden states."""

    def __init__(self, vocab: int, dim: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU())
        self.out = nn.Linear(4 * dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        return self.norm(h + self.out(self.mlp(h)))


# --8<-- [end:model]


# --8<-- [start:full]
def full_loss(hidden, head, targets):
    """The usual loss: all n × V logits at once, log-softmax in fp32."""
    return F.cross_entropy(head(hidden).float(), targets)


# --8<-- [end:full]


# --8<-- [start:chunked]
def chunk_loss(hidden, head, targets, tokens):
    """One chunk's share of the mean loss over all `tokens`."""
    logits = head(hidden).float()  # (chunk, V): one chunk's logits only
    return F.cross_entropy(logits, targets, reduction="sum") / tokens


def chunked_loss_backward(hidden, head, targets, chunks):
    """Backward of the mean loss, one chunk at a time; returns the loss.

    Each chunk's backward frees its logits before the next chunk makes its
    own; the gradients of the hidden states are collected, then sent back
    through the model below the head in one backward pass.
    """
    pieces = [c.detach().requires_grad_() for c in hidden.chunk(chunks)]
    total = torch.zeros((), device=hidden.device)
    for piece, target in zip(pieces, targets.chunk(chunks)):
        loss = chunk_loss(piece, head, target, len(targets))
        loss.backward()  # head.weight.grad accumulates; piece.grad is set
        total += loss.detach()  # no .item(): no wait for the device
    hidden.backward(torch.cat([p.grad for p in pieces]))
    return total


# --8<-- [end:chunked]


# --8<-- [start:formula]
def log_softmax_bytes(tokens: int, vocab: int, chunks: int = 1) -> int:
    """What cross_entropy saves of the logits: its fp32 log-softmax."""
    return tokens // chunks * vocab * 4


# --8<-- [end:formula]


def grad_error(a: list[nn.Parameter], b: list[nn.Parameter]) -> float:
    """Largest gradient difference, relative to the largest gradient."""
    diff = max((p.grad - q.grad).abs().max().item() for p, q in zip(a, b))
    return diff / max(p.grad.abs().max().item() for p in b)


def main() -> None:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    vocab, dim, tokens, chunks = 8192, 64, 512, 8
    torch.manual_seed(0)
    body = Body(vocab, dim).to(device)
    head = nn.Linear(dim, vocab, bias=False).to(device)
    tokens_in = torch.randint(vocab, (tokens,), device=device)
    targets = torch.randint(vocab, (tokens,), device=device)
    full_body, full_head = copy.deepcopy(body), copy.deepcopy(head)

    # --8<-- [start:measure]
    hidden = full_body(tokens_in)
    with SavedBytes() as full:  # the loss's graph over all tokens
        loss = full_loss(hidden, full_head, targets)
    loss.backward()

    hidden = body(tokens_in)
    piece = hidden.detach()[: tokens // chunks].requires_grad_()
    with SavedBytes() as one_chunk:  # the loss's graph over one chunk
        chunk_loss(piece, head, targets[: tokens // chunks], tokens)
    # --8<-- [end:measure]
    chunked = chunked_loss_backward(hidden, head, targets, chunks).item()

    # below the loss, both graphs save the same: the head's input, the
    # targets (int64) and cross_entropy's 4-byte weight sum
    hidden_bytes = hidden.untyped_storage().nbytes()
    rest = hidden_bytes + targets.nbytes + 4
    assert full.total == log_softmax_bytes(tokens, vocab) + rest
    assert one_chunk.total == log_softmax_bytes(tokens, vocab, chunks) + rest
    saving = full.total - one_chunk.total
    assert saving == tokens * vocab * 4 * (chunks - 1) // chunks, saving
    error = grad_error(
        [*body.parameters(), *head.parameters()],
        [*full_body.parameters(), *full_head.parameters()],
    )
    assert error < 1e-5, f"chunked gradients differ: {error:.1e}"
    assert abs(chunked - loss.item()) < 1e-5 * loss.item(), "the same loss"

    print(f"n={tokens} tokens, V={vocab}, d={dim}, {chunks} chunks")
    print("saved for backward by the output layer and the loss:")
    print(f"  all logits at once        {full.total:>12,} B")
    print(f"  one chunk at a time       {one_chunk.total:>12,} B")
    print(f"  saving: n × V × 4 B × (1 - 1/{chunks}) = {saving:,} B")
    print(f"loss {loss.item():.6f} (full) and {chunked:.6f} (chunked)")
    print(f"gradients: largest difference {error:.1e} of the largest")
    # Llama 3's vocabulary, one micro-batch of 4096 tokens
    n, v = 4096, 128_256
    print(
        f"n={n}, V={v:,}: log-softmax {log_softmax_bytes(n, v) / 1e9:.2f} GB"
        f" at once, {log_softmax_bytes(n, v, chunks) / 1e9:.2f} GB a chunk"
    )


if __name__ == "__main__":
    main()
