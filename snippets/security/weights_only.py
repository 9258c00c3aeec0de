"""torch.load(weights_only=True) refuses a checkpoint
that carries code; allowlist your own types explicitly."""
# launch: python snippets/security/weights_only.py

import dataclasses
import os
import pickle
import tempfile
from pathlib import Path

import torch
import torch.nn as nn


# --8<-- [start:payload]
class Payload:
    """Unpickling calls whatever __reduce__ returns:
    here a harmless os.mkdir, in an attack os.system."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (self.marker,)


# --8<-- [end:payload]


@dataclasses.dataclass
class RunConfig:
    lr: float
    steps: int


with tempfile.TemporaryDirectory() as tmp:
    # --8<-- [start:refuse]
    marker = Path(tmp, "payload-ran")
    torch.save(
        {"weight": torch.ones(2), "extra": Payload(str(marker))},
        Path(tmp, "trojan.pt"),
    )

    # inspect, runs nothing
    print(
        torch.serialization.get_unsafe_globals_in_checkpoint(
            Path(tmp, "trojan.pt")
        )
    )
    try:
        # the default since 2.6
        torch.load(Path(tmp, "trojan.pt"), weights_only=True)
        raise AssertionError(
            "weights_only=True loaded a checkpoint that calls os.mkdir"
        )
    except pickle.UnpicklingError as err:
        assert "unsupported GLOBAL posix.mkdir" in str(err), err
    assert not marker.exists(), "the payload ran"

    # NEVER on files you did not make
    torch.load(Path(tmp, "trojan.pt"), weights_only=False)
    assert marker.exists()
    print("weights_only=True refused the payload; weights_only=False ran it")
    # --8<-- [end:refuse]

    # --8<-- [start:normal]
    model = nn.Linear(3, 2)
    torch.save({"model": model.state_dict(), "step": 10}, Path(tmp, "ckpt.pt"))
    # tensors, dicts, numbers: fine
    state = torch.load(Path(tmp, "ckpt.pt"), weights_only=True)
    model.load_state_dict(state["model"])
    assert state["step"] == 10
    # --8<-- [end:normal]

    # --8<-- [start:allowlist]
    torch.save(
        {"model": model.state_dict(), "config": RunConfig(lr=0.1, steps=10)},
        Path(tmp, "cfg.pt"),
    )
    try:
        torch.load(Path(tmp, "cfg.pt"), weights_only=True)
        raise AssertionError("an unlisted class was loaded")
    except pickle.UnpicklingError as err:
        assert "add_safe_globals" in str(err), err  # the message names the fix
    # or add_safe_globals([RunConfig]) for the process
    with torch.serialization.safe_globals([RunConfig]):
        state = torch.load(Path(tmp, "cfg.pt"), weights_only=True)
    assert state["config"] == RunConfig(lr=0.1, steps=10)
    print("RunConfig loaded once allowlisted")
    # --8<-- [end:allowlist]
