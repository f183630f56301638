//! A decoder-only transformer in the GPT-2 layout: token and learned position
//! embeddings, pre-norm blocks of causal multi-head attention and an MLP, a
//! final norm, and an LM head tied to the token embedding. Weights are random
//! (normal, std 0.02) from a fixed seed. Generation keeps a real KV cache:
//! prefill runs the prompt once, each decode step runs one new token.
use tch::nn;
use tch::{Device, Kind, Tensor};

use super::instrument::Instrument;
use llmperf::config::schema::LlmConfig;
use llmperf::regions;

pub struct Llm {
    pub cfg: LlmConfig,
    wte: Tensor,
    wpe: Tensor,
    layers: Vec<Layer>,
    ln_f: nn::LayerNorm,
}

struct Layer {
    ln1: nn::LayerNorm,
    qkv: nn::Linear,
    proj: nn::Linear,
    ln2: nn::LayerNorm,
    fc1: nn::Linear,
    fc2: nn::Linear,
}

/// Keys and values of every past token, per layer: `[batch, heads, past, head_dim]`.
#[derive(Default)]
pub struct KvCache {
    k: Vec<Tensor>,
    v: Vec<Tensor>,
}

impl KvCache {
    pub fn len(&self) -> i64 {
        self.k.first().map_or(0, |k| k.size()[2])
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn dense(p: nn::Path, d_in: i64, d_out: i64) -> nn::Linear {
    let config = nn::LinearConfig {
        ws_init: nn::Init::Randn { mean: 0.0, stdev: 0.02 },
        bs_init: Some(nn::Init::Const(0.0)),
        bias: true,
    };
    nn::linear(p, d_in, d_out, config)
}

fn norm(p: nn::Path, d: i64) -> nn::LayerNorm {
    nn::layer_norm(p, vec![d], Default::default())
}

impl Llm {
    pub fn new(root: &nn::Path, cfg: &LlmConfig) -> Llm {
        let d = cfg.d_model;
        let init = nn::Init::Randn { mean: 0.0, stdev: 0.02 };
        let layers = (0..cfg.n_layers)
            .map(|i| {
                let p = root / format!("h{i}");
                Layer {
                    ln1: norm(&p / "ln1", d),
                    qkv: dense(&p / "qkv", d, 3 * d),
                    proj: dense(&p / "proj", d, d),
                    ln2: norm(&p / "ln2", d),
                    fc1: dense(&p / "fc1", d, cfg.d_ff),
                    fc2: dense(&p / "fc2", cfg.d_ff, d),
                }
            })
            .collect();
        Llm {
            cfg: cfg.clone(),
            wte: root.var("wte", &[cfg.vocab_size, d], init),
            wpe: root.var("wpe", &[cfg.max_seq_len, d], init),
            layers,
            ln_f: norm(root / "ln_f", d),
        }
    }

    /// Logits `[batch, T, vocab]` for `tokens` `[batch, T]` following the cached
    /// tokens; appends the new keys and values to `cache`.
    pub fn forward(&self, tokens: &Tensor, cache: &mut KvCache, ins: &Instrument) -> Tensor {
        let past = cache.len();
        let t = tokens.size()[1];
        let positions = Tensor::arange_start(past, past + t, (Kind::Int64, tokens.device()));
        let mut x = Tensor::embedding(&self.wte, tokens, -1, false, false) + self.wpe.index_select(0, &positions);
        let fresh = cache.is_empty();
        for (i, layer) in self.layers.iter().enumerate() {
            x = ins.region(&regions::layer(i), || {
                let a = ins.region(regions::ATTN, || self.attention(layer, &x.apply(&layer.ln1), cache, i, fresh));
                let x = x + a;
                let m =
                    ins.region(regions::MLP, || x.apply(&layer.ln2).apply(&layer.fc1).gelu("none").apply(&layer.fc2));
                x + m
            });
        }
        ins.region(regions::LM_HEAD, || x.apply(&self.ln_f).matmul(&self.wte.tr()))
    }

    fn attention(&self, layer: &Layer, h: &Tensor, cache: &mut KvCache, i: usize, fresh: bool) -> Tensor {
        let (b, t, d) = h.size3().expect("[batch, T, d]");
        let heads = self.cfg.n_heads;
        let hd = d / heads;
        let split = |x: &Tensor| x.view([b, t, heads, hd]).transpose(1, 2);
        let qkv = h.apply(&layer.qkv).chunk(3, -1);
        let (q, k, v) = (split(&qkv[0]), split(&qkv[1]), split(&qkv[2]));
        let (k, v) =
            if fresh { (k, v) } else { (Tensor::cat(&[&cache.k[i], &k], 2), Tensor::cat(&[&cache.v[i], &v], 2)) };
        let past = k.size()[2] - t;
        let mut scores = q.matmul(&k.transpose(-2, -1)) / (hd as f64).sqrt();
        if t > 1 {
            // Query i (absolute position past+i) may not see keys after it.
            let mask = Tensor::ones([t, past + t], (Kind::Bool, h.device())).triu(past + 1);
            scores = scores.masked_fill(&mask, f64::NEG_INFINITY);
        }
        let out = scores.softmax(-1, scores.kind()).matmul(&v).transpose(1, 2).contiguous().view([b, t, d]);
        if fresh {
            cache.k.push(k);
            cache.v.push(v);
        } else {
            cache.k[i] = k;
            cache.v[i] = v;
        }
        out.apply(&layer.proj)
    }

    /// Prefill `prompt`, then greedily decode `new_tokens` tokens one at a time
    /// with the cache. Returns the generated tokens `[batch, new_tokens]`.
    pub fn generate(&self, prompt: &Tensor, new_tokens: i64, ins: &Instrument) -> Tensor {
        let mut cache = KvCache::default();
        let mut next = ins.region(regions::PREFILL, || greedy(&self.forward(prompt, &mut cache, ins)));
        let mut out = vec![next.shallow_clone()];
        ins.region(regions::DECODE_ALL, || {
            for _ in 1..new_tokens {
                next = ins.region(regions::DECODE_STEP, || greedy(&self.forward(&next, &mut cache, ins)));
                out.push(next.shallow_clone());
            }
        });
        Tensor::cat(&out, 1)
    }
}

/// The most likely next token of each sequence, `[batch, 1]`.
fn greedy(logits: &Tensor) -> Tensor {
    logits.select(1, -1).argmax(-1, true)
}

/// Random prompt tokens `[batch, len]`.
pub fn prompt(cfg: &LlmConfig, batch: i64, len: i64, device: Device) -> Tensor {
    Tensor::randint(cfg.vocab_size, [batch, len], (Kind::Int64, device))
}
