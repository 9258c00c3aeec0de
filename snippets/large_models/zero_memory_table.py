"""Memory per rank of the training state under ZeRO-1/2/3
and their PyTorch counterparts, from the formulas."""

GB = 1e9  # the ZeRO paper's GB: 10^9 bytes


# --8<-- [start:paper]
def zero_paper(psi: float, n: int, k: int = 12) -> dict[str, float]:
    """Bytes per rank, ZeRO paper section 3.1 and Figure 1: 16-bit
    weights and gradients (2 + 2 bytes), K = 12 bytes of optimizer
    state (fp32 master weights, Adam's momentum and variance)."""
    return {
        "DDP": (2 + 2 + k) * psi,
        "ZeRO-1": 2 * psi + 2 * psi + k * psi / n,  # optimizer state sharded
        "ZeRO-2": 2 * psi + (2 + k) * psi / n,  # + gradients
        "ZeRO-3": (2 + 2 + k) * psi / n,  # + parameters
    }


# --8<-- [end:paper]


# --8<-- [start:pytorch]
def pytorch(psi: float, n: int, unit: float) -> dict[str, tuple[float, float]]:
    """(between steps, at the peak) per rank, activations not included:
    fp32 parameters are the master weights (4 B), fp32 gradients (4 B),
    Adam's two fp32 states (8 B); bf16 compute, so FSDP2 gathers 2-byte
    parameters (MixedPrecisionPolicy)."""
    sharded = (4 + 4 + 8) * psi / n
    # FSDP2's backward: one unit's unsharded bf16 gradients (2 B) and
    # its fp32 reduce-scatter input (4 B)
    backward = (2 + 4) * unit
    return {
        "DDP + autocast": ((4 + 4 + 8) * psi,) * 2,
        "ZeroRedundancyOptimizer + DDP": ((4 + 4) * psi + 8 * psi / n,) * 2,
        # every unit gathered
        "fully_shard(reshard_after_forward=False)": (
            sharded,
            sharded + 2 * psi + backward,
        ),
        # two units gathered: one computing, one prefetched
        "fully_shard()": (sharded, sharded + 2 * 2 * unit + backward),
    }


# --8<-- [end:pytorch]


# --8<-- [start:offload]
def offload(psi: float, n: int, unit: float) -> dict[str, float]:
    """fully_shard(offload_policy=CPUOffloadPolicy()): the
    fp32 shards live in host memory; each all-gather first
    copies the shard to the GPU (forward, and again in
    backward), each reduced gradient shard is copied back."""
    return {
        # the gathered bf16 units and the backward buffers
        "GPU": 2 * 2 * unit + (2 + 4) * unit,
        "host": (4 + 4 + 8) * psi / n,
        "to GPU": 2 * 4 * psi / n,
        "to host": 4 * psi / n,
    }


# --8<-- [end:offload]


def print_paper(psi: float, n: int, figure1: dict) -> None:
    print(
        "ZeRO paper (its Figure 1 reproduced: "
        f"{' / '.join(f'{v:g}' for v in figure1.values())} GB)"
    )
    formulas = ["(2+2+12)Ψ", "(2+2)Ψ + 12Ψ/N", "2Ψ + (2+12)Ψ/N", "(2+2+12)Ψ/N"]
    for (name, b), formula in zip(zero_paper(psi, n).items(), formulas):
        print(f"  {name:<8} {formula:<16} {b / GB:7.2f} GB")


def print_pytorch(psi: float, n: int, unit: float) -> None:
    print(
        f"{'PyTorch (bf16 compute, fp32 master weights)':<62}"
        f"{'between steps':>14}{'at the peak':>14}"
    )
    formulas = [
        "(4+4+8)Ψ",
        "(4+4)Ψ + 8Ψ/N",
        "(4+4+8)Ψ/N, + 2Ψ + 6U",
        "(4+4+8)Ψ/N, + 2·2U + 6U",
    ]
    for (name, (rest, peak)), formula in zip(
        pytorch(psi, n, unit).items(), formulas
    ):
        print(
            f"  {name:<40} {formula:<23} {rest / GB:6.2f} GB "
            f"{peak / GB:10.2f} GB"
        )
    print(
        f"  U = {unit / 1e6:g}M parameters per FSDP unit; 6U = "
        f"{6 * unit / GB:.2f} GB: FSDP2's backward buffers"
    )
    print(
        f"  DDP rows: + 4Ψ = {4 * psi / GB:.2f} GB of gradient buckets, "
        "unless DDP(..., gradient_as_bucket_view=True)"
    )
    print("  activations come on top of every row")


def print_offload(psi: float, n: int, unit: float) -> None:
    o = offload(psi, n, unit)
    print(
        "CPU offload, fully_shard(offload_policy=CPUOffloadPolicy()), per rank:"
    )
    print(
        f"  GPU 2·2U + 6U = {o['GPU'] / GB:.2f} GB, host memory (4+4+8)Ψ/N = "
        f"{o['host'] / GB:.2f} GB"
    )
    print(
        f"  PCIe each step: 2·4Ψ/N = {o['to GPU'] / GB:.2f} GB to the "
        f"GPU, 4Ψ/N = {o['to host'] / GB:.2f} GB back"
    )


def main() -> None:
    # Figure 1 of the paper: 7.5B parameters, N_d = 64, K = 12
    figure1 = {
        name: round(b / GB, 1) for name, b in zero_paper(7.5e9, 64).items()
    }
    assert figure1 == {
        "DDP": 120.0,
        "ZeRO-1": 31.4,
        "ZeRO-2": 16.6,
        "ZeRO-3": 1.9,
    }, figure1

    # a 7B model, 8 ranks, FSDP units of one Llama 2 7B block
    psi, n, unit = 7e9, 8, 202e6
    print(
        f"Adam, {psi / 1e9:g}B parameters, N = {n} ranks: bytes per "
        "rank, GB = 10^9 bytes"
    )
    print_paper(psi, n, figure1)
    print_pytorch(psi, n, unit)
    print_offload(psi, n, unit)
    zero3, fsdp = (
        zero_paper(psi, n)["ZeRO-3"],
        pytorch(psi, n, unit)["fully_shard()"][0],
    )
    assert fsdp == zero3, (
        "FSDP2 keeps ZeRO-3's 16 bytes per parameter, split N ways"
    )


if __name__ == "__main__":
    main()
