//! Analytic work of the built-in workloads, for MFU and MBU (docs/workloads.md).
//!
//! Decoder LLM, per token at context length `c` (the tokens it attends to,
//! itself included), with N the parameter count libtorch reports:
//!
//!   FLOPs(c) = 2·N + 4·L·c·d
//!
//! 2·N counts a multiply and an add per weight (the tied LM head is one of
//! them; embedding lookups and norms are counted as if they were matmuls,
//! an overestimate under 1% for GPT-2 shapes). 4·L·c·d is attention:
//! Q·Kᵀ and P·V, 2·c·d each, in every layer. Prefill sums FLOPs(t) over prompt
//! positions t = 1..P; a decode step after s generated tokens has c = P+s+1.

/// FLOPs of a prefill of `prompt` tokens for `batch` sequences.
pub(crate) fn llm_prefill(params: i64, layers: i64, d_model: i64, batch: i64, prompt: i64) -> f64 {
    let (n, l, d, b, p) = (params as f64, layers as f64, d_model as f64, batch as f64, prompt as f64);
    b * (2.0 * n * p + 4.0 * l * d * p * (p + 1.0) / 2.0)
}

/// FLOPs of one decode step at context `context` (past tokens + the new one).
pub(crate) fn llm_decode_step(params: i64, layers: i64, d_model: i64, batch: i64, context: i64) -> f64 {
    let (n, l, d, b, c) = (params as f64, layers as f64, d_model as f64, batch as f64, context as f64);
    b * (2.0 * n + 4.0 * l * c * d)
}

/// Bytes one decode step reads: every weight once, plus the K and V cache of
/// the `past` tokens of each sequence in every layer.
pub(crate) fn llm_decode_step_bytes(
    params: i64,
    layers: i64,
    d_model: i64,
    batch: i64,
    past: i64,
    elem: i64,
) -> (f64, f64) {
    let weights = (params * elem) as f64;
    let kv = (2 * layers * batch * past * d_model * elem) as f64;
    (weights, kv)
}

/// `timings.flops.formula` of a [`Decoder`].
pub(crate) const DECODER_FORMULA: &str = "FLOPs per token at context c = 2*P + 4*L*c*H*hd (P = matmul weights a token meets: Q, K, V, O, the MLP or the router and the top-k experts' MLPs, the LM head; embeddings, norms and biases left out; L = layers, H = query heads, hd = head size); prefill sums over prompt positions; decode_step is the mean over the steps";

/// `timings.decode_bytes.formula` of a [`Decoder`].
pub(crate) const DECODER_BYTES_FORMULA: &str = "per decode step: every matmul weight once (with experts, at most min(experts, batch*top_k) experts per layer: an upper bound, routing decides) + K and V of all past tokens (2*L*batch*past*KV*hd x element size, KV = key/value heads)";

/// A decoder layer's MLP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mlp {
    /// SwiGLU (Llama, Mistral, Qwen2, Mixtral's experts): gate, up and down projections.
    Gated,
    /// GPT-2: up and down projections.
    Plain,
}

/// A decoder-only transformer's shape, for its analytic work: grouped-query
/// attention (`kv_heads` ≤ `heads`), a gated or plain MLP, and optionally a
/// mixture of `experts` of which each token uses `top_k`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decoder {
    pub layers: i64,
    pub hidden: i64,
    /// The MLP's inner size (of one expert).
    pub ffn: i64,
    pub heads: i64,
    pub kv_heads: i64,
    pub head_dim: i64,
    pub vocab: i64,
    /// 0 for a dense MLP.
    pub experts: i64,
    pub top_k: i64,
    pub mlp: Mlp,
}

impl Decoder {
    /// Width of Q·Kᵀ and P·V: query heads × head size.
    pub fn attn_dim(&self) -> i64 {
        self.heads * self.head_dim
    }

    /// One token's K (or V) in one layer: key/value heads × head size.
    pub fn kv_dim(&self) -> i64 {
        self.kv_heads * self.head_dim
    }

    fn attention_params(&self) -> i64 {
        // Q and O: hidden × heads·hd each; K and V: hidden × kv_heads·hd each.
        2 * self.hidden * self.attn_dim() + 2 * self.hidden * self.kv_dim()
    }

    fn mlp_params(&self) -> i64 {
        let matrices = match self.mlp {
            Mlp::Gated => 3,
            Mlp::Plain => 2,
        };
        matrices * self.hidden * self.ffn
    }

    /// The router's weights (hidden × experts), 0 for a dense MLP.
    fn router_params(&self) -> i64 {
        if self.experts > 0 {
            self.hidden * self.experts
        } else {
            0
        }
    }

    /// MLPs one token runs per layer: 1, or the `top_k` experts.
    fn mlps_per_token(&self) -> i64 {
        if self.experts > 0 {
            self.top_k
        } else {
            1
        }
    }

    /// P: the matmul weights one token is multiplied by, in every layer and the LM head.
    pub fn flop_params(&self) -> i64 {
        let layer = self.attention_params() + self.router_params() + self.mlps_per_token() * self.mlp_params();
        self.layers * layer + self.hidden * self.vocab
    }

    /// The matmul weights one decode step of `batch` sequences reads: with
    /// experts, at most min(experts, batch·top_k) of them per layer.
    pub(crate) fn step_weight_params(&self, batch: i64) -> i64 {
        let mlps = if self.experts > 0 { self.experts.min(batch * self.top_k) } else { 1 };
        let layer = self.attention_params() + self.router_params() + mlps * self.mlp_params();
        self.layers * layer + self.hidden * self.vocab
    }
}

/// FLOPs of a 2-D convolution with `k`×`k` kernels, stride 1 and same padding.
pub fn conv2d(batch: i64, c_in: i64, c_out: i64, k: i64, h: i64, w: i64) -> f64 {
    2.0 * (batch * c_in * c_out * k * k * h * w) as f64
}

/// FLOPs of a dense layer applied to `rows` rows.
pub fn linear(rows: i64, d_in: i64, d_out: i64) -> f64 {
    2.0 * (rows * d_in * d_out) as f64
}

/// FLOPs of an n×n by n×n matrix product.
pub fn square_matmul(n: i64) -> f64 {
    2.0 * (n as f64).powi(3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed_llm_flops() {
        // N=1000, L=2, d=4, batch 3, prompt 2:
        // per sequence 2·1000·2 + 4·2·4·(1+2) = 4000 + 96 = 4096; ×3 = 12288.
        assert_eq!(llm_prefill(1000, 2, 4, 3, 2), 12288.0);
        // One step at context 5: 2·1000 + 4·2·5·4 = 2160; ×3 = 6480.
        assert_eq!(llm_decode_step(1000, 2, 4, 3, 5), 6480.0);
        // Prefill of one token equals a decode step at context 1.
        assert_eq!(llm_prefill(1000, 2, 4, 1, 1), llm_decode_step(1000, 2, 4, 1, 1));
    }

    /// The small presets of conf/model/hf/: 2 layers, hidden 128, 4 heads of 32.
    fn small(kv_heads: i64, ffn: i64, experts: i64, mlp: Mlp) -> Decoder {
        Decoder {
            layers: 2,
            hidden: 128,
            ffn,
            heads: 4,
            kv_heads,
            head_dim: 32,
            vocab: 1000,
            experts,
            top_k: if experts > 0 { 2 } else { 0 },
            mlp,
        }
    }

    #[test]
    fn hand_counted_decoder_weights_per_token() {
        // Llama/Mistral/Qwen2 small: Q 128·128 = 16384, K and V 128·64 = 8192
        // each, O 16384: attention 49152; SwiGLU 3·128·256 = 98304; layer
        // 147456, 2 layers 294912; LM head 128·1000 = 128000: 422912.
        let llama = small(2, 256, 0, Mlp::Gated);
        assert_eq!(llama.flop_params(), 422_912);
        assert_eq!((llama.attn_dim(), llama.kv_dim()), (128, 64));
        // Mixtral small: 4 experts, top 2: router 128·4 = 512, two experts'
        // MLPs 196608; layer 49152 + 512 + 196608 = 246272; ×2 + 128000 = 620544.
        let mixtral = small(2, 256, 4, Mlp::Gated);
        assert_eq!(mixtral.flop_params(), 620_544);
        // One sequence reads its 2 experts per layer; 4 sequences read all 4:
        // 2·(49152 + 512 + 4·98304) + 128000 = 1013760.
        assert_eq!(mixtral.step_weight_params(1), 620_544);
        assert_eq!(mixtral.step_weight_params(4), 1_013_760);
        // GPT-2 small: MHA (K, V as wide as Q): 4·128·128 = 65536; MLP
        // 2·128·512 = 131072; layer 196608, ×2 = 393216; + 128000 = 521216.
        let gpt2 = Decoder { kv_heads: 4, ..small(4, 512, 0, Mlp::Plain) };
        assert_eq!(gpt2.flop_params(), 521_216);
        assert_eq!(gpt2.step_weight_params(8), 521_216);
        // Llama-3.1-8B (32 layers, hidden 4096, FFN 14336, 32 heads, 8 KV
        // heads of 128, vocab 128256): 32·(2·4096² + 2·4096·1024 + 3·4096·14336)
        // + 4096·128256 = 6979321856 + 525336576 = 7504658432, i.e. its
        // 8.03 B parameters less the 0.525 B embedding table and the norms.
        let llama8b = Decoder {
            layers: 32,
            hidden: 4096,
            ffn: 14336,
            heads: 32,
            kv_heads: 8,
            head_dim: 128,
            vocab: 128256,
            experts: 0,
            top_k: 0,
            mlp: Mlp::Gated,
        };
        assert_eq!(llama8b.flop_params(), 7_504_658_432);
        // A prefill of 2 tokens: 2·P·2 + 4·L·(1+2)·H·hd.
        let p = llama.flop_params() as f64;
        assert_eq!(llm_prefill(llama.flop_params(), 2, 128, 1, 2), 4.0 * p + 4.0 * 2.0 * 3.0 * 128.0);
    }

    #[test]
    fn hand_computed_bytes_and_layers() {
        // 1000 f32 weights; K and V of 2 layers, batch 3, 5 past tokens, d 4.
        assert_eq!(llm_decode_step_bytes(1000, 2, 4, 3, 5, 4), (4000.0, 960.0));
        assert_eq!(conv2d(1, 3, 16, 3, 8, 8), 2.0 * 3.0 * 16.0 * 9.0 * 64.0);
        assert_eq!(linear(8, 16, 10), 2560.0);
        assert_eq!(square_matmul(10), 2000.0);
    }
}
