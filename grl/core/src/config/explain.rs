//! Why a request falls in the bucket it does: every rule of a service in the order the
//! [`Matcher`] tries them, each with what it did for the request and why in words. The
//! winner is the matcher's own answer (a test holds the two to each other), so an
//! operator's `grl explain` says what a client decides.

use super::{MatchRule, Matcher, ProcedurePattern};

/// What one rule did for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The request falls in this bucket.
    Wins,
    /// The request is decided here too (a bucket marked `in_addition`).
    InAddition,
    /// The rule matches, but a more specific one wins.
    LessSpecific,
    /// The rule does not take the request.
    NoMatch,
}

impl Role {
    /// The wire and JSON name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Wins => "wins",
            Role::InAddition => "in_addition",
            Role::LessSpecific => "less_specific",
            Role::NoMatch => "no_match",
        }
    }
}

/// One rule as considered for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Considered {
    /// The rule's index (as given to [`Matcher::new`]).
    pub index: usize,
    /// Whether the rule takes the request.
    pub matched: bool,
    /// What it did.
    pub role: Role,
    /// Why, in words.
    pub reason: String,
}

impl Matcher {
    /// Every rule of `rules` (the ones this matcher was built from, same order) for
    /// `caller` calling `procedure`: first the ones the matcher tries, in its order
    /// (overrides, the caller's rules, procedure-only rules), then the others (other
    /// callers' rules, rules that match nothing). `in_addition(i)` marks the buckets that
    /// apply in addition to a more specific one; `name(i)` names bucket `i` in reasons.
    pub fn explain(
        &self,
        rules: &[MatchRule],
        (caller, procedure): (&str, &str),
        in_addition: impl Fn(usize) -> bool,
        name: impl Fn(usize) -> String,
    ) -> Vec<Considered> {
        let winner = self.find(caller, procedure);
        let extra = self.find_in_addition(caller, procedure, winner, &in_addition);
        let mut order: Vec<usize> = self.overrides.iter().map(|(_, i)| *i).collect();
        if let Some(own) = self.by_caller.get(caller) {
            order.extend(own.iter().map(|(_, i)| *i));
        }
        order.extend(self.procedure_only.iter().map(|(_, i)| *i));
        let tried = order.len();
        let mut seen = vec![false; rules.len()];
        for &i in &order {
            seen[i] = true;
        }
        order.extend((0..rules.len()).filter(|&i| !seen[i]));
        let is_override = |i: usize| self.overrides.iter().any(|(_, o)| *o == i);
        order
            .into_iter()
            .enumerate()
            .map(|(at, i)| {
                let rule = &rules[i];
                let matched = at < tried && rule.matches(caller, procedure);
                let (role, reason) = if Some(i) == winner {
                    (Role::Wins, wins_because(rule, is_override(i)))
                } else if Some(i) == extra {
                    let reason = format!(
                        "matches and applies in addition to the bucket of `{}`: the request \
                         is refused if either drops it",
                        winner.map(&name).unwrap_or_default()
                    );
                    (Role::InAddition, reason)
                } else if matched {
                    let reason = format!(
                        "matches, but `{}` is more specific",
                        winner.map(&name).unwrap_or_default()
                    );
                    (Role::LessSpecific, reason)
                } else {
                    (Role::NoMatch, no_match_because(rule, caller, procedure))
                };
                Considered {
                    index: i,
                    matched: matched || Some(i) == winner,
                    role,
                    reason,
                }
            })
            .collect()
    }
}

/// Why the winning rule wins, by its class.
fn wins_because(rule: &MatchRule, is_override: bool) -> String {
    if is_override {
        return "an incident override: tried before every bucket".into();
    }
    let procedure = |p: &ProcedurePattern| match p {
        ProcedurePattern::Exact(p) => format!("the exact procedure `{p}`"),
        ProcedurePattern::Prefix(p) if p.is_empty() => "any procedure (`*`)".into(),
        ProcedurePattern::Prefix(p) => format!("the longest matching prefix `{p}*`"),
    };
    match (&rule.caller, &rule.procedure) {
        (Some(c), Some(p)) => format!("the most specific match: caller `{c}` and {}", procedure(p)),
        (Some(c), None) => format!("caller `{c}` with no more specific rule for this procedure"),
        (None, Some(p)) => format!("no rule names caller; {}", procedure(p)),
        (None, None) => "matches everything".into(),
    }
}

/// Why a rule does not take the request.
fn no_match_because(rule: &MatchRule, caller: &str, procedure: &str) -> String {
    match (&rule.caller, &rule.procedure) {
        (None, None) => "names neither caller nor procedure: takes no request".into(),
        (Some(c), _) if c != caller => format!("for caller `{c}` only, not `{caller}`"),
        (_, Some(p)) if !p.matches(procedure) => {
            format!(
                "procedure `{procedure}` does not match `{}`",
                p.as_written()
            )
        }
        _ => "not tried: a more specific rule was found first".into(),
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
    fn every_rule_is_listed_most_specific_first_with_the_winner_named() {
        let rules = [
            rule(None, Some("Pay/*")),
            rule(Some("gw"), None),
            rule(Some("gw"), Some("Pay/Card")),
            rule(Some("web"), None),
            rule(None, None),
        ];
        let m = Matcher::new(rules.iter().map(|r| (r, false)));
        let seen = m.explain(&rules, ("gw", "Pay/Card"), |i| i == 0, |i| format!("b{i}"));
        let order: Vec<usize> = seen.iter().map(|c| c.index).collect();
        assert_eq!(
            order,
            [2, 1, 0, 3, 4],
            "caller+procedure, caller, procedure, others"
        );
        let roles: Vec<Role> = seen.iter().map(|c| c.role).collect();
        assert_eq!(
            roles,
            [
                Role::Wins,
                Role::LessSpecific,
                Role::InAddition,
                Role::NoMatch,
                Role::NoMatch
            ]
        );
        assert!(
            seen[0].reason.contains("exact procedure `Pay/Card`"),
            "{}",
            seen[0].reason
        );
        assert!(
            seen[3].reason.contains("for caller `web` only"),
            "{}",
            seen[3].reason
        );
        assert!(
            seen[4].reason.contains("takes no request"),
            "{}",
            seen[4].reason
        );
        let miss = m.explain(&rules, ("web", "Refund"), |_| false, |i| format!("b{i}"));
        assert_eq!(
            miss.iter().find(|c| c.index == 0).unwrap().role,
            Role::NoMatch
        );
        assert!(
            miss.iter()
                .find(|c| c.index == 0)
                .unwrap()
                .reason
                .contains("does not match `Pay/*`")
        );
    }

    #[test]
    fn an_override_wins_ahead_of_the_buckets() {
        let rules = [rule(Some("gw"), Some("Pay")), rule(Some("gw"), None)];
        let m = Matcher::new([(&rules[0], false), (&rules[1], true)]);
        let seen = m.explain(&rules, ("gw", "Pay"), |_| false, |i| format!("b{i}"));
        assert_eq!(seen[0].index, 1);
        assert_eq!(seen[0].role, Role::Wins);
        assert!(seen[0].reason.contains("override"));
        assert_eq!(seen[1].role, Role::LessSpecific);
    }

    fn any_rule() -> impl proptest::strategy::Strategy<Value = (MatchRule, bool)> {
        use proptest::prelude::*;
        (
            proptest::option::of("[a-b]"),
            proptest::option::of("[A-B/]{0,2}\\*?"),
            proptest::bool::weighted(0.1),
        )
            .prop_map(|(c, p, o)| (rule(c.as_deref(), p.as_deref()), o))
    }

    proptest::proptest! {
        #[test]
        fn the_explained_winner_is_the_matchers_answer(
            rules in proptest::collection::vec(any_rule(), 0..8),
            caller in "[a-b]",
            procedure in "[A-B/]{0,3}",
            extra in proptest::collection::vec(proptest::bool::ANY, 8),
        ) {
            let m = Matcher::new(rules.iter().map(|(r, o)| (r, *o)));
            let plain: Vec<MatchRule> = rules.iter().map(|(r, _)| r.clone()).collect();
            let seen = m.explain(&plain, (&caller, &procedure), |i| extra[i], |i| i.to_string());
            proptest::prop_assert_eq!(seen.len(), rules.len());
            let winner = seen.iter().find(|c| c.role == Role::Wins).map(|c| c.index);
            let found = m.find(&caller, &procedure);
            proptest::prop_assert_eq!(winner, found);
            let also = seen.iter().find(|c| c.role == Role::InAddition).map(|c| c.index);
            proptest::prop_assert_eq!(also, m.find_in_addition(&caller, &procedure, found, |i| extra[i]));
            if let Some(w) = seen.iter().position(|c| c.role == Role::Wins) {
                proptest::prop_assert!(seen[..w].iter().all(|c| !c.matched), "nothing matched is tried before the winner");
            }
            for c in &seen {
                proptest::prop_assert_eq!(c.matched && c.role == Role::NoMatch, false);
            }
        }
    }
}
