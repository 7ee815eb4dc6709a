//! `fixed`: a constant limit, such as a contractual quota. Parameters: `rps` (required,
//! finite, greater than zero). Reads no history.

use crate::params::{Params, SpecError};
use crate::policy::FromSpec;
use crate::policy::{Context, Policy, Recommendation, Refusal};
use crate::series::Series;
use std::time::Duration;

/// Always recommends the configured rate.
#[derive(Debug, Clone, PartialEq)]
pub struct Fixed {
    /// The limit in requests per second.
    pub rps: f64,
}

impl FromSpec for Fixed {
    const KIND: &'static str = "fixed";

    fn from_params(params: &Params<'_>) -> Result<Self, SpecError> {
        let rps = params.f64("rps")?;
        if rps <= 0.0 {
            return Err(SpecError::new("rps", "must be greater than 0"));
        }
        Ok(Fixed { rps })
    }
}

impl Policy for Fixed {
    fn kind(&self) -> &'static str {
        Self::KIND
    }

    fn window(&self) -> Duration {
        Duration::ZERO
    }

    fn recommend(&self, _history: &Series, _ctx: &Context) -> Result<Recommendation, Refusal> {
        Ok(Recommendation::new(Self::KIND, self.rps))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recommends_its_rate_without_history() {
        let r = Fixed { rps: 500.0 }
            .recommend(&Series::default(), &Context::default())
            .unwrap();
        assert_eq!(r.rps, 500.0);
        assert_eq!(r.evidence["policy"], "fixed");
        assert_eq!(r.evidence.len(), 1);
    }
}
