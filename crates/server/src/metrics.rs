//! The writer's and the store's counters in the Prometheus text exposition
//! format (version 0.0.4), the format operators already scrape: for a host
//! that serves its own `/metrics` route.
//!
//! ```
//! use ms_smt_server::metrics::{CONTENT_TYPE, Metrics};
//! use ms_smt::store::StoreStats;
//! use ms_smt::WriterStats;
//!
//! let writer = WriterStats::default();          // writer.stats() in a host
//! let store = StoreStats::default();            // tree.store().stats()
//! let body = Metrics::new()
//!     .writer("universe", &writer)
//!     .store("universe-1", &store)
//!     .render();
//! assert!(body.contains("ms_smt_writer_groups_total{writer=\"universe\"} 0"));
//! assert_eq!(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
//! ```
//!
//! Every family is written once with its `# HELP` and `# TYPE` lines, its
//! samples together (one per writer, store handle or namespace), labels
//! escaped as the format says. Counters end in `_total`; times are in
//! seconds. The metrics:
//!
//! * per writer (`writer` label), from [`WriterStats`]: groups,
//!   acknowledged submissions and leaves, rejected, failed and abandoned
//!   submissions, lost races, recoveries, groups planned ahead, seconds
//!   planning, committing and waiting, trees written, the largest group,
//!   and groups by size (`leaves` label: `1`, `2-3`, `4-7`, ...);
//! * per store handle (`namespace` label), from [`StoreStats`]: round
//!   trips, statements, nodes read, written and remembered, conflicts;
//! * per namespace of an SQL database (`namespace` label), from a listing
//!   (`SqlStore::namespaces`, O(namespaces)): leaves (when counted),
//!   version, pins, root sum, and 1 for a damaged namespace.

use std::fmt::Write;

use crate::store::StoreStats;
use ms_smt::WriterStats;

/// The `Content-Type` of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What a metric is, for its `# TYPE` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
}

/// One family: its name, help, kind and samples (labels, value).
struct Family {
    name: &'static str,
    help: &'static str,
    kind: Kind,
    samples: Vec<(Vec<(&'static str, String)>, String)>,
}

/// The counters to expose, gathered from writers, store handles and (with
/// an SQL store) a namespace listing, rendered in one go.
#[derive(Default)]
pub struct Metrics {
    families: Vec<Family>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("families", &self.families.len())
            .finish()
    }
}

impl Metrics {
    /// Nothing yet.
    pub fn new() -> Self {
        Metrics::default()
    }

    fn add(
        &mut self,
        name: &'static str,
        help: &'static str,
        kind: Kind,
        labels: Vec<(&'static str, String)>,
        value: String,
    ) {
        let at = match self.families.iter().position(|f| f.name == name) {
            Some(at) => at,
            None => {
                self.families.push(Family {
                    name,
                    help,
                    kind,
                    samples: Vec::new(),
                });
                self.families.len() - 1
            }
        };
        self.families[at].samples.push((labels, value));
    }

    /// A writer's counters ([`Writer::stats`](ms_smt::Writer::stats),
    /// [`ForestWriter::stats`](ms_smt::ForestWriter::stats)), labelled
    /// `writer="<name>"`.
    pub fn writer(mut self, name: &str, stats: &WriterStats) -> Self {
        use Kind::{Counter, Gauge};
        let label = || vec![("writer", name.to_owned())];
        let counters: [(&'static str, &'static str, u64); 10] = [
            (
                "ms_smt_writer_groups_total",
                "Groups written (one descent and at most one commit each).",
                stats.groups,
            ),
            (
                "ms_smt_writer_submissions_acknowledged_total",
                "Submissions acknowledged (durable).",
                stats.acknowledged,
            ),
            (
                "ms_smt_writer_leaves_acknowledged_total",
                "Leaves in acknowledged submissions.",
                stats.leaves,
            ),
            (
                "ms_smt_writer_submissions_rejected_total",
                "Submissions rejected alone (they would overflow a sum).",
                stats.rejected,
            ),
            (
                "ms_smt_writer_submissions_failed_total",
                "Submissions failed with their group.",
                stats.failed,
            ),
            (
                "ms_smt_writer_submissions_abandoned_total",
                "Submissions dropped by their submitter before their group sealed.",
                stats.abandoned,
            ),
            (
                "ms_smt_writer_lost_races_total",
                "Commits lost to another writer's (retried).",
                stats.lost_races,
            ),
            (
                "ms_smt_writer_recoveries_total",
                "Times a group waited for a store out of reach and found it again.",
                stats.recovered,
            ),
            (
                "ms_smt_writer_groups_planned_ahead_total",
                "Groups committed on a plan made while the previous commit was in flight.",
                stats.planned_ahead,
            ),
            (
                "ms_smt_writer_trees_written_total",
                "Trees written by the groups, summed (parents included).",
                stats.trees,
            ),
        ];
        for (metric, help, value) in counters {
            self.add(metric, help, Counter, label(), value.to_string());
        }
        let times = [
            (
                "ms_smt_writer_planning_seconds_total",
                "Time spent reading and planning groups.",
                stats.planning,
            ),
            (
                "ms_smt_writer_committing_seconds_total",
                "Time groups' commits took.",
                stats.committing,
            ),
            (
                "ms_smt_writer_waiting_seconds_total",
                "Time a planned group waited for the previous commit.",
                stats.waiting,
            ),
        ];
        for (metric, help, value) in times {
            self.add(metric, help, Counter, label(), seconds(value));
        }
        self.add(
            "ms_smt_writer_largest_group_leaves",
            "The largest group so far, in leaves.",
            Gauge,
            label(),
            stats.largest_group.to_string(),
        );
        for (i, count) in stats.group_sizes.iter().enumerate() {
            let low = 1u64 << i;
            let size = match i {
                0 => "1".to_owned(),
                _ if i + 1 == stats.group_sizes.len() => format!("{low}+"),
                _ => format!("{low}-{}", (low << 1) - 1),
            };
            self.add(
                "ms_smt_writer_groups_by_leaves_total",
                "Groups by their size in leaves.",
                Counter,
                vec![("writer", name.to_owned()), ("leaves", size)],
                count.to_string(),
            );
        }
        self
    }

    /// A store handle's counters ([`TreeStore::stats`](crate::store::TreeStore::stats)),
    /// labelled `namespace="<name>"`.
    pub fn store(mut self, namespace: &str, stats: &StoreStats) -> Self {
        let counters: [(&'static str, &'static str, u64); 6] = [
            (
                "ms_smt_store_round_trips_total",
                "Calls that waited on the store (queries, or whole transactions).",
                stats.round_trips,
            ),
            (
                "ms_smt_store_statements_total",
                "SQL statements executed.",
                stats.statements,
            ),
            (
                "ms_smt_store_nodes_read_total",
                "Nodes returned by reads.",
                stats.nodes_read,
            ),
            (
                "ms_smt_store_nodes_written_total",
                "Node rows changed by commits.",
                stats.nodes_written,
            ),
            (
                "ms_smt_store_nodes_remembered_total",
                "Node lookups answered from the handle's recent nodes.",
                stats.nodes_remembered,
            ),
            (
                "ms_smt_store_conflicts_total",
                "Commits refused because another writer had moved the root.",
                stats.conflicts,
            ),
        ];
        for (metric, help, value) in counters {
            self.add(
                metric,
                help,
                Kind::Counter,
                vec![("namespace", namespace.to_owned())],
                value.to_string(),
            );
        }
        self
    }

    /// Gauges of every namespace of a listing
    /// ([`SqlStore::namespaces`](ms_smt_sql::SqlStore::namespaces)):
    /// leaves (counted ones only), version, pins and root sum, and
    /// `ms_smt_namespace_damaged` (1 for a damaged namespace, 0 otherwise).
    pub fn namespaces(mut self, listing: &[ms_smt_sql::NamespaceListing]) -> Self {
        use Kind::Gauge;
        self.add(
            "ms_smt_namespaces",
            "Namespaces in the database.",
            Gauge,
            Vec::new(),
            listing.len().to_string(),
        );
        for ns in listing {
            let label = || vec![("namespace", ns.name.clone())];
            self.add(
                "ms_smt_namespace_damaged",
                "1 when the namespace's row or root row is damaged (run an audit).",
                Gauge,
                label(),
                u8::from(ns.summary.is_err()).to_string(),
            );
            let Ok(s) = &ns.summary else {
                continue;
            };
            if let Some(leaves) = s.leaves.exact() {
                self.add(
                    "ms_smt_namespace_leaves",
                    "Leaves in the namespace's tree.",
                    Gauge,
                    label(),
                    leaves.to_string(),
                );
            }
            self.add(
                "ms_smt_namespace_version",
                "Commits the namespace has taken.",
                Gauge,
                label(),
                s.version.to_string(),
            );
            self.add(
                "ms_smt_namespace_pins",
                "Pins the namespace holds.",
                Gauge,
                label(),
                s.pins.to_string(),
            );
            self.add(
                "ms_smt_namespace_root_sum",
                "The sum of the namespace's root.",
                Gauge,
                label(),
                s.root.sum.to_string(),
            );
        }
        self
    }

    /// The text exposition: every family once, with `# HELP` and `# TYPE`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for family in &self.families {
            let kind = match family.kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
            };
            // Writing to a String cannot fail.
            let _ = writeln!(out, "# HELP {} {}", family.name, family.help);
            let _ = writeln!(out, "# TYPE {} {kind}", family.name);
            for (labels, value) in &family.samples {
                out.push_str(family.name);
                if !labels.is_empty() {
                    out.push('{');
                    for (i, (key, value)) in labels.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        let _ = write!(out, "{key}=\"{}\"", escape(value));
                    }
                    out.push('}');
                }
                let _ = writeln!(out, " {value}");
            }
        }
        out
    }
}

/// A duration in seconds, as the format writes floats.
fn seconds(d: std::time::Duration) -> String {
    format!("{}", d.as_secs_f64())
}

/// A label value escaped: backslash, double quote and line feed.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Every line is a `# HELP`/`# TYPE` line of the family that follows,
    /// or a sample `name{k="v",...} value` of the last family announced;
    /// no family is announced twice.
    fn check_format(text: &str) -> Vec<(String, String)> {
        let mut announced: Vec<String> = Vec::new();
        let mut samples = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().expect("name").to_owned();
                assert!(!announced.contains(&name), "{name} announced twice");
                announced.push(name);
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("type");
                assert_eq!(Some(&name.to_owned()), announced.last());
                assert!(kind == "counter" || kind == "gauge", "{kind}");
            } else {
                let (series, value) = line.rsplit_once(' ').expect("a value");
                value.parse::<f64>().expect("a number");
                let name = series.split('{').next().expect("name");
                assert_eq!(Some(&name.to_owned()), announced.last(), "{line}");
                if let Some(labels) = series.strip_prefix(name).filter(|l| !l.is_empty()) {
                    assert!(labels.starts_with('{') && labels.ends_with('}'), "{line}");
                }
                samples.push((series.to_owned(), value.to_owned()));
            }
        }
        samples
    }

    #[test]
    fn writers_and_stores_render_as_grouped_families() {
        let mut w = WriterStats {
            groups: 3,
            acknowledged: 10,
            leaves: 12,
            planning: Duration::from_millis(1500),
            largest_group: 7,
            ..WriterStats::default()
        };
        w.group_sizes[0] = 1;
        w.group_sizes[2] = 2;
        let s = StoreStats {
            round_trips: 5,
            nodes_read: 9,
            ..StoreStats::default()
        };
        let text = Metrics::new()
            .writer("a", &w)
            .store("ns-1", &s)
            .writer("b", &WriterStats::default())
            .store("ns-2", &StoreStats::default())
            .render();
        let samples = check_format(&text);
        let get = |series: &str| {
            samples
                .iter()
                .find(|(s, _)| s == series)
                .map(|(_, v)| v.as_str())
                .unwrap_or_else(|| panic!("{series} missing in\n{text}"))
        };
        assert_eq!(get("ms_smt_writer_groups_total{writer=\"a\"}"), "3");
        assert_eq!(get("ms_smt_writer_groups_total{writer=\"b\"}"), "0");
        assert_eq!(
            get("ms_smt_writer_planning_seconds_total{writer=\"a\"}"),
            "1.5"
        );
        assert_eq!(
            get("ms_smt_writer_groups_by_leaves_total{writer=\"a\",leaves=\"4-7\"}"),
            "2"
        );
        assert_eq!(
            get("ms_smt_writer_groups_by_leaves_total{writer=\"a\",leaves=\"32768+\"}"),
            "0"
        );
        assert_eq!(
            get("ms_smt_store_round_trips_total{namespace=\"ns-1\"}"),
            "5"
        );
        assert_eq!(
            get("ms_smt_store_nodes_read_total{namespace=\"ns-2\"}"),
            "0"
        );
        // Both writers' samples of a family sit together.
        let groups: Vec<usize> = text
            .lines()
            .enumerate()
            .filter(|(_, l)| l.starts_with("ms_smt_writer_groups_total{"))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[1], groups[0] + 1);
    }

    #[test]
    fn label_values_are_escaped() {
        let text = Metrics::new()
            .store("a\"b\\c\nd", &StoreStats::default())
            .render();
        assert!(
            text.contains("ms_smt_store_conflicts_total{namespace=\"a\\\"b\\\\c\\nd\"} 0"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 6 * 3);
    }

    #[test]
    fn nothing_renders_nothing() {
        assert_eq!(Metrics::new().render(), "");
    }
}
