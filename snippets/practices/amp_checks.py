"""Why fp16 needs a GradScaler and bf16 does
not, and which AMP spellings are deprecated."""
# launch: python snippets/practices/amp_checks.py

import warnings

import torch

# --8<-- [start:ranges]
fp16, bf16 = torch.finfo(torch.float16), torch.finfo(torch.bfloat16)
# bf16 keeps fp32's 8 exponent bits
assert fp16.max == 65504.0 and bf16.max > 3e38
# ... and pays with precision: 8 vs 11 significant bits
assert bf16.eps > fp16.eps

small_grad = torch.tensor(1e-8)  # a typical tiny gradient value
assert small_grad.half() == 0  # fp16 flushes it to zero: the update is lost
assert small_grad.bfloat16() != 0  # bf16 still represents it
# what GradScaler does: scale the loss, so gradients stay representable
assert (small_grad * 65536).half() != 0
# too large a scale overflows: GradScaler then skips the step
assert torch.tensor(70000.0).half().isinf()
# --8<-- [end:ranges]

# --8<-- [start:deprecated]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    torch.cuda.amp.autocast()  # old spelling, as in the article
    torch.cuda.amp.GradScaler()
deprecated = [
    str(w.message) for w in caught if issubclass(w.category, FutureWarning)
]
assert len(deprecated) == 2, deprecated
assert "torch.amp.autocast('cuda', args...)" in deprecated[0]
assert "torch.amp.GradScaler('cuda', args...)" in deprecated[1]

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    # current spelling: device type first
    torch.amp.autocast("cpu", dtype=torch.bfloat16)
    torch.amp.GradScaler("cpu")
assert not [w for w in caught if issubclass(w.category, FutureWarning)]
# --8<-- [end:deprecated]

print(
    "fp16 max",
    fp16.max,
    "| bf16 max",
    f"{bf16.max:.3g}",
    "| torch.cuda.amp.* raise FutureWarning",
)
