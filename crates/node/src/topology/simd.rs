//! The SIMD instruction sets of the processor, highest first in `level`.

use serde::Serialize;

/// What vector instructions the processor offers.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Simd {
    /// The highest level, e.g. `avx512f`, `avx2`, `sse4.2`, `neon`, or `none`.
    pub level: &'static str,
    /// Every detected feature, lowest first.
    pub features: Vec<&'static str>,
}

impl Simd {
    /// Asks the processor (CPUID on x86-64).
    pub fn detect() -> Simd {
        #[allow(unused_mut)]
        let mut features: Vec<&'static str> = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            macro_rules! probe {
                ($($f:tt),*) => {$(
                    if std::arch::is_x86_feature_detected!($f) {
                        features.push($f);
                    }
                )*};
            }
            probe!(
                "sse2", "sse3", "ssse3", "sse4.1", "sse4.2", "avx", "fma", "avx2", "avx512f",
                "avx512bw", "avx512vl"
            );
        }
        #[cfg(target_arch = "aarch64")]
        {
            if std::arch::is_aarch64_feature_detected!("neon") {
                features.push("neon");
            }
            if std::arch::is_aarch64_feature_detected!("sve") {
                features.push("sve");
            }
        }
        let rank = [
            "avx512f", "avx2", "avx", "sse4.2", "sse4.1", "ssse3", "sse3", "sse2", "sve", "neon",
        ];
        let level = rank
            .into_iter()
            .find(|r| features.contains(r))
            .unwrap_or("none");
        Simd { level, features }
    }
}
