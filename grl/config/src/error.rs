//! The one error type of the config model: every refusal names file, line and field.

use std::fmt;

/// A config file was refused. `Display` reads `services/pay.yaml:7: buckets[1].scope: …`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// Path of the file relative to the config root, e.g. `services/payments.yaml`.
    pub file: String,
    /// 1-based line of the offending field, when it could be located.
    pub line: Option<usize>,
    /// Dotted path of the field, e.g. `buckets[1].policy.rps` (empty for the whole file).
    pub field: String,
    /// What is wrong, in words.
    pub message: String,
}

impl ConfigError {
    /// A refusal of `field` in `file` at `line`.
    pub fn new(
        file: impl Into<String>,
        line: Option<usize>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            file: file.into(),
            line,
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// All refusals found in one snapshot (at least one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        write!(
            f,
            "invalid config ({n} error{}):",
            if n == 1 { "" } else { "s" }
        )?;
        for e in &self.0 {
            write!(f, "\n  {e}")?;
        }
        Ok(())
    }
}
