"""A CPU PyTorch program that counts what it does, for `--tracer torch`:

    llmperf profile --tracer torch [--annotate modules] -- python3 scripts/torch_trace_demo.py STEPS COUNTS.json

Each of the STEPS steps is a `step` record_function range around one forward
of `Net` (two `Block`s of Linear-ReLU-Linear, then a `head`) and an `extra`
range in which step i calls torch.mm and torch.add i + 1 times each. The
program counts its own ranges, operator calls and module calls (forward
hooks, not llmperf's bootstrap) and writes them to COUNTS.json: the oracle of
tests/torch.rs, which compares them with the regions llmperf made of the
trace torch.profiler wrote.
"""
import collections
import json
import sys

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(32, 16)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(16, 16)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def main():
    steps, out = int(sys.argv[1]), sys.argv[2]
    torch.manual_seed(0)
    net = Net()
    modules = collections.Counter()
    for name, module in net.named_modules():
        module.register_forward_hook(lambda m, i, o, name=name or type(net).__name__: modules.update([name]))
    ranges = collections.Counter()
    ops = collections.Counter()
    x, w = torch.randn(4, 16), torch.randn(16, 16)
    with torch.no_grad():
        for i in range(steps):
            with torch.profiler.record_function("step"):
                ranges["step"] += 1
                y = net(x)
                with torch.profiler.record_function("extra"):
                    ranges["step::extra"] += 1
                    for _ in range(i + 1):
                        y = torch.mm(y, w)
                        ops["step::extra::aten::mm"] += 1
                        y = torch.add(y, 1.0)
                        ops["step::extra::aten::add"] += 1
    with open(out, "w") as f:
        json.dump({"ranges": ranges, "ops": ops, "modules": modules}, f, indent=1)


if __name__ == "__main__":
    main()
