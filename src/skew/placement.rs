//! Where the pin `skew` suggests goes in a route table, and what it changes there: the first pin
//! that matches decides, so pasted before the team's own pins it would take what they name, and a
//! pin's reads follow it, so it takes its resources' reads from the rollouts too.

use super::{KindSkew, Report};
use crate::config::{PinReads, ResourcePattern, RouteTable, Selector, Selectors, may_meet};

impl Report {
    /// What a person must know to paste `suggested_pins` into `table`: where, and what it changes.
    pub fn placement(&self, table: &RouteTable) -> String {
        let items: Vec<ResourcePattern> = (self.kinds.iter())
            .filter_map(|k| ResourcePattern::parse(&KindSkew::selector_name(k)).ok())
            .collect();
        if items.is_empty() {
            return String::new();
        }
        let pin = Selectors {
            resources: Some(Selector {
                include: items,
                exclude: Vec::new(),
            }),
            ..Selectors::default()
        };
        let names = |n: Vec<&str>| {
            n.iter()
                .map(|n| format!("{n:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let pins: Vec<&str> = (table.writes.pins.iter())
            .filter(|p| may_meet(&p.selectors, &pin))
            .map(|p| p.name.as_str())
            .collect();
        let rollouts: Vec<&str> = (table.reads.rollouts.iter())
            .filter(|r| may_meet(&r.selectors, &pin))
            .map(|r| r.name.as_str())
            .collect();
        let file = table.source.display();
        let mut out = match pins.len() {
            0 => format!("# Where it goes: in writes.pins of {file}.\n"),
            _ => format!(
                "# Where it goes: at the end of writes.pins of {file}, after {}. The first pin that\n# matches decides: pasted before them, it would take the objects they name.\n",
                names(pins)
            ),
        };
        let follows = table
            .writes
            .pins
            .iter()
            .all(|p| p.reads == PinReads::Follow);
        let default = table.backend_name(table.writes.default);
        if !rollouts.is_empty() && follows {
            out.push_str(&format!(
                "# What it changes: the reads of these resources follow it to {default:?}, so the rollouts\n# {} no longer decide them; add `reads: rollout` to the pin to leave them those\n# reads (check then warns that they are read and written apart, unless a guard covers them).\n",
                names(rollouts)
            ));
        }
        out
    }
}
