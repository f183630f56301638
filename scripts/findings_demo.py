"""Two workloads built to be slow for one known reason each, for the findings
("What to fix first") of a capture made here, on CPU:

    llmperf profile --annotate ops --no-ncu -- python3 scripts/findings_demo.py launch|sync [STEPS]

`launch`: each of STEPS forwards of `Tiny` runs OPS (200) elementwise ops on
an 8-element tensor: thousands of operator calls of a few microseconds, each
of which on a GPU would be one short kernel launch (launch-bound).
`sync`: each forward of `Filter` asks SYNCS (8) times for the rows of a
1M-element tensor above a threshold (`nonzero`, whose output is sized by the
data) and for a count (`.item()`): on a GPU each drains the queue (sync stall).
Both are plain PyTorch without an NVTX range: `--annotate ops` adds the module
ranges (domain llmperf.modules) and the operator ranges. It prints the counts
the test checks the findings against.
"""
import sys

import torch
from torch import nn

OPS = 200
SYNCS = 8


class Tiny(nn.Module):
    def forward(self, x):
        for _ in range(OPS // 2):
            x = x * 1.0001
            x = x + 0.0001
        return x


class Filter(nn.Module):
    def forward(self, x):
        total = 0
        for i in range(SYNCS):
            rows = torch.nonzero(x > i / SYNCS)
            total += int(rows.shape[0]) + int(x[0].item() > 0)
        return total


mode = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
torch.manual_seed(0)
with torch.no_grad():
    if mode == "launch":
        net, x = Tiny(), torch.randn(8)
        for _ in range(steps):
            net(x)
        print("findings_demo: launch: %d forwards of %d ops" % (steps, OPS))
    elif mode == "sync":
        net, x = Filter(), torch.rand(1 << 20)
        for _ in range(steps):
            net(x)
        print("findings_demo: sync: %d forwards of %d nonzero and %d item" % (steps, SYNCS, SYNCS))
    else:
        sys.exit("usage: findings_demo.py launch|sync [STEPS]")
