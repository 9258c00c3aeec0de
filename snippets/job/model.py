"""A Llama-style decoder, written out: RMSNorm, rotary positions, grouped-
query attention, a SwiGLU MLP. Its parameter names are Hugging Face Llama's,
so a safetensors file of either loads into the other as it is. Run alone, it
checks the document mask: a packed row gives each document the logits it
gets alone."""
# launch: python snippets/job/model.py
# output-varies: max \|diff\| = (\S+)

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


# --8<-- [start:args]
@dataclass
class ModelArgs:
    """The model's shape, under the names of a Hugging Face
    Llama config.json, so that one reads into the other."""

    vocab_size: int = 258  # 256 bytes, then <bos> and <eos>
    hidden_size: int = 64
    intermediate_size: int = 192
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2  # 2 query heads share a key/value head
    rope_theta: float = 500_000.0
    rms_norm_eps: float = 1e-5
    max_position_embeddings: int = 64

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


# --8<-- [end:args]


# --8<-- [start:layers]
class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # in float32 whatever the compute dtype, as Llama does
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rotary(
    positions: torch.Tensor, args: ModelArgs
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of each position's angles, (batch, seq, head_dim).
    Computed from the positions, not stored: no buffer to restore
    after building on the meta device."""
    dim = args.head_dim
    exponent = torch.arange(0, dim, 2, device=positions.device) / dim
    inv_freq = 1.0 / args.rope_theta**exponent
    angles = positions[..., None].float() * inv_freq
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """Rotate pairs (i, i + head_dim/2) by their angle."""
    half = x.shape[-1] // 2
    turned = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + turned * sin


# --8<-- [end:layers]


# --8<-- [start:attention]
class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        dim, head = args.hidden_size, args.head_dim
        heads = args.num_attention_heads * head
        kv = args.num_key_value_heads * head
        self.head_dim = head
        self.q_proj = nn.Linear(dim, heads, bias=False)
        self.k_proj = nn.Linear(dim, kv, bias=False)
        self.v_proj = nn.Linear(dim, kv, bias=False)
        self.o_proj = nn.Linear(heads, dim, bias=False)

    def forward(self, x, cos, sin, mask) -> torch.Tensor:
        b, s, _ = x.shape
        # -1 heads: under tensor parallelism, this rank's heads only
        q, k, v = (
            proj(x).view(b, s, -1, self.head_dim).transpose(1, 2)
            for proj in (self.q_proj, self.k_proj, self.v_proj)
        )
        cos, sin = cos[:, None].to(q.dtype), sin[:, None].to(q.dtype)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        # grouped-query: each key/value head serves several query heads
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, enable_gqa=True
        )
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        dim, hidden = args.hidden_size, args.intermediate_size
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        eps = args.rms_norm_eps
        self.input_layernorm = RMSNorm(args.hidden_size, eps)
        self.self_attn = Attention(args)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, eps)
        self.mlp = MLP(args)

    def forward(self, x, cos, sin, mask) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


# --8<-- [end:attention]


# --8<-- [start:model]
def document_mask(positions: torch.Tensor) -> torch.Tensor:
    """(batch, 1, seq, seq), True where a token may attend: to
    itself and earlier tokens of its own document. A document
    starts where its position restarts at 0."""
    document = (positions == 0).cumsum(-1)
    same = document[:, :, None] == document[:, None, :]
    return (same & (positions[:, :, None] >= positions[:, None, :]))[:, None]


class Decoder(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        blocks = (Block(args) for _ in range(args.num_hidden_layers))
        self.layers = nn.ModuleList(blocks)
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)


class Transformer(nn.Module):
    """Names as in transformers' LlamaForCausalLM:
    model.layers.0.self_attn.q_proj.weight, ..., lm_head.weight."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.model = Decoder(args)
        self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)

    def forward(
        self, tokens: torch.Tensor, positions: torch.Tensor
    ) -> torch.Tensor:
        cos, sin = rotary(positions, self.args)
        mask = document_mask(positions)
        x = self.model.embed_tokens(tokens)
        for block in self.model.layers:
            x = block(x, cos, sin, mask)
        return self.lm_head(self.model.norm(x))


# --8<-- [end:model]


# --8<-- [start:check]
def main() -> None:
    args = ModelArgs()
    with torch.device("meta"):  # shapes only: no memory, no init
        shapes = Transformer(args)
    count = sum(p.numel() for p in shapes.parameters())
    torch.manual_seed(0)
    model = Transformer(args)
    # two documents packed into one row of 12 tokens
    docs = [torch.randint(256, (n,)) for n in (5, 7)]
    packed = torch.cat(docs)[None]
    positions = torch.cat([torch.arange(len(d)) for d in docs])[None]
    with torch.no_grad():
        together = model(packed, positions)[0]
        alone = [model(d[None], torch.arange(len(d))[None])[0] for d in docs]
    diff = (together - torch.cat(alone)).abs().max().item()
    # the same products, in a mask of another size: rounding at most
    assert diff < 1e-5, f"documents leak into each other: {diff}"
    print(f"{count:,} parameters; {len(shapes.state_dict())} tensors")
    print(f"packed row vs each document alone: max |diff| = {diff:.1e}")


if __name__ == "__main__":
    main()
# --8<-- [end:check]
