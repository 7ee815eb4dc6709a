//! [`QueryTemplate`]: the user-editable inner PromQL expression, its placeholders, and the
//! escaping of label values into PromQL strings and regular expressions.
//!
//! Placeholders:
//! - `{{service}}`, `{{bucket}}`, `{{caller}}`: the bucket's values, escaped for a PromQL
//!   double-quoted string (use them inside `"..."`). `{{caller}}` is an error for a bucket
//!   whose rule names no caller.
//! - `{{selector}}`: label matchers from the match rule and the measure, comma-separated,
//!   e.g. `caller="gw",procedure=~"Pay/.*",decision="shadow_dropped"` (empty for a
//!   catch-all bucket measuring offered load; PromQL accepts the trailing comma).
//! - `{{rate_window}}`: the `rate()` window, e.g. `2m`.

use super::{BucketQuery, LABEL_CALLER, LABEL_DECISION, LABEL_PROCEDURE, Measure, SourceError};

const PLACEHOLDERS: [&str; 5] = ["service", "bucket", "selector", "caller", "rate_window"];

/// The default template: the GRL contract metric, summed over all matching series.
pub(super) const DEFAULT_TEMPLATE: &str =
    r#"sum(rate(grl_requests_total{service="{{service}}",{{selector}}}[{{rate_window}}]))"#;

/// A validated query template (see the module doc for placeholders).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryTemplate {
    text: String,
    uses_caller: bool,
}

impl Default for QueryTemplate {
    fn default() -> Self {
        QueryTemplate::parse(DEFAULT_TEMPLATE).expect("default template is valid")
    }
}

impl QueryTemplate {
    /// Checks that every `{{...}}` names a known placeholder.
    pub fn parse(text: &str) -> Result<Self, SourceError> {
        let mut rest = text;
        let mut uses_caller = false;
        while let Some(open) = rest.find("{{") {
            let after = &rest[open + 2..];
            let close = after.find("}}").ok_or_else(|| SourceError::Template {
                message: format!("unclosed '{{{{' in {text:?}"),
            })?;
            let name = after[..close].trim();
            if !PLACEHOLDERS.contains(&name) {
                return Err(SourceError::Template {
                    message: format!(
                        "unknown placeholder {{{{{name}}}}} in {text:?}; known: {}",
                        PLACEHOLDERS.join(", ")
                    ),
                });
            }
            uses_caller |= name == "caller";
            rest = &after[close + 2..];
        }
        if text.trim().is_empty() {
            return Err(SourceError::Template {
                message: "empty query template".into(),
            });
        }
        Ok(QueryTemplate {
            text: text.to_owned(),
            uses_caller,
        })
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Renders the inner expression for one bucket and measure.
    pub fn render(
        &self,
        q: &BucketQuery,
        measure: Measure,
        rate_window: &str,
    ) -> Result<String, SourceError> {
        let caller = match (&q.caller, self.uses_caller) {
            (Some(c), _) => escape_label_value(c),
            (None, false) => String::new(),
            (None, true) => {
                return Err(SourceError::Template {
                    message: format!(
                        "bucket {} names no caller but the template uses {{{{caller}}}}",
                        q.name()
                    ),
                });
            }
        };
        let mut out = String::with_capacity(self.text.len() + 64);
        let mut rest = self.text.as_str();
        while let Some(open) = rest.find("{{") {
            out.push_str(&rest[..open]);
            let after = &rest[open + 2..];
            let close = after.find("}}").expect("checked by parse");
            match after[..close].trim() {
                "service" => out.push_str(&escape_label_value(&q.service)),
                "bucket" => out.push_str(&escape_label_value(&q.bucket)),
                "caller" => out.push_str(&caller),
                "selector" => out.push_str(&selector(q, measure)),
                "rate_window" => out.push_str(rate_window),
                other => unreachable!("placeholder {other} checked by parse"),
            }
            rest = &after[close + 2..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

/// Label matchers for a bucket's rule and a measure, comma-separated (no braces).
pub fn selector(q: &BucketQuery, measure: Measure) -> String {
    let mut parts = Vec::with_capacity(3);
    if let Some(c) = &q.caller {
        parts.push(format!("{LABEL_CALLER}=\"{}\"", escape_label_value(c)));
    }
    if let Some(p) = &q.procedure {
        match p.strip_suffix('*') {
            Some("") => {}
            Some(prefix) => parts.push(format!(
                "{LABEL_PROCEDURE}=~\"{}\"",
                escape_label_value(&format!("{}.*", escape_regex(prefix)))
            )),
            None => parts.push(format!("{LABEL_PROCEDURE}=\"{}\"", escape_label_value(p))),
        }
    }
    if let Some(d) = measure.decision() {
        parts.push(format!("{LABEL_DECISION}=\"{d}\""));
    }
    parts.join(",")
}

/// Escapes a value for a PromQL double-quoted string: backslash, double quote, newline.
pub fn escape_label_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for ch in v.chars() {
        match ch {
            '\\' => out.push_str(r"\\"),
            '"' => out.push_str(r#"\""#),
            '\n' => out.push_str(r"\n"),
            c => out.push(c),
        }
    }
    out
}

/// Escapes RE2 metacharacters so that `v` matches literally.
pub fn escape_regex(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for ch in v.chars() {
        if r"\.+*?()|[]{}^$".contains(ch) {
            out.push('\\');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(caller: Option<&str>, procedure: Option<&str>) -> BucketQuery {
        BucketQuery {
            service: "payments".into(),
            bucket: "gateway-pay".into(),
            caller: caller.map(Into::into),
            procedure: procedure.map(Into::into),
        }
    }

    #[test]
    fn default_template_renders_exact_rule() {
        let got = QueryTemplate::default()
            .render(&q(Some("gw"), Some("Pay/Card")), Measure::Offered, "2m")
            .unwrap();
        assert_eq!(
            got,
            r#"sum(rate(grl_requests_total{service="payments",caller="gw",procedure="Pay/Card"}[2m]))"#
        );
    }

    #[test]
    fn prefix_rule_becomes_escaped_regex_and_measure_adds_decision() {
        let s = selector(&q(None, Some("Pay.v1/*")), Measure::ShadowDropped);
        assert_eq!(s, r#"procedure=~"Pay\\.v1/.*",decision="shadow_dropped""#);
        assert_eq!(
            selector(&q(None, Some("*")), Measure::Dropped),
            r#"decision="dropped""#
        );
        assert_eq!(selector(&q(None, None), Measure::Offered), "");
    }

    #[test]
    fn label_values_are_escaped_for_promql_strings() {
        assert_eq!(escape_label_value(r#"a"b\c"#), r#"a\"b\\c"#);
        let s = selector(&q(Some("we\"ird\\"), None), Measure::Offered);
        assert_eq!(s, r#"caller="we\"ird\\""#);
    }

    #[test]
    fn istio_template_uses_caller() {
        let t = QueryTemplate::parse(
            r#"sum(rate(istio_requests_total{destination_service_name="{{service}}",source_workload="{{caller}}",reporter="destination"}[{{rate_window}}]))"#,
        )
        .unwrap();
        let got = t
            .render(&q(Some("gw"), None), Measure::Offered, "5m")
            .unwrap();
        assert!(
            got.contains(r#"source_workload="gw""#) && got.contains("[5m]"),
            "{got}"
        );
        let err = t
            .render(&q(None, None), Measure::Offered, "5m")
            .unwrap_err();
        assert!(err.to_string().contains("payments/gateway-pay"), "{err}");
    }

    #[test]
    fn unknown_or_unclosed_placeholders_are_refused() {
        assert!(
            QueryTemplate::parse("rate(x{a=\"{{servce}}\"}[1m])")
                .unwrap_err()
                .to_string()
                .contains("servce")
        );
        assert!(QueryTemplate::parse("rate(x{a=\"{{service\"}[1m])").is_err());
        assert!(QueryTemplate::parse("  ").is_err());
    }
}
