//! Which bucket a request belongs to: the most specific match wins.
//!
//! Order: caller+procedure, then caller only, then procedure only. Among procedure patterns
//! of the same class an exact procedure beats a prefix (`Pay/*`), and a longer prefix beats
//! a shorter one. Overrides (incident rules) are tried before ordinary buckets.
//!
//! A bucket marked `in_addition` also applies to the requests a more specific bucket takes:
//! [`Matcher::find_in_addition`] gives, for a request, the most specific such bucket other
//! than the one it falls in, so a procedure-wide limit protects the procedure whoever calls
//! it. At most one bucket applies in addition.

use std::collections::HashMap;

use super::MatchRule;

/// A procedure pattern: exact, or a prefix when written with a trailing `*`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ProcedurePattern {
    /// Matches exactly this procedure.
    Exact(String),
    /// Matches every procedure starting with this prefix (`*` alone matches all).
    Prefix(String),
}

impl ProcedurePattern {
    /// Parses `Pay/*` as a prefix and anything else as exact.
    pub fn parse(s: &str) -> Self {
        match s.strip_suffix('*') {
            Some(prefix) => Self::Prefix(prefix.to_string()),
            None => Self::Exact(s.to_string()),
        }
    }

    /// Whether `procedure` matches.
    pub fn matches(&self, procedure: &str) -> bool {
        match self {
            Self::Exact(p) => p == procedure,
            Self::Prefix(p) => procedure.starts_with(p.as_str()),
        }
    }

    /// Higher is more specific: exact beats any prefix, a longer prefix beats a shorter one.
    pub(super) fn specificity(&self) -> usize {
        match self {
            Self::Exact(_) => usize::MAX,
            Self::Prefix(p) => p.len(),
        }
    }

    /// The pattern as written.
    pub fn as_written(&self) -> String {
        match self {
            Self::Exact(p) => p.clone(),
            Self::Prefix(p) => format!("{p}*"),
        }
    }
}

/// An index over one service's rules answering "which bucket?" without scanning all rules.
#[derive(Debug, Clone, Default)]
pub struct Matcher {
    pub(super) overrides: Vec<(MatchRule, usize)>,
    /// Each caller's rules, most specific first (caller-only last).
    pub(super) by_caller: HashMap<String, Vec<(Option<ProcedurePattern>, usize)>>,
    /// Procedure-only rules, most specific first.
    pub(super) procedure_only: Vec<(ProcedurePattern, usize)>,
}

impl Matcher {
    /// Builds the index; `rules[i]` is bucket `i`, `is_override[i]` puts it ahead of the rest.
    pub fn new<'a>(rules: impl IntoIterator<Item = (&'a MatchRule, bool)>) -> Self {
        let mut m = Matcher::default();
        for (i, (rule, is_override)) in rules.into_iter().enumerate() {
            if is_override {
                m.overrides.push((rule.clone(), i));
                continue;
            }
            match (&rule.caller, &rule.procedure) {
                (Some(c), p) => m
                    .by_caller
                    .entry(c.clone())
                    .or_default()
                    .push((p.clone(), i)),
                (None, Some(p)) => m.procedure_only.push((p.clone(), i)),
                (None, None) => {}
            }
        }
        let rank = |p: &Option<ProcedurePattern>| match p {
            Some(p) => p.specificity(),
            None => 0,
        };
        for rules in m.by_caller.values_mut() {
            rules.sort_by_key(|(p, i)| (std::cmp::Reverse(rank(p)), *i));
            // A caller-only rule (procedure None) sorts last: it is less specific.
            rules.sort_by_key(|(p, _)| p.is_none());
        }
        m.procedure_only
            .sort_by_key(|(p, i)| (std::cmp::Reverse(p.specificity()), *i));
        m
    }

    /// The index of the bucket `caller` calling `procedure` belongs to, if any.
    pub fn find(&self, caller: &str, procedure: &str) -> Option<usize> {
        self.find_where(caller, procedure, |_| true)
    }

    /// The bucket that applies to `caller` calling `procedure` in addition to bucket `own`
    /// (the one [`find`](Self::find) gave): the most specific matching bucket `i` with
    /// `in_addition(i)`, other than `own`.
    pub fn find_in_addition(
        &self,
        caller: &str,
        procedure: &str,
        own: Option<usize>,
        in_addition: impl Fn(usize) -> bool,
    ) -> Option<usize> {
        self.find_where(caller, procedure, |i| Some(i) != own && in_addition(i))
    }

    /// The most specific matching bucket `i` with `take(i)`.
    fn find_where(
        &self,
        caller: &str,
        procedure: &str,
        take: impl Fn(usize) -> bool,
    ) -> Option<usize> {
        for (rule, i) in &self.overrides {
            if take(*i) && rule.matches(caller, procedure) {
                return Some(*i);
            }
        }
        if let Some(rules) = self.by_caller.get(caller) {
            for (p, i) in rules.iter().filter(|(_, i)| take(*i)) {
                match p {
                    Some(p) if p.matches(procedure) => return Some(*i),
                    None => return Some(*i),
                    _ => {}
                }
            }
        }
        self.procedure_only
            .iter()
            .find(|(p, i)| take(*i) && p.matches(procedure))
            .map(|(_, i)| *i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(caller: Option<&str>, procedure: Option<&str>) -> MatchRule {
        MatchRule {
            caller: caller.map(str::to_string),
            procedure: procedure.map(ProcedurePattern::parse),
        }
    }

    #[test]
    fn a_bucket_in_addition_applies_beside_a_more_specific_one() {
        let rules = [
            rule(Some("partner"), None),
            rule(None, Some("orders.Orders/Get")),
            rule(None, Some("orders.Orders/*")),
        ];
        let m = Matcher::new(rules.iter().map(|r| (r, false)));
        let in_addition = |i: usize| i >= 1;
        let own = m.find("partner", "orders.Orders/Get");
        assert_eq!(own, Some(0), "the caller bucket is the more specific");
        assert_eq!(
            m.find_in_addition("partner", "orders.Orders/Get", own, in_addition),
            Some(1),
            "the procedure bucket applies too"
        );
        let own = m.find("web", "orders.Orders/Get");
        assert_eq!(own, Some(1));
        assert_eq!(
            m.find_in_addition("web", "orders.Orders/Get", own, in_addition),
            Some(2),
            "the next bucket in addition when the request already falls in one"
        );
        assert_eq!(
            m.find_in_addition("partner", "orders.Orders/Get", Some(0), |_| false),
            None,
            "no bucket in addition unless marked"
        );
        assert_eq!(
            m.find_in_addition("partner", "billing.B/Get", Some(0), in_addition),
            None
        );
    }

    #[test]
    fn most_specific_wins() {
        let rules = [
            rule(None, Some("Pay/*")),
            rule(Some("gw"), None),
            rule(Some("gw"), Some("Pay/*")),
            rule(Some("gw"), Some("Pay/Card")),
            rule(None, Some("Pay/Card*")),
        ];
        let m = Matcher::new(rules.iter().map(|r| (r, false)));
        assert_eq!(m.find("gw", "Pay/Card"), Some(3));
        assert_eq!(m.find("gw", "Pay/Cash"), Some(2));
        assert_eq!(m.find("gw", "Refund"), Some(1));
        assert_eq!(m.find("web", "Pay/Cash"), Some(0));
        assert_eq!(m.find("web", "Pay/CardX"), Some(4));
        assert_eq!(m.find("web", "Refund"), None);
    }

    #[test]
    fn overrides_come_first() {
        let rules = [rule(Some("gw"), Some("Pay")), rule(Some("gw"), None)];
        let m = Matcher::new([(&rules[0], false), (&rules[1], true)]);
        assert_eq!(m.find("gw", "Pay"), Some(1));
    }

    proptest::proptest! {
        #[test]
        fn a_found_bucket_always_matches(caller in "[a-c]{1,2}", procedure in "[A-C/]{0,4}") {
            let rules = [
                rule(Some("a"), Some("A*")), rule(Some("b"), None), rule(None, Some("B/*")),
                rule(None, Some("*")), rule(Some("ab"), Some("C")),
            ];
            let m = Matcher::new(rules.iter().map(|r| (r, false)));
            let found = m.find(&caller, &procedure);
            proptest::prop_assert!(found.is_some());
            proptest::prop_assert!(rules[found.unwrap()].matches(&caller, &procedure));
        }
    }

    /// The documented order, written as plainly as possible: overrides first (in order),
    /// then caller+procedure, caller only, procedure only; within a class the most
    /// specific procedure (exact, then the longest prefix), then the first declared.
    fn oracle(rules: &[(MatchRule, bool)], caller: &str, procedure: &str) -> Option<usize> {
        if let Some(i) = rules
            .iter()
            .position(|(r, o)| *o && r.matches(caller, procedure))
        {
            return Some(i);
        }
        let class = |r: &MatchRule| match (&r.caller, &r.procedure) {
            (Some(_), Some(_)) => 0,
            (Some(_), None) => 1,
            (None, Some(_)) => 2,
            (None, None) => 3,
        };
        let spec = |r: &MatchRule| {
            r.procedure
                .as_ref()
                .map_or(0, ProcedurePattern::specificity)
        };
        rules
            .iter()
            .enumerate()
            .filter(|(_, (r, o))| !*o && class(r) < 3 && r.matches(caller, procedure))
            .min_by_key(|(i, (r, _))| (class(r), std::cmp::Reverse(spec(r)), *i))
            .map(|(i, _)| i)
    }

    fn any_rule() -> impl proptest::strategy::Strategy<Value = (MatchRule, bool)> {
        use proptest::prelude::*;
        (
            proptest::option::of("[ab]{1,2}"),
            proptest::option::of("[XY/]{0,3}\\*?"),
            proptest::bool::weighted(0.15),
        )
            .prop_map(|(c, p, o)| (rule(c.as_deref(), p.as_deref()), o))
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        #[test]
        fn the_index_agrees_with_the_documented_order(
            rules in proptest::collection::vec(any_rule(), 0..12),
            caller in "[ab]{0,2}",
            procedure in "[XY/]{0,4}",
        ) {
            let m = Matcher::new(rules.iter().map(|(r, o)| (r, *o)));
            proptest::prop_assert_eq!(m.find(&caller, &procedure), oracle(&rules, &caller, &procedure));
        }

        #[test]
        fn any_names_are_matched_without_panic(
            caller in ".{0,40}",
            procedure in ".{0,80}",
            pattern in ".{0,40}",
        ) {
            let rules = [rule(Some(&caller), Some(&pattern)), rule(None, Some(&pattern))];
            let m = Matcher::new(rules.iter().map(|r| (r, false)));
            if let Some(i) = m.find(&caller, &procedure) {
                proptest::prop_assert!(rules[i].matches(&caller, &procedure));
            }
        }
    }
}
