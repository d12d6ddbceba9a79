//! `namespaces` and `stats`: what the database holds.

use clap::Args;
use ms_smt::store::NamespaceListing;
use ms_smt::{DEFAULT_PAGE, Layout, Leaf, Tree, View};
use serde_json::{Value, json};

use crate::Outcome;
use crate::db::{Db, LayoutArg, Store, TreeJob};
use crate::error::Res;
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

fn listing_json(ns: &NamespaceListing, leaves: u64) -> Value {
    json!({
        "name": ns.name,
        "leaves": leaves,
        "root": node_json(&ns.root),
        "version": ns.version,
        "stratum_height": ns.stratum_height.get(),
        "pins": ns.pins,
    })
}

/// `namespaces`: every namespace with its leaf count (a walk of its
/// leaves), root, version, stratum height and pin count.
pub async fn namespaces(db: &Db, layout: LayoutArg, out: Output) -> Res<Outcome> {
    let mut rows = Vec::new();
    for ns in db.namespaces().await? {
        let stats = db.with_tree(layout, &ns.name, LeafStats::default()).await?;
        rows.push((ns, stats.leaves));
    }
    let json = Value::Array(rows.iter().map(|(ns, n)| listing_json(ns, *n)).collect());
    out.emit(json!({ "namespaces": json }), || {
        if rows.is_empty() {
            return "no namespaces".to_owned();
        }
        let mut text = format!(
            "{:<24} {:>10} {:<64} {:>20} {:>8} {:>6} {:>4}",
            "NAMESPACE", "LEAVES", "ROOT HASH", "ROOT SUM", "VERSION", "HEIGHT", "PINS"
        );
        for (ns, leaves) in &rows {
            text.push_str(&format!(
                "\n{:<24} {:>10} {:<64} {:>20} {:>8} {:>6} {:>4}",
                name_text(&ns.name),
                leaves,
                ns.root.hash,
                ns.root.sum,
                ns.version,
                ns.stratum_height.get(),
                ns.pins
            ));
        }
        text
    });
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

/// `stats NS`: the namespace's listing, leaf statistics and pins.
pub async fn stats(db: &Db, args: StatsArgs, layout: LayoutArg, out: Output) -> Res<Outcome> {
    let ns = db.namespace(&args.ns).await?;
    let stats = db.with_tree(layout, &args.ns, LeafStats::default()).await?;
    let pins = db.with_tree(layout, &args.ns, Pins).await?;
    let mut json = listing_json(&ns, stats.leaves);
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
            node_text(&ns.root),
            ns.version,
            ns.stratum_height.get(),
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
