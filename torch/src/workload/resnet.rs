//! A shallow ResNet: stem (conv in→C, batch norm, ReLU), `blocks` basic
//! residual blocks of C channels, global average pool, linear C→classes.
use tch::nn;
use tch::Tensor;

use super::instrument::Instrument;
use llmperf::config::schema::ResnetConfig;
use llmperf::{flops, regions};

pub struct ResNet {
    cfg: ResnetConfig,
    stem: nn::Conv2D,
    stem_bn: nn::BatchNorm,
    blocks: Vec<Block>,
    fc: nn::Linear,
}

struct Block {
    c1: nn::Conv2D,
    b1: nn::BatchNorm,
    c2: nn::Conv2D,
    b2: nn::BatchNorm,
}

fn conv3x3(p: nn::Path, c_in: i64, c_out: i64) -> nn::Conv2D {
    nn::conv2d(p, c_in, c_out, 3, nn::ConvConfig { padding: 1, bias: false, ..Default::default() })
}

impl ResNet {
    pub fn new(root: &nn::Path, cfg: &ResnetConfig) -> ResNet {
        let c = i64::from(cfg.channels);
        let blocks = (0..cfg.blocks)
            .map(|i| {
                let p = root / format!("block{i}");
                Block {
                    c1: conv3x3(&p / "c1", c, c),
                    b1: nn::batch_norm2d(&p / "b1", c, Default::default()),
                    c2: conv3x3(&p / "c2", c, c),
                    b2: nn::batch_norm2d(&p / "b2", c, Default::default()),
                }
            })
            .collect();
        ResNet {
            cfg: cfg.clone(),
            stem: conv3x3(root / "stem", i64::from(cfg.in_channels), c),
            stem_bn: nn::batch_norm2d(root / "stem_bn", c, Default::default()),
            blocks,
            fc: nn::linear(root / "fc", c, i64::from(cfg.num_classes), Default::default()),
        }
    }

    /// Inference (batch norm in eval mode) on `[batch, in_channels, H, W]`.
    pub fn forward(&self, x: &Tensor, ins: &Instrument) -> Tensor {
        let mut x = ins.region(regions::STEM, || x.apply(&self.stem).apply_t(&self.stem_bn, false).relu());
        for (i, b) in self.blocks.iter().enumerate() {
            x = ins.region(&regions::block(i), || {
                let y = x.apply(&b.c1).apply_t(&b.b1, false).relu().apply(&b.c2).apply_t(&b.b2, false);
                (y + &x).relu()
            });
        }
        ins.region(regions::HEAD, || x.adaptive_avg_pool2d([1, 1]).flatten(1, -1).apply(&self.fc))
    }

    /// Convolution and linear FLOPs of one forward pass (elementwise ops ignored).
    pub fn flops(&self, batch: i64, size: i64) -> f64 {
        let c = i64::from(self.cfg.channels);
        let stem = flops::conv2d(batch, i64::from(self.cfg.in_channels), c, 3, size, size);
        let blocks = 2.0 * f64::from(self.cfg.blocks) * flops::conv2d(batch, c, c, 3, size, size);
        stem + blocks + flops::linear(batch, c, i64::from(self.cfg.num_classes))
    }
}
