//! aggregate: kernel categories (GEMM, attention, normalization, …) from
//! kernel names, by the rules of conf/analysis/kernel_categories.yaml and a
//! user's table tried before them (`report.kernel_categories`). Data, not
//! code: a kernel no rule matches is `other`, and its share is reported so
//! that a poor mapping shows.
use regex::{Regex, RegexBuilder};
use serde::{Deserialize, Serialize};

use crate::error::Error;

/// The table that ships with llmperf.
pub(crate) const TABLE: &str = "conf/analysis/kernel_categories.yaml";

/// What a kernel does, coarsely: the categories of the breakdown and the findings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Category {
    Gemm,
    Attention,
    Normalization,
    Elementwise,
    Reduction,
    CopyCast,
    Communication,
    MoeRouting,
    Other,
}

impl Category {
    /// Every category, in report order.
    pub(crate) const ALL: [Category; 9] = [
        Category::Gemm,
        Category::Attention,
        Category::Normalization,
        Category::Elementwise,
        Category::Reduction,
        Category::CopyCast,
        Category::Communication,
        Category::MoeRouting,
        Category::Other,
    ];

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The name in the tables and in JSON (`copy_cast`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Category::Gemm => "gemm",
            Category::Attention => "attention",
            Category::Normalization => "normalization",
            Category::Elementwise => "elementwise",
            Category::Reduction => "reduction",
            Category::CopyCast => "copy_cast",
            Category::Communication => "communication",
            Category::MoeRouting => "moe_routing",
            Category::Other => "other",
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    rules: Vec<RuleText>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleText {
    category: Category,
    #[serde(rename = "match")]
    pattern: String,
}

/// The rules, in the order they are tried.
#[derive(Debug)]
pub(crate) struct Categories {
    rules: Vec<(Category, Regex)>,
    /// Where the rules came from, for the reports: the user's file, then [`TABLE`].
    pub(crate) sources: Vec<String>,
}

impl Categories {
    /// The shipped table, after the user's rules (`user`: its name and text) when given.
    pub(crate) fn new(shipped: &str, user: Option<(&str, &str)>) -> Result<Categories, Error> {
        let mut rules = Vec::new();
        let mut sources = Vec::new();
        for (name, text, hint) in user
            .map(|(n, t)| (n, t, "fix the rule, or leave report.kernel_categories unset"))
            .into_iter()
            .chain([(TABLE, shipped, "this file ships with llmperf: rebuild it")])
        {
            let file: File =
                serde_yaml::from_str(text).map_err(|e| Error::config(format!("{name}: {e}")).with_hint(hint))?;
            for (i, r) in file.rules.into_iter().enumerate() {
                let re = RegexBuilder::new(&r.pattern).case_insensitive(true).build().map_err(|e| {
                    Error::config(format!(
                        "{name}: rule {} ({}): not a regular expression: {e}",
                        i + 1,
                        r.category.name()
                    ))
                    .with_hint(hint)
                })?;
                rules.push((r.category, re));
            }
            sources.push(name.to_string());
        }
        Ok(Categories { rules, sources })
    }

    /// The shipped table, after the user's (`report.kernel_categories`) when given.
    pub(crate) fn load(user: Option<&std::path::Path>) -> Result<Categories, Error> {
        let shipped =
            crate::config::tree::ConfTree::embedded_data("analysis/kernel_categories.yaml").unwrap_or_default();
        let Some(path) = user else { return Categories::new(shipped, None) };
        let text = crate::config::bounded::read_yaml(path, "report.kernel_categories")?;
        Categories::new(shipped, Some((&path.display().to_string(), &text)))
    }

    /// The shipped table alone.
    #[cfg(test)]
    pub(crate) fn shipped() -> Result<Categories, Error> {
        let text = crate::config::tree::ConfTree::embedded_data("analysis/kernel_categories.yaml").unwrap_or_default();
        Categories::new(text, None)
    }

    /// The category of a kernel by its demangled name: the first rule that
    /// matches, else [`Category::Other`].
    pub fn of(&self, kernel: &str) -> Category {
        let name = kernel.replace("<unnamed>::", "").replace("(anonymous namespace)::", "");
        let name = without_enable_if(&name);
        self.rules.iter().find(|(_, re)| re.is_match(name)).map_or(Category::Other, |(c, _)| *c)
    }
}

/// A name without its leading `std::enable_if<…>::type ` return type (SFINAE
/// in the kernel's declaration): `^[^<(]*` must see the function's own name.
fn without_enable_if(name: &str) -> &str {
    let Some(rest) = name.strip_prefix("std::enable_if<").or_else(|| name.strip_prefix("enable_if<")) else {
        return name;
    };
    let mut depth = 1usize;
    for (i, c) in rest.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => {
                depth -= 1;
                if depth == 0 {
                    return rest[i + 1..].strip_prefix("::type ").unwrap_or(name);
                }
            }
            _ => {}
        }
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped() -> Categories {
        Categories::shipped().unwrap()
    }

    #[test]
    fn names_of_the_real_captures_land_in_their_category() {
        let c = shipped();
        for (name, want) in [
            ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)", Category::Communication),
            ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128>>(flash::Flash_fwd_params)", Category::Attention),
            ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN", Category::Gemm),
            ("void cutlass::Kernel<cutlass::gemm::kernel::Gemm<cutlass::NumericConverter<float>>>(Params)", Category::Gemm),
            ("void at::native::<unnamed>::vectorized_layer_norm_kernel<float, float, (bool)0>(int, T2)", Category::Normalization),
            ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]>(int)", Category::CopyCast),
            ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>>(int, T2, T3)", Category::Elementwise),
            ("void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::MeanOps<float>>>(T3)", Category::Reduction),
            ("sm50_xmma_pooling_coalescedC_NHWC_kMAX_3_False_execute_kernel_trt", Category::Reduction),
            ("sm80_xmma_fprop_implicit_gemm_f16f16_f16f16_f16_nhwckrsc_nhwc_tilesize128x128x32", Category::Gemm),
            ("void cudnn::cnn::im2col4d_kernel<__half, long>(cudnn::cnn::im2col4d_params)", Category::CopyCast),
            ("void transpose_readWrite_alignment_kernel<float2, float2, 1, false, 6, 4, 4>(cublasTransposeParams<float2>)", Category::CopyCast),
            ("<unnamed>::nvfuser_inner_persistent_f1_c1_r0_g2(<unnamed>::Tensor<float, (int)2, (int)2>)", Category::Reduction),
            ("<unnamed>::nvfuser_pointwise_f0_c1_r0_g0(<unnamed>::Tensor<float, (int)2, (int)2>)", Category::Elementwise),
            ("triton_poi_fused_add_mul_0", Category::Elementwise),
            ("triton_red_fused_sum_1", Category::Reduction),
            ("void vllm::moe::moe_align_block_size_kernel<int>(int *)", Category::MoeRouting),
            ("fused_moe_kernel", Category::Gemm),
            // cuBLAS (DeepSeek-OCR's nsys summary and ncu details): CUTLASS inside Kernel2, a GEMV behind enable_if.
            ("void Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x256_32x3_tn_align8>(Params)", Category::Gemm),
            ("std::enable_if<!T7, void>::type internal::gemvx::kernel<int, int, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, (bool)0, (bool)1, (bool)1, (bool)0, (int)7, (bool)0, cublasGemvParamsEx<int, __nv_bfloat16 const *, __nv_bfloat16 const *, __nv_bfloat16 *, float>>(T13)", Category::Gemm),
            // ncu spells that GEMV without its namespace: its parameter type says it.
            ("enable_if<!T7, void>::type kernel<int, int, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, 0, 1, 1, 0, 6, 0, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<const __nv_bfloat16>, cublasGemvTensorStridedBatched<const __nv_bfloat16>, cublasGemvTensorStridedBatched<__nv_bfloat16>, float>>(T13)", Category::Gemm),
            ("std::enable_if<", Category::Other),
            // ICON's physics lambda through thrust::for_each: a map, like ATen's elementwise_kernel<lambda>;
            // its reduction (a CUB DeviceReduce of another lambda) is a reduction.
            ("void thrust::THRUST_200300_89_NS::cuda_cub::core::_kernel_agent<thrust::THRUST_200300_89_NS::cuda_cub::__parallel_for::ParallelForAgent<thrust::THRUST_200300_89_NS::cuda_cub::for_each_f<__gnu_cxx::__normal_iterator<unsigned long *, std::vector<unsigned long, std::allocator<unsigned long>>>, thrust::THRUST_200300_89_NS::detail::wrapped_function<graupel(unsigned long &, double &)::[lambda(unsigned long) (instance 2)], void>>, long>>(T2, T3)", Category::Elementwise),
            ("void cub::CUB_200300_89_NS::DeviceReduceKernel<cub::CUB_200300_89_NS::DeviceReducePolicy<unsigned long, unsigned int, std::plus<unsigned long>>::Policy600, thrust::THRUST_200300_89_NS::cuda_cub::transform_input_iterator_t<unsigned long, __gnu_cxx::__normal_iterator<unsigned long *, std::vector<unsigned long, std::allocator<unsigned long>>>, graupel(unsigned long &)::[lambda(unsigned long) (instance 1)]>, unsigned int, std::plus<unsigned long>, unsigned long>(T2, T5 *, T3, cub::CUB_200300_89_NS::GridEvenShare<T3>, T4)", Category::Reduction),
        ] {
            assert_eq!(c.of(name), want, "{name}");
        }
    }

    #[test]
    fn a_users_rules_come_first_and_a_bad_one_names_its_file_and_rule() {
        let shipped = crate::config::tree::ConfTree::embedded_data("analysis/kernel_categories.yaml").unwrap();
        let user = "rules:\n  - {category: elementwise, match: '_kernel_agent.*graupel'}\n";
        let c = Categories::new(shipped, Some(("my.yaml", user))).unwrap();
        assert_eq!(c.of("void thrust::_kernel_agent<for_each_f<graupel>>()"), Category::Elementwise);
        assert_eq!(c.sources, ["my.yaml", TABLE]);
        let e = Categories::new(shipped, Some(("my.yaml", "rules:\n  - {category: gemm, match: 'a('}\n"))).unwrap_err();
        assert!(e.to_string().contains("my.yaml: rule 1 (gemm): not a regular expression"), "{e}");
        let e =
            Categories::new(shipped, Some(("my.yaml", "rules:\n  - {category: matmul, match: 'a'}\n"))).unwrap_err();
        assert!(e.to_string().contains("my.yaml"), "{e}");
    }
}
