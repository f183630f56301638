#!/usr/bin/env python3
"""A tiny randomly initialised Llama in a local folder, for `llmperf serve`'s
tests and demos on a CPU (no Hub, no network).

    python scripts/serve/tiny_llama.py OUT [--layers N] [--seed S]

The tokenizer is a word-level one: every whitespace-separated word is one
token (an unknown word is [UNK], still one token), so a prompt of N words is
N prompt tokens, exactly. head_dim is 32: vLLM's CPU attention needs at
least that (a 64-wide model with 4 heads answers HTTP 500 while /health is
green). Needs transformers and tokenizers (both in .venv-vllm).
"""
import argparse
import json
import os

WORDS = (
    "the of and to in is was for on that with as by at from his her it an were are which this be or has had "
    "not but one their they new first also after two who been its more other when time into some all there "
    "would only over many later most may three such these year can about made city then state out where part "
    "up during world between years under united known than both used while school being through number since "
    "national people before well each four however including well war same through around second last high "
    "model token layer head cache step batch prefill decode kernel stream device memory request server engine"
).split()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()

    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    special = ["[UNK]", "<s>", "</s>", "[PAD]"]
    vocab = {w: i for i, w in enumerate(special + sorted(set(WORDS)))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", bos_token="<s>", eos_token="</s>", pad_token="[PAD]"
    )
    fast.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    os.makedirs(a.out, exist_ok=True)
    fast.save_pretrained(a.out)

    torch.manual_seed(a.seed)
    cfg = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=a.layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=32,
        max_position_embeddings=2048,
        bos_token_id=vocab["<s>"],
        eos_token_id=vocab["</s>"],
        pad_token_id=vocab["[PAD]"],
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(a.out)
    print(json.dumps({"model": a.out, "layers": a.layers, "vocab": len(vocab)}))


if __name__ == "__main__":
    main()
