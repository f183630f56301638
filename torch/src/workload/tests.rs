//! The models themselves, in-process: the KV cache, determinism, parameter
//! counts. (The workloads through the executable: tests/workload.rs.)
use llmperf::config::schema::{LlmConfig, ModelConfig};
use llmperf::config::{load, LoadOptions};
use tch::{nn, Device, Kind, Tensor};

use super::llm::{KvCache, Llm};
use super::Instrument;

fn llm_config(model: &str) -> LlmConfig {
    let opts = LoadOptions { overrides: vec![format!("model={model}")], ..Default::default() };
    match load(&opts).unwrap().config.model {
        ModelConfig::DecoderLlm(c) => c,
        other => panic!("{other:?}"),
    }
}

/// libtorch's default random generator is process-wide and tests run in
/// parallel threads: every test that seeds it holds this lock.
static TORCH_RNG: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn rng_lock() -> std::sync::MutexGuard<'static, ()> {
    TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner())
}

fn tiny(seed: i64) -> (nn::VarStore, Llm) {
    tch::manual_seed(seed);
    let vs = nn::VarStore::new(Device::Cpu);
    let model = Llm::new(&vs.root(), &llm_config("llm_tiny"));
    (vs, model)
}

fn quiet() -> Instrument {
    Instrument::new(false, None, Device::Cpu)
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

/// Proof that the LLM is real: decoding one token at a time with the KV cache
/// gives the same next-token logits as recomputing the whole sequence.
#[test]
fn kv_cache_decode_matches_full_recompute() {
    let _rng = rng_lock();
    let _g = tch::no_grad_guard();
    let (_vs, model) = tiny(0);
    let ins = quiet();
    tch::manual_seed(1);
    let mut seq = Tensor::randint(256, [2, 10], (Kind::Int64, Device::Cpu));
    let mut cache = KvCache::default();
    let mut logits = model.forward(&seq, &mut cache, &ins);
    assert_eq!(logits.size(), [2, 10, 256]);
    for step in 0..6 {
        let next = logits.select(1, -1).argmax(-1, true);
        seq = Tensor::cat(&[&seq, &next], 1);
        logits = model.forward(&next, &mut cache, &ins);
        assert_eq!(logits.size(), [2, 1, 256]);
        assert_eq!(cache.len(), 11 + step);
        let full = model.forward(&seq, &mut KvCache::default(), &ins);
        let diff = max_abs_diff(&logits.select(1, 0), &full.select(1, -1));
        assert!(diff < 1e-4, "step {step}: cached and full logits differ by {diff}");
    }
}

/// Sensitivity check: without the cache, a single token does not reproduce the logits.
#[test]
fn dropping_the_cache_changes_the_logits() {
    let _rng = rng_lock();
    let _g = tch::no_grad_guard();
    let (_vs, model) = tiny(0);
    let ins = quiet();
    let seq = Tensor::randint(256, [1, 8], (Kind::Int64, Device::Cpu));
    let full = model.forward(&seq, &mut KvCache::default(), &ins).select(1, -1);
    let last = seq.narrow(1, 7, 1);
    let alone = model.forward(&last, &mut KvCache::default(), &ins).select(1, -1);
    assert!(max_abs_diff(&full, &alone) > 1e-3);
}

#[test]
fn same_seed_same_generation_other_seed_differs() {
    let _rng = rng_lock();
    let _g = tch::no_grad_guard();
    let generate = |seed| {
        let (_vs, model) = tiny(seed);
        tch::manual_seed(7);
        let prompt = Tensor::randint(256, [2, 6], (Kind::Int64, Device::Cpu));
        let out = model.generate(&prompt, 5, &quiet());
        assert_eq!(out.size(), [2, 5]);
        Vec::<i64>::try_from(out.flatten(0, -1)).unwrap()
    };
    assert_eq!(generate(0), generate(0));
    let (_vs0, m0) = tiny(0);
    let (_vs1, m1) = tiny(1);
    let x = Tensor::randint(256, [1, 4], (Kind::Int64, Device::Cpu));
    let ins = quiet();
    let (a, b) = (m0.forward(&x, &mut KvCache::default(), &ins), m1.forward(&x, &mut KvCache::default(), &ins));
    assert!(max_abs_diff(&a, &b) > 1e-3, "different seeds gave the same weights");
}

/// The parameter count libtorch reports equals the architecture's, and the
/// FLOPs in timings.json are computed from it (2N + 4Lcd per token).
#[test]
fn parameter_count_and_flops_follow_the_architecture() {
    let _rng = rng_lock();
    for model in ["llm_tiny", "gpt2_small"] {
        let c = llm_config(model);
        let (v, d, l, f, s) = (c.vocab_size, c.d_model, c.n_layers, c.d_ff, c.max_seq_len);
        let per_layer = 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + 2 * d + (d * f + f) + (f * d + d);
        let expected = v * d + s * d + l * per_layer + 2 * d;
        tch::manual_seed(0);
        let vs = nn::VarStore::new(Device::Cpu);
        let _m = Llm::new(&vs.root(), &c);
        let counted: i64 = vs.trainable_variables().iter().map(|t| t.numel() as i64).sum();
        assert_eq!(counted, expected, "{model}");
        if model == "gpt2_small" {
            assert_eq!(counted, 124_439_808, "GPT-2 small with a tied LM head");
        }
    }
}
