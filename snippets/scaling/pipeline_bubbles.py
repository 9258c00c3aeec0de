"""Each rank's order of work under four pipeline schedule classes on 4
ranks, drawn as a timeline; the bubble it leaves equals the papers'."""
# launch: python snippets/scaling/pipeline_bubbles.py
# output-excerpt: zb1p ^ZB1P[,:]
# output-excerpt: zbv ^ZBV[,:]
# output-excerpt: dualpipev ^DualPipeV[,:]
# output-excerpt: summary ^(schedule|  [0-9A-Z])

import re
from fractions import Fraction

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.pipelining import (
    PipelineStage,
    ScheduleDualPipeV,
    ScheduleInterleaved1F1B,
    ScheduleInterleavedZeroBubble,
    ScheduleZBVZeroBubble,
)

# internal to PyTorch: see the page
from torch.testing._internal.distributed.fake_pg import FakeStore

P, M = 4, 8  # ranks, micro-batches: the papers draw 4 ranks
# time of each action on one stage: forward, backward for the input,
# backward for the weights, and the whole backward (I + W)
COST = {"F": 1, "I": 1, "W": 1, "B": 2}


# --8<-- [start:orders]
def loop(rank: int, v: int) -> list[int]:
    return [rank + k * P for k in range(v)]  # rank 0: 0, 4 | rank 1: 1, 5


def vee(rank: int, v: int) -> list[int]:
    return [rank, 2 * P - 1 - rank]  # rank 0: 0, 7 | rank 1: 1, 6


def order(schedule_class, layout, v: int) -> dict[int, list]:
    """Every rank's list of actions, as the schedule will run them. Each
    rank computes all ranks' lists, so rank 0's object shows them all."""
    stages = [
        PipelineStage(nn.Linear(1, 1), i, P * v, torch.device("cpu"))
        for i in layout(0, v)
    ]
    schedule = schedule_class(stages, n_microbatches=M, loss_fn=nn.MSELoss())
    return schedule.pipeline_order  # rank -> ["0F0", "4F0", ..., None]


# --8<-- [end:orders]


def compute(actions: list) -> list[tuple[int, str, int]]:
    """(stage, F/I/W/B, micro-batch) of each compute action, in order; an
    overlapped pair (DualPipeV) counts as its two parts."""
    out = []
    for action in actions:
        if action is None:
            continue  # a placeholder, skipped when the schedule runs
        for part in getattr(action, "sub_actions", None) or [action]:
            m = re.fullmatch(r"(\d+)([FIWB])(\d+)", repr(part))
            if m:  # sends, receives and reductions take no time here
                out.append((int(m[1]), m[2], int(m[3])))
    return out


# --8<-- [start:timeline]
def needs(stage: int, kind: str, mb: int, stages: int) -> list:
    """What an action waits for: the forward of the stage before, the
    backward (I or B) of the stage after, W its own I."""
    if kind == "F":
        return [(stage - 1, "F", mb)] if stage else []
    if kind == "W":
        return [(stage, "I", mb)]
    after = [] if stage == stages - 1 else [(stage + 1, "IB", mb)]
    return [(stage, "F", mb), *after]


def timeline(plan: dict[int, list], stages: int) -> dict[int, list]:
    """Start time of every action: each rank runs its list in order, an
    action starts when the rank is free and what it needs is done."""
    done, free, out = {}, dict.fromkeys(plan, 0), {r: [] for r in plan}
    pending = {r: list(actions) for r, actions in plan.items()}
    while any(pending.values()):
        moved = False
        for r, actions in pending.items():
            while actions:
                stage, kind, mb = actions[0]
                ends = []
                for s, k, i in needs(stage, kind, mb, stages):
                    ends.append(done.get((s, k[0], i), done.get((s, k[-1], i))))
                if None in ends:
                    break  # waits for another rank
                start = max([free[r], *ends])
                free[r] = done[(stage, kind, mb)] = start + COST[kind]
                out[r].append((start, stage, kind, mb))
                actions.pop(0)
                moved = True
        assert moved, "the order deadlocks"
    return out


# --8<-- [end:timeline]


def draw(name: str, times: dict[int, list], v: int) -> None:
    """One column per time unit: the action's kind (lower case on the
    rank's second stage), and below it the micro-batch."""
    end = max(t + COST[k] for acts in times.values() for t, _, k, _ in acts)
    print(f"{name}, {v} stage{'s' * (v > 1)} per rank, {M} micro-batches:")
    for r, acts in times.items():
        kinds, mbs = ["."] * end, [" "] * end
        for start, stage, kind, mb in acts:
            second = stage >= P  # loop: P.. ; V: P.. is the way back up
            for t in range(start, start + COST[kind]):
                kinds[t] = kind.lower() if second else kind
                mbs[t] = str(mb)
        print(f"rank {r}  {''.join(kinds)}")
        print(f"        {''.join(mbs)}")


# --8<-- [start:bubble]
def bubble(times: dict[int, list]) -> tuple[int, int, int]:
    """Work per rank, the longest span of one rank (first start to last
    end: the step time when nothing syncs the ranks between steps), and
    the whole step (when something does, e.g. clipping's all-reduce)."""
    works = {sum(COST[k] for _, _, k, _ in a) for a in times.values()}
    assert len(works) == 1, "every rank does the same work"
    span = max(a[-1][0] + COST[a[-1][2]] - a[0][0] for a in times.values())
    whole = max(a[-1][0] + COST[a[-1][2]] for a in times.values())
    return works.pop(), span, whole


# the idle share of a step, with T_F = T_I = T_W = 1 and T_B = 2
def one_f_one_b(p: int, m: int, v: int) -> Fraction:
    return Fraction(p - 1, v * m + p - 1)  # (p-1)(T_F+T_B) of 3vm + that


def zb1p(p: int, m: int, v: int) -> Fraction:
    return Fraction(p - 1, 3 * v * m + p - 1)  # (p-1)(T_F+T_I-T_W)


def zero(p: int, m: int, v: int) -> Fraction:
    return Fraction(0)


SCHEDULES = [  # name, class, layout, stages per rank, formula
    ("1F1B interleaved", ScheduleInterleaved1F1B, loop, 2, one_f_one_b),
    ("ZB1P", ScheduleInterleavedZeroBubble, loop, 1, zb1p),
    ("ZB1P interleaved", ScheduleInterleavedZeroBubble, loop, 2, zb1p),
    ("ZBV", ScheduleZBVZeroBubble, vee, 2, zero),
    ("DualPipeV", ScheduleDualPipeV, vee, 2, None),  # see the page
]
# --8<-- [end:bubble]


def main() -> None:
    # --8<-- [start:fake]
    # one process plays rank 0 of 4; no collective runs here
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=P)
    # --8<-- [end:fake]
    rows = []
    try:
        for name, schedule_class, layout, v, formula in SCHEDULES:
            plan = {
                r: compute(a)
                for r, a in order(schedule_class, layout, v).items()
            }
            # --8<-- [start:count]
            times = timeline(plan, P * v)
            draw(name, times, v)
            work, span, whole = bubble(times)
            idle = Fraction(span - work, span)
            if formula is not None:
                assert idle == formula(P, M, v), (name, idle)
            # --8<-- [end:count]
            print(f"{name}: work {work}, longest span {span}, bubble {idle}")
            rows.append((name, v, work, span, idle, whole))
    finally:
        dist.destroy_process_group()
    print("schedule           v  work  span  bubble  step  bubble")
    for name, v, work, span, idle, whole in rows:
        synced = Fraction(whole - work, whole)
        print(f"  {name:<16}{v:>2}{work:>6}{span:>6}{idle!s:>8}", end="")
        print(f"{whole:>6}{synced!s:>8}")


if __name__ == "__main__":
    main()
