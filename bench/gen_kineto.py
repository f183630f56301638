#!/usr/bin/env python3
"""A large PyTorch profiler trace made from the shape of a real one, for
bench/torch_import.sh: the events of SRC (a corpus trace) repeated COPIES
times, each copy shifted past the one before in time and given fresh
correlation and External ids, written one event at a time (the generator's
memory is SRC's). Prints the ground truth as JSON: kernels and their summed
dur (µs, exact), which llmperf's output must equal before its time counts.

    python3 bench/gen_kineto.py SRC OUT COPIES
"""
import decimal
import gzip
import json
import re
import sys

ID_STEP = 10**8


def main(src, out, copies):
    with (gzip.open if src.endswith(".gz") else open)(src, "rt") as f:
        doc = json.load(f, parse_float=decimal.Decimal)
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, decimal.Decimal))]
    start = min(decimal.Decimal(e["ts"]) for e in timed)
    end = max(decimal.Decimal(e["ts"]) + decimal.Decimal(e.get("dur", 0)) for e in timed)
    period = (end - start) + 1000
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel")]
    head = {k: v for k, v in doc.items() if k != "traceEvents"}

    def text(o):
        # Decimals as their own digits: marked, dumped, unquoted.
        def mark(v):
            if isinstance(v, decimal.Decimal):
                return "\u0001" + str(v) + "\u0001"
            if isinstance(v, dict):
                return {k: mark(x) for k, x in v.items()}
            if isinstance(v, list):
                return [mark(x) for x in v]
            return v

        return re.sub(r'"\\u0001([^"\\]*)\\u0001"', r"\1", json.dumps(mark(o)))

    with open(out, "w") as f:
        f.write(text(head)[:-1] + ', "traceEvents": [')
        first = True
        for c in range(copies):
            shift = period * c
            for e in events:
                e = dict(e)
                if isinstance(e.get("ts"), (int, decimal.Decimal)):
                    e["ts"] = decimal.Decimal(e["ts"]) + shift
                args = e.get("args")
                if isinstance(args, dict):
                    args = dict(args)
                    for key in ("correlation", "External id", "external id"):
                        if isinstance(args.get(key), int):
                            args[key] += c * ID_STEP
                    e["args"] = args
                if e.get("ph") in ("s", "f") and isinstance(e.get("id"), int):
                    e["id"] += c * ID_STEP
                f.write(("" if first else ", ") + text(e))
                first = False
        f.write("]}\n")
    total = sum(decimal.Decimal(k["dur"]) for k in kernels) * copies
    print(json.dumps({"kernels": len(kernels) * copies, "kernel_dur_us": str(total)}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
