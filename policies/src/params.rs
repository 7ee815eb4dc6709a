//! Typed, checked access to a policy's spec parameters, and [`SpecError`].

use serde_json::{Map, Value};
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::time::Duration;

/// A policy spec that cannot be built: which field, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SpecError {
    /// The offending field (`kind` for an unknown policy kind).
    pub field: String,
    /// What is wrong, for an operator.
    pub message: String,
}

impl SpecError {
    /// An error about `field`.
    pub fn new(field: &str, message: impl Into<String>) -> Self {
        SpecError {
            field: field.to_string(),
            message: message.into(),
        }
    }
}

/// Reads a spec's parameters one by one and remembers which were read, so that
/// [`Params::finish`] can reject any field the policy does not know.
#[derive(Debug)]
pub struct Params<'a> {
    map: &'a Map<String, Value>,
    used: RefCell<BTreeSet<&'a str>>,
}

impl<'a> Params<'a> {
    /// Wraps the parameters of one spec (all fields but `kind`).
    pub fn new(map: &'a Map<String, Value>) -> Self {
        Params {
            map,
            used: RefCell::default(),
        }
    }

    fn get(&self, name: &str) -> Option<&'a Value> {
        let (key, value) = self.map.get_key_value(name)?;
        self.used.borrow_mut().insert(key.as_str());
        Some(value).filter(|v| !v.is_null())
    }

    /// An optional number.
    pub fn opt_f64(&self, name: &str) -> Result<Option<f64>, SpecError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() => Ok(Some(x)),
                _ => Err(SpecError::new(name, "expected a finite number")),
            },
        }
    }

    /// A required number.
    pub fn f64(&self, name: &str) -> Result<f64, SpecError> {
        self.opt_f64(name)?
            .ok_or_else(|| SpecError::new(name, "required"))
    }

    /// A number in `[lo, hi]`, or `default` when absent.
    pub fn f64_in(&self, name: &str, default: f64, lo: f64, hi: f64) -> Result<f64, SpecError> {
        Ok(self.opt_f64_in(name, lo, hi)?.unwrap_or(default))
    }

    /// An optional number in `[lo, hi]`.
    pub fn opt_f64_in(&self, name: &str, lo: f64, hi: f64) -> Result<Option<f64>, SpecError> {
        match self.opt_f64(name)? {
            Some(x) if !(lo..=hi).contains(&x) => {
                Err(SpecError::new(name, format!("must be in [{lo}, {hi}]")))
            }
            x => Ok(x),
        }
    }

    /// A duration written like `28d` (or a number of seconds), greater than zero; `default`
    /// (in the same notation) when absent.
    pub fn duration(&self, name: &str, default: &str) -> Result<Duration, SpecError> {
        let d = match self.get(name) {
            None => {
                crate::duration::parse(default).map_err(|e| SpecError::new(name, e.to_string()))?
            }
            Some(Value::String(s)) => crate::duration::parse(s).map_err(|_| {
                SpecError::new(name, "expected a duration such as \"28d\" or \"90m\"")
            })?,
            Some(Value::Number(n)) if n.as_u64().is_some() => {
                Duration::from_secs(n.as_u64().unwrap_or_default())
            }
            Some(_) => {
                return Err(SpecError::new(name, "expected a duration such as \"28d\""));
            }
        };
        if d.is_zero() {
            return Err(SpecError::new(name, "must be greater than zero"));
        }
        Ok(d)
    }

    /// Fails on the first (alphabetical) field no getter asked for.
    pub fn finish(self) -> Result<(), SpecError> {
        let used = self.used.into_inner();
        match self.map.keys().find(|k| !used.contains(k.as_str())) {
            Some(unknown) => Err(SpecError::new(unknown, "unknown field")),
            None => Ok(()),
        }
    }
}
