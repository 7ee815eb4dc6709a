//! Which scopes a tier computes ratios for, child by child ([`Owned`]). A tier owns the
//! scopes of its config: an aggregator its zone, a regional controller its region, a
//! controller without a parent global and region. Zones served by several aggregators
//! (replicas behind one address, each reached by a part of the zone's clients) are the
//! exception: no one of them sees the zone's sum, so each would hold only its part to the
//! whole zone's limit. The controller above them hears every part; it computes the
//! zone-scoped ratios of each zone from which more than one aggregator reports, and tells
//! those aggregators so (`Instruction.zone_shared`): they then apply the controller's
//! zone-scoped ratios and allowances as they do a region's, instead of their own.

use grl_config::Scope;
use grl_core::proto;
use tracing::info;

/// The scopes a tier computes, see the module doc.
#[derive(Debug, Clone, Default)]
pub struct Owned {
    /// The scopes of the tier's config.
    scopes: Vec<Scope>,
    /// Zones from which several aggregators report (controllers), sorted.
    shared_zones: Vec<String>,
    /// Whether the parent said this aggregator's zone is shared: its zone-scoped ratios
    /// come from the parent.
    zone_from_parent: bool,
}

impl Owned {
    /// The scopes of a tier's config, no zone shared.
    pub fn new(scopes: Vec<Scope>) -> Self {
        Self {
            scopes,
            ..Self::default()
        }
    }

    /// Whether this tier computes `scope` for a child in `zone`.
    pub fn owns(&self, scope: Scope, zone: &str) -> bool {
        match scope {
            Scope::Zone if self.scopes.contains(&Scope::Zone) => !self.zone_from_parent,
            Scope::Zone => self.shared_zones.iter().any(|z| z == zone),
            s => self.scopes.contains(&s),
        }
    }

    /// The scopes this tier computes for some child (a zone's groups are computed for
    /// every zone then; [`Owned::owns`] says for which children they count).
    pub fn computed(&self) -> Vec<Scope> {
        let mut out: Vec<Scope> = self
            .scopes
            .iter()
            .copied()
            .filter(|s| *s != Scope::Zone || !self.zone_from_parent)
            .collect();
        if !self.shared_zones.is_empty() && !out.contains(&Scope::Zone) {
            out.push(Scope::Zone);
        }
        out
    }

    /// Whether a child at `level` in `zone` is told that its zone is shared.
    pub fn tells_shared(&self, level: proto::Level, zone: &str) -> bool {
        level == proto::Level::Zone && self.shared_zones.iter().any(|z| z == zone)
    }

    /// Updates the shared zones from the `(level, zone)` of the fresh children, and what
    /// the parent said of this tier's zone; logs what changed.
    pub fn update<'a>(
        &mut self,
        children: impl Iterator<Item = (proto::Level, &'a str)>,
        parent_says_shared: bool,
    ) {
        let mut zones: Vec<&str> = children
            .filter(|(level, _)| *level == proto::Level::Zone)
            .map(|(_, zone)| zone)
            .collect();
        zones.sort_unstable();
        let mut shared: Vec<String> = Vec::new();
        for pair in zones.windows(2) {
            if pair[0] == pair[1] && shared.last().is_none_or(|z| z != pair[0]) {
                shared.push(pair[0].to_string());
            }
        }
        if shared != self.shared_zones {
            info!(
                zones = ?shared,
                "zones reported by several aggregators: their zone-scoped ratios are computed here"
            );
            self.shared_zones = shared;
        }
        let from_parent = parent_says_shared && self.scopes.contains(&Scope::Zone);
        if from_parent != self.zone_from_parent {
            info!(
                shared = from_parent,
                "this zone is served by several aggregators: zone-scoped ratios come from the \
                 controller while it is"
            );
            self.zone_from_parent = from_parent;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::Level::{Client, Region, Zone};

    #[test]
    fn a_controller_owns_the_zones_several_aggregators_report_from() {
        let mut o = Owned::new(vec![Scope::Global, Scope::Region]);
        assert!(!o.owns(Scope::Zone, "a"));
        assert_eq!(o.computed(), [Scope::Global, Scope::Region]);
        o.update(
            [
                (Zone, "a"),
                (Zone, "b"),
                (Zone, "a"),
                (Region, "c"),
                (Region, "c"),
            ]
            .into_iter(),
            false,
        );
        assert!(o.owns(Scope::Zone, "a") && !o.owns(Scope::Zone, "b"));
        assert!(
            !o.owns(Scope::Zone, "c"),
            "regions are not zone aggregators"
        );
        assert!(o.tells_shared(Zone, "a") && !o.tells_shared(Zone, "b"));
        assert_eq!(o.computed(), [Scope::Global, Scope::Region, Scope::Zone]);
        assert!(o.owns(Scope::Global, "a") && o.owns(Scope::Region, "a"));
        o.update([(Zone, "a"), (Zone, "b")].into_iter(), false);
        assert!(!o.owns(Scope::Zone, "a"), "back to one aggregator");
    }

    #[test]
    fn an_aggregator_gives_its_zone_up_while_the_parent_says_it_is_shared() {
        let mut o = Owned::new(vec![Scope::Zone]);
        assert!(o.owns(Scope::Zone, "a"));
        o.update([(Client, "a"), (Client, "a")].into_iter(), true);
        assert!(!o.owns(Scope::Zone, "a"));
        assert!(o.computed().is_empty());
        assert!(!o.tells_shared(Client, "a"), "clients are never told");
        o.update(std::iter::empty(), false);
        assert!(o.owns(Scope::Zone, "a"));
        assert_eq!(o.computed(), [Scope::Zone]);
    }
}
