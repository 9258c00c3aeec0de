"""Sequence packing: documents of different lengths concatenated into full
rows, with attention masked per document and positions restarting at each
document, compute what each document computes alone."""
# launch: python snippets/scaling/packing.py
# output-varies: largest difference (\S+)

import torch
import torch.nn as nn
import torch.nn.functional as F

IGNORE = -100  # the label cross_entropy skips


# --8<-- [start:model]
class TinyLM(nn.Module):
    """Learned positions, causal attention with an optional mask, an MLP."""

    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(128, dim)  # indexed by position id
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
        )
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens, positions, mask=None):
        """tokens, positions: (batch, t); mask: (batch, t, t), True where
        a query may attend to a key; None: plain causal attention."""
        b, t = tokens.shape
        x = self.embed(tokens) + self.pos(positions)
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, -1).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        if mask is None:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # the mask already holds the causal part
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, -1))
        return self.head(x + self.mlp(x))


# --8<-- [end:model]


# --8<-- [start:pack]
def pack(docs: list[torch.Tensor], row: int) -> dict[str, torch.Tensor]:
    """Fill rows of `row` tokens with whole documents, in order; a document
    that does not fit starts the next row; the rest of a row is padding.

    Per token: the document it belongs to (-1: padding), its position in
    that document, and its label: the next token of the same document, or
    IGNORE at a document's last token and on padding."""
    rows, current = [], []
    for doc in docs:
        if sum(len(d) for d in current) + len(doc) > row:
            rows.append(current)
            current = []
        current.append(doc)
    rows.append(current)
    fields = {k: [] for k in ("tokens", "labels", "positions", "doc")}
    for documents in rows:
        tokens, labels, positions, doc = [], [], [], []
        for i, d in enumerate(documents):
            tokens += d.tolist()
            labels += d[1:].tolist() + [IGNORE]  # no label across documents
            positions += range(len(d))  # restart at 0 for each document
            doc += [i] * len(d)
        pad = row - len(tokens)
        values = (tokens + [0] * pad, labels + [IGNORE] * pad,
                  positions + [0] * pad, doc + [-1] * pad)  # fmt: skip
        for key, value in zip(fields, values):
            fields[key].append(value)
    return {k: torch.tensor(v) for k, v in fields.items()}


def document_mask(doc: torch.Tensor) -> torch.Tensor:
    """(rows, t, t): attend only to earlier tokens of the same document.
    Padding attends to padding, so that no row of the mask is empty."""
    t = doc.shape[-1]
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    same_doc = doc[:, :, None] == doc[:, None, :]
    return causal & same_doc


# --8<-- [end:pack]


# --8<-- [start:loss]
def packed_loss(model, batch, mask):
    logits = model(batch["tokens"], batch["positions"], mask)
    labels = batch["labels"]
    # mean over real labels: padding and document ends are IGNORE
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten()), logits


def unpacked_loss(model, docs):
    """Each document alone, one at a time: the reference."""
    total, count, logits = 0.0, 0, []
    for d in docs:
        out = model(d[None], torch.arange(len(d))[None])[0]
        total = total + F.cross_entropy(out[:-1], d[1:], reduction="sum")
        count += len(d) - 1
        logits.append(out)
    return total / count, logits


# --8<-- [end:loss]


def unpack(logits: torch.Tensor, doc: torch.Tensor) -> list[torch.Tensor]:
    """Each document's rows of the packed logits, in document order."""
    out = []
    for r in range(len(doc)):
        for i in range(int(doc[r].max()) + 1):
            out.append(logits[r][doc[r] == i])
    return out


def grads(model: nn.Module, loss: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad()
    loss.backward()
    return [p.grad.clone() for p in model.parameters()]


def largest(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a, b))


def main() -> None:
    torch.manual_seed(0)
    lengths = torch.randint(3, 40, (12,)).tolist()
    docs = [torch.randint(64, (n,)) for n in lengths]
    model = TinyLM()

    # --8<-- [start:compare]
    batch = pack(docs, row=64)
    mask = document_mask(batch["doc"])
    loss, logits = packed_loss(model, batch, mask)
    reference, reference_logits = unpacked_loss(model, docs)
    # --8<-- [end:compare]
    forward = largest(unpack(logits, batch["doc"]), reference_logits)
    assert forward < 1e-5, f"packed forward differs: {forward:.1e}"
    assert abs(loss.item() - reference.item()) < 1e-6, "the same loss"
    backward = largest(grads(model, loss), grads(model, reference))
    assert backward < 1e-5, f"packed gradients differ: {backward:.1e}"

    # the same rows with plain causal attention and positions 0..t-1
    plain = dict(
        batch, positions=torch.arange(64).expand(len(batch["doc"]), 64)
    )
    wrong, _ = packed_loss(model, plain, mask=None)
    assert abs(wrong.item() - reference.item()) > 1e-3, "the masks matter"

    real = int((batch["doc"] >= 0).sum())
    print(f"{len(docs)} documents of {min(lengths)} to {max(lengths)} tokens")
    print(
        f"packed into {len(batch['doc'])} rows of 64: {real} tokens, "
        f"{batch['doc'].numel() - real} padding"
    )
    print(
        f"document mask + restarted positions: loss {loss.item():.6f}, "
        f"unpacked {reference.item():.6f}"
    )
    print(
        f"  forward and gradients: largest difference "
        f"{max(forward, backward):.1e}"
    )
    print(f"plain causal mask, positions 0..63: loss {wrong.item():.6f}")


if __name__ == "__main__":
    main()
