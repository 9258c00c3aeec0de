"""A rank killed by signal 9 (the kernel's OOM killer does
this): what torchrun reports, and where to look next."""
# launch: python snippets/debugging/rank_killed.py
# ranks: 2
# output-varies: ^\s+(?:time|host)\s+: (.*)$
# output-varies: \(pid: (\d+)\)
# output-varies: received by PID (\d+)

import os
import re
import signal
import subprocess
import sys
import time

# started by torchrun below: the "training" ranks
if os.environ.get("LOCAL_RANK") is not None:
    if os.environ["RANK"] == "1":
        # no Python traceback, no exception: the process just ends
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # rank 0 would wait for rank 1 in its next collective
    sys.exit(0)

# --8<-- [start:report]
launch = [
    sys.executable,
    "-m",
    "torch.distributed.run",
    "--standalone",
    "--nproc-per-node=2",
    __file__,
]
done = subprocess.run(launch, capture_output=True, text=True, timeout=120)
report = done.stderr[done.stderr.index("Root Cause") :]
print("\n".join(report.splitlines()[:8]))
assert done.returncode != 0
assert re.search(r"rank\s+: 1 \(local_rank: 1\)", report) and re.search(
    r"exitcode\s+: -9 ", report
)
assert "Signal 9 (SIGKILL) received by PID" in report
# --8<-- [end:report]
