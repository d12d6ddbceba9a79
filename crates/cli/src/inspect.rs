//! `namespaces` and `stats`: what the database holds.

use clap::Args;
use ms_smt::{DEFAULT_PAGE, Layout, Leaf, Tree, View};
use ms_smt_sql::{LeafCount, NamespaceListing, NamespaceSummary};
use serde_json::{Value, json};

use crate::Outcome;
use crate::db::{Db, DbExt, LayoutArg, Store, TreeJob};
use crate::error::{CliError, Res};
use crate::output::{Output, name_text, node_json, node_text};

/// Arguments of `stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The namespace.
    pub ns: String,
}

/// What a walk over every leaf of a tree finds.
#[derive(Debug, Default)]
pub struct LeafStats {
    /// How many leaves.
    pub leaves: u64,
    value_bytes: u64,
    max_sum: u64,
}

impl TreeJob for LeafStats {
    type Output = LeafStats;

    async fn run<S: Store, L: Layout>(self, tree: &Tree<S, L>) -> Res<LeafStats> {
        leaf_stats(tree.view()).await
    }
}

/// A walk of every leaf `view` reads, a page at a time.
pub async fn leaf_stats<S: Store, L: Layout>(view: View<'_, S, L>) -> Res<LeafStats> {
    let mut stats = LeafStats::default();
    let mut leaves = view.leaves(..).with_page(DEFAULT_PAGE * 4);
    loop {
        let page = leaves.next_page().await?;
        if page.is_empty() {
            return Ok(stats);
        }
        for entry in page {
            stats.add(&entry.leaf);
        }
    }
}

impl LeafStats {
    fn add(&mut self, leaf: &Leaf) {
        self.leaves += 1;
        self.value_bytes += leaf.value().len() as u64;
        self.max_sum = self.max_sum.max(leaf.sum());
    }
}

/// A namespace's listing as JSON: its summary, or its damage.
fn listing_json(ns: &NamespaceListing) -> Value {
    match &ns.summary {
        Ok(s) => json!({
            "name": ns.name,
            "leaves": s.leaves.exact(),
            "leaves_uncounted_since": match s.leaves {
                LeafCount::Uncounted { since_version } => Some(since_version),
                LeafCount::Exact(_) => None,
            },
            "root": node_json(&s.root),
            "version": s.version,
            "stratum_height": s.stratum_height.get(),
            "pins": s.pins,
        }),
        Err(damage) => json!({ "name": ns.name, "damage": damage.to_string() }),
    }
}

/// A leaf count as printed: the number, or `?` while it is uncounted.
fn leaves_text(leaves: LeafCount) -> String {
    match leaves {
        LeafCount::Exact(n) => n.to_string(),
        LeafCount::Uncounted { .. } => "?".to_owned(),
    }
}

/// `namespaces`: every namespace with its leaf count, root, version,
/// stratum height and pin count, from the namespace rows the store keeps
/// (no tree is read: O(namespaces)). A damaged namespace is listed with
/// what is wrong and the command exits 1; the others are listed as usual.
/// The layout does not matter here (the rows do not depend on it).
pub async fn namespaces(db: &Db, _layout: LayoutArg, out: Output) -> Res<Outcome> {
    let rows = db.namespaces().await?;
    let damaged = rows.iter().filter(|ns| ns.summary.is_err()).count();
    let uncounted = rows
        .iter()
        .filter(|ns| {
            matches!(
                ns.summary,
                Ok(NamespaceSummary {
                    leaves: LeafCount::Uncounted { .. },
                    ..
                })
            )
        })
        .count();
    let json = Value::Array(rows.iter().map(listing_json).collect());
    out.emit(json!({ "namespaces": json, "damaged": damaged }), || {
        if rows.is_empty() {
            return "no namespaces".to_owned();
        }
        let mut text = format!(
            "{:<24} {:>10} {:<64} {:>20} {:>8} {:>6} {:>4}",
            "NAMESPACE", "LEAVES", "ROOT HASH", "ROOT SUM", "VERSION", "HEIGHT", "PINS"
        );
        for ns in &rows {
            match &ns.summary {
                Ok(s) => text.push_str(&format!(
                    "\n{:<24} {:>10} {:<64} {:>20} {:>8} {:>6} {:>4}",
                    name_text(&ns.name),
                    leaves_text(s.leaves),
                    s.root.hash,
                    s.root.sum,
                    s.version,
                    s.stratum_height.get(),
                    s.pins
                )),
                Err(damage) => text.push_str(&format!(
                    "\n{:<24} DAMAGED: {damage} (run `ms-smt audit`)",
                    name_text(&ns.name)
                )),
            }
        }
        if uncounted > 0 {
            text.push_str(&format!(
                "\n{uncounted} namespace(s) written before leaf counts were kept show `?`: \
                 `ms-smt maintain` counts them once"
            ));
        }
        text
    });
    if damaged > 0 {
        eprintln!("ms-smt: {damaged} damaged namespace(s)");
        return Ok(Outcome::Failed);
    }
    Ok(Outcome::Ok)
}

/// Reads every pin of a tree.
struct Pins;

impl TreeJob for Pins {
    type Output = Vec<ms_smt::store::Pin>;

    async fn run<S: Store, L: Layout>(self, tree: &Tree<S, L>) -> Res<Self::Output> {
        Ok(tree.pins().await?)
    }
}

/// `stats NS`: the namespace's listing, leaf statistics (a walk of its
/// leaves) and pins.
pub async fn stats(db: &Db, args: StatsArgs, layout: LayoutArg, out: Output) -> Res<Outcome> {
    let ns = db.namespace(&args.ns).await?;
    let summary = ns.summary.clone().map_err(|damage| CliError::Damaged {
        namespace: ns.name.clone(),
        damage,
    })?;
    let stats = db.with_tree(layout, &args.ns, LeafStats::default()).await?;
    let pins = db.with_tree(layout, &args.ns, Pins).await?;
    let mut json = listing_json(&ns);
    json["leaves"] = json!(stats.leaves);
    json["value_bytes"] = json!(stats.value_bytes);
    json["max_leaf_sum"] = json!(stats.max_sum);
    json["pins"] = Value::Array(
        pins.iter()
            .map(|p| json!({ "name": p.name, "version": p.version, "root": node_json(&p.root) }))
            .collect(),
    );
    out.emit(json, || {
        let mut text = format!(
            "namespace      {}\nleaves         {}\nroot           {}\nversion        {}\nstratum height {}\nvalue bytes    {}\nmax leaf sum   {}\npins           {}",
            name_text(&ns.name),
            stats.leaves,
            node_text(&summary.root),
            summary.version,
            summary.stratum_height.get(),
            stats.value_bytes,
            stats.max_sum,
            pins.len()
        );
        for p in &pins {
            text.push_str(&format!(
                "\n  pin {:?} at version {}: {}",
                p.name,
                p.version,
                node_text(&p.root)
            ));
        }
        text
    });
    Ok(Outcome::Ok)
}
