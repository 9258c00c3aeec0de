"""The proofs beside train.py, each an assert, on CPU with gloo:
(a) 4 ranks on a 2 x 2 mesh train the loss curve of 1 process;
(b) a rank killed mid-run, then the same command again: the final
    weights equal an uninterrupted run's, bit for bit;
(c) 2 ranks resume from a checkpoint that 4 ranks wrote;
(d) the exported safetensors load into transformers' LlamaForCausalLM
    and give the logits of the program's own model."""
# launch: python snippets/job/train_check.py
# ranks: 4
# timeout: 900
# output-varies: (\d\.\d{6})
# output-varies: loss (\S+) \(bound
# output-varies: norm (\S+) \(bound

import os

# float32 on CPU with gloo on any machine, GPUs or not: the bounds
# below are float32's, and bit-exact runs need the same kernels
os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before torch is imported

import contextlib
import io
import json
import math
import shutil
import socket
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import train  # the template beside this file
from model import ModelArgs, Transformer
from safetensors.torch import load_file

HERE = Path(__file__).resolve().parent
STEPS = 20
RESUME_AT = 16  # (b), (c): 2 ranks start from the 4 ranks' checkpoint
KILL_AT = 19  # (b): rank 1 dies before this step, after step 18's save
U = 2.0**-24  # float32: each rounding within this share of the value


# --8<-- [start:run]
# the environment as it was, for the jobs started below: the
# one-process run in this process sets variables of its own
ENV = dict(os.environ)


def flags(out: Path, *more: str) -> list[str]:
    """The flags every run here shares, then its own."""
    return [
        f"--out={out}", f"--data={out.parent / 'corpus'}",
        f"--init-from={out.parent / 'seed'}", f"--steps={STEPS}", *more,
    ]  # fmt: skip


def torchrun(ranks: int, program: str, out: Path, *more: str, **env):
    """One job as a reader starts it; its exit code and its output."""
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc-per-node={ranks}", str(HERE / program), *flags(out, *more),
    ]  # fmt: skip
    done = subprocess.run(
        cmd, env=ENV | env, capture_output=True, text=True, timeout=600
    )
    return done.returncode, done.stdout + done.stderr


def one_process(out: Path, *more: str) -> None:
    """train.py's main() right here, as a job of one rank: the
    same program, without starting another Python."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # a free port for its process group
        port = s.getsockname()[1]
    os.environ.update(
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
    )  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()):  # its step log
        train.main(flags(out, *more))


def ok(result: tuple[int, str]) -> str:
    code, output = result
    assert code == 0, f"exit code {code}:\n{output[-3000:]}"
    return output


def metrics(out: Path) -> dict[int, dict]:
    """What rank 0 logged, unrounded: step -> loss, grad_norm, ..."""
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return {m["step"]: m for m in map(json.loads, lines)}


def weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(out / "export" / "model.safetensors")


# --8<-- [end:run]


# --8<-- [start:bound]
def bound(n: int) -> float:
    """Two runs add the same n float32 terms in other orders. Rounding
    errors of random sign add up like a random walk, to about sqrt(n) u
    (Higham and Mary, 2019); the worst case is n u. Allow ten times
    the random walk."""
    return 10 * math.sqrt(n) * U


def compare(a: dict, b: dict, steps: range, n_params: int) -> str:
    """The largest relative difference of the losses (a sum over the
    step's tokens) and of the gradient norms (a sum over parameters)."""
    worst = {"loss": 0.0, "grad_norm": 0.0}
    for step in steps:
        for key in worst:
            diff = abs(a[step][key] - b[step][key]) / abs(a[step][key])
            worst[key] = max(worst[key], diff)
    tokens = train.Config.global_batch * train.Config.seq_len
    limits = {"loss": bound(tokens), "grad_norm": bound(n_params)}
    for key in worst:
        assert worst[key] <= limits[key], f"{key}: {worst[key]:.1e}"
    return (
        f"loss {worst['loss']:.1e} (bound {limits['loss']:.1e}), gradient "
        f"norm {worst['grad_norm']:.1e} (bound {limits['grad_norm']:.1e})"
    )


# --8<-- [end:bound]


# --8<-- [start:curve]
def same_curve(tmp: Path) -> None:
    """(a) The same global batch of 8 sequences: 1 process in one
    forward, and 4 ranks in 2 micro-batches of 2 each."""
    with ThreadPoolExecutor() as pool:
        four = pool.submit(torchrun, 4, "train.py", tmp / "four", "--tp=2")
        one_process(tmp / "one", "--micro-batch=8")
        ok(four.result())
    a, b = metrics(tmp / "one"), metrics(tmp / "four")
    n_params = sum(t.numel() for t in weights(tmp / "four").values())
    result = compare(a, b, range(1, STEPS + 1), n_params)
    print("(a) loss, 1 process and 4 ranks (dp 2 x tp 2):")
    for step in (1, 5, 10, 15, 20):
        print(
            f"    step {step:2d}: {a[step]['loss']:.6f} {b[step]['loss']:.6f}"
        )
    print(f"    largest relative difference: {result}")


# --8<-- [end:curve]


# --8<-- [start:restart]
def killed_and_resharded(tmp: Path) -> None:
    """(b) and (c): two 2-rank jobs start from the 4 ranks' checkpoint
    of step 16. One runs to the end; in the other, rank 1 is killed."""
    saved = tmp / "four" / "checkpoints" / f"step-{RESUME_AT:06d}"
    for name in ("two", "killed"):
        shutil.copytree(saved, tmp / name / "checkpoints" / saved.name)
    flags = ("--micro-batch=4", "--ckpt-every=2")
    with ThreadPoolExecutor() as pool:
        two = pool.submit(torchrun, 2, "train.py", tmp / "two", *flags)
        killed = pool.submit(
            torchrun, 2, "_kill_rank.py", tmp / "killed", *flags,
            KILL_AT=str(KILL_AT),
        )  # fmt: skip
        ok(two.result())
        code, _ = killed.result()
    records = sorted(p.name for p in (tmp / "killed/flight_records").iterdir())
    # the same command again, in the killed job's folder
    again = ok(torchrun(2, "train.py", tmp / "killed", *flags))
    assert code != 0 and records == ["rank_0"], (code, records)
    assert f"starting after step {KILL_AT - 1}" in again, again[-2000:]
    uninterrupted, resumed = weights(tmp / "two"), weights(tmp / "killed")
    assert uninterrupted.keys() == resumed.keys()
    for name, tensor in uninterrupted.items():
        assert torch.equal(tensor, resumed[name]), f"{name} differs"
    print(
        f"(b) rank 1 killed before step {KILL_AT}: exit code {code}, flight "
        f"record of rank 0 written; the same command again started after "
        f"step {KILL_AT - 1}; final weights == the uninterrupted run's, "
        f"bit for bit ({len(resumed)} tensors)"
    )
    a, b = metrics(tmp / "four"), metrics(tmp / "two")
    steps = range(RESUME_AT + 1, STEPS + 1)
    n_params = sum(t.numel() for t in resumed.values())
    print(
        f"(c) 2 ranks (dp 2) from the 4 ranks' step {RESUME_AT}, steps "
        f"{steps[0]}-{steps[-1]}: {compare(a, b, steps, n_params)}"
    )


# --8<-- [end:restart]


# --8<-- [start:transformers]
def same_logits(tmp: Path) -> None:
    """(d) The 4 ranks' export, in transformers and in model.py."""
    from transformers import LlamaForCausalLM  # test-only dependency

    folder = tmp / "four" / "export"
    theirs = LlamaForCausalLM.from_pretrained(folder).eval()
    ours = Transformer(train.read_config(folder))
    ours.load_state_dict(weights(tmp / "four"))
    tokens = train.pack(tmp / "corpus", 63)[:1]  # the corpus's first row
    with torch.no_grad():
        expected = theirs(tokens).logits  # positions 0-63, causal
        got = ours(tokens, torch.arange(64)[None])
    diff = (expected - got).abs().max().item()
    # the same operations in the same order: equal to the last bit
    assert torch.equal(expected, got), diff
    print(
        f"(d) LlamaForCausalLM.from_pretrained(export): logits "
        f"{tuple(got.shape)} == model.py's, bit for bit"
    )


# --8<-- [end:transformers]


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        # a snapshot: the pages may change while the runs read them
        shutil.copytree(train.Config.data, tmp / "corpus")
        # where every run starts, as from a downloaded model
        args = ModelArgs()
        train.save_hf(train.init_weights(args, seed=0), args, tmp / "seed")
        same_curve(tmp)
        killed_and_resharded(tmp)
        same_logits(tmp)


if __name__ == "__main__":
    main()
