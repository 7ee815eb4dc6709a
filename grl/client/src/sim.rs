//! Simulated arrivals for the statistical tests of the rate estimate and the budget: a
//! seeded generator and Poisson counts, so every check runs over many seeds and repeats
//! exactly.

/// A small seeded generator (SplitMix64): fast, and enough for test arrivals.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        // Start each seed at a scrambled point of the sequence: seeds that differ by one
        // would otherwise walk the same sequence one step apart.
        let mut r = Self(seed);
        r.0 = r.next_u64();
        r
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A Poisson count of mean `mean` (inversion by products of uniforms, in chunks so a
    /// large mean does not underflow).
    pub(crate) fn poisson(&mut self, mean: f64) -> u64 {
        let (mut left, mut n) = (mean, 0u64);
        while left > 0.0 {
            let step = left.min(30.0);
            left -= step;
            let limit = (-step).exp();
            let mut p = self.unit();
            while p > limit {
                n += 1;
                p *= self.unit();
            }
        }
        n
    }
}

/// Mean and standard deviation of `xs`.
pub(crate) fn mean_sd(xs: &[f64]) -> (f64, f64) {
    let n = xs.len().max(1) as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (mean, var.sqrt())
}
