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
pub fn llm_prefill(params: i64, layers: i64, d_model: i64, batch: i64, prompt: i64) -> f64 {
    let (n, l, d, b, p) = (params as f64, layers as f64, d_model as f64, batch as f64, prompt as f64);
    b * (2.0 * n * p + 4.0 * l * d * p * (p + 1.0) / 2.0)
}

/// FLOPs of one decode step at context `context` (past tokens + the new one).
pub fn llm_decode_step(params: i64, layers: i64, d_model: i64, batch: i64, context: i64) -> f64 {
    let (n, l, d, b, c) = (params as f64, layers as f64, d_model as f64, batch as f64, context as f64);
    b * (2.0 * n + 4.0 * l * c * d)
}

/// Bytes one decode step reads: every weight once, plus the K and V cache of
/// the `past` tokens of each sequence in every layer.
pub fn llm_decode_step_bytes(params: i64, layers: i64, d_model: i64, batch: i64, past: i64, elem: i64) -> (f64, f64) {
    let weights = (params * elem) as f64;
    let kv = (2 * layers * batch * past * d_model * elem) as f64;
    (weights, kv)
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

    #[test]
    fn hand_computed_bytes_and_layers() {
        // 1000 f32 weights; K and V of 2 layers, batch 3, 5 past tokens, d 4.
        assert_eq!(llm_decode_step_bytes(1000, 2, 4, 3, 5, 4), (4000.0, 960.0));
        assert_eq!(conv2d(1, 3, 16, 3, 8, 8), 2.0 * 3.0 * 16.0 * 9.0 * 64.0);
        assert_eq!(linear(8, 16, 10), 2560.0);
        assert_eq!(square_matmul(10), 2000.0);
    }
}
