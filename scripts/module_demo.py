"""A plain PyTorch program without a single NVTX range, for `--annotate modules`:

    llmperf profile --annotate modules --no-ncu -- python3 scripts/module_demo.py [STEPS] [WIDTH]

`Net` holds two `Block`s (`attn`, a Linear; `mlp`, Linear-ReLU-Linear) and a
`head`; each of the STEPS forwards (default 3) calls every module once, on a
batch of 8 rows of WIDTH features (default 16). It prints the seconds the
forwards took (bench/annotate_overhead.sh).
"""
import sys
import time

import torch
from torch import nn

WIDTH = int(sys.argv[2]) if len(sys.argv) > 2 else 16


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.Linear(WIDTH, WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.ReLU(), nn.Linear(2 * WIDTH, WIDTH))
    def forward(self, x):
        return x + self.mlp(self.attn(x))

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(WIDTH, 4)
    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)

torch.manual_seed(0)
net = Net()
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
x = torch.randn(8, WIDTH)
with torch.no_grad():
    start = time.perf_counter()
    for _ in range(steps):
        net(x)
    took = time.perf_counter() - start
print("module_demo: %d forwards of width %d in %.6f s" % (steps, WIDTH, took))
