"""A copy of a PyTorch profiler trace cut to what Holistic Trace Analysis's
temporal breakdown counts, so that llmperf and HTA are handed the same GPU
work (tests/torch.rs; docs/internals.md, "Torch traces beside HTA"):

- HTA counts every event with an `args.stream` as GPU time, `cuda_sync`
  included (the host waiting, which llmperf does not count as GPU work):
  they are left out of the copy.
- With two ProfilerStep names or more, HTA keeps only the GPU events launched
  (by correlation id) from a CPU event that starts before the last step
  starts: the copy keeps those only.

    python hta_window.py TRACE OUT.json

Python's json module only; numbers keep their text (Decimal).
"""
import decimal
import gzip
import json
import re
import sys


def main(src, out):
    opener = gzip.open if src.endswith(".gz") else open
    with opener(src, "rt") as f:
        doc = json.load(f, parse_float=decimal.Decimal)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc

    def on_gpu(e):
        return isinstance(e.get("args"), dict) and "stream" in e["args"]

    kept = [e for e in events if not (e.get("ph") == "X" and e.get("cat") == "cuda_sync")]
    steps = [e for e in kept if e.get("ph") == "X" and not on_gpu(e) and "ProfilerStep" in str(e.get("name"))]
    if len({e["name"] for e in steps}) >= 2:
        last = max(decimal.Decimal(e["ts"]) for e in steps)
        launched = {
            e["args"]["correlation"]
            for e in kept
            if e.get("ph") == "X" and not on_gpu(e) and isinstance(e.get("args"), dict)
            and "correlation" in e["args"] and decimal.Decimal(e["ts"]) < last
        }
        kept = [e for e in kept if not (e.get("ph") == "X" and on_gpu(e)) or e["args"].get("correlation") in launched]
    if isinstance(doc, dict):
        doc["traceEvents"] = kept
    else:
        doc = kept

    # A Decimal is written as its own text (a float would lose a 17-digit
    # ts): marked as a string, then unquoted.
    def mark(o):
        if isinstance(o, decimal.Decimal):
            return "\u0001" + str(o) + "\u0001"
        if isinstance(o, dict):
            return {k: mark(v) for k, v in o.items()}
        if isinstance(o, list):
            return [mark(v) for v in o]
        return o

    text = json.dumps(mark(doc))
    text = re.sub(r'"\\u0001([^"\\]*)\\u0001"', r"\1", text)
    with open(out, "w") as f:
        f.write(text)

if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
