//! `diff NS1 NS2`: the keys whose leaves differ between two namespaces of
//! one database, streamed a page at a time.

use std::io::Write;

use clap::Args;
use ms_smt::{DiffEntry, Layout, Tree};
use serde_json::json;

use crate::Outcome;
use crate::db::{Db, DbExt, LayoutArg, Store, TreeJob};
use crate::error::{CliError, Res};
use crate::output::{Output, leaf_json, leaf_text};

/// Arguments of `diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The old namespace.
    pub ns1: String,
    /// The new namespace.
    pub ns2: String,
}

struct Diff {
    other: String,
    out: Output,
}

/// Writes one difference.
fn entry(out: Output, first: bool, e: &DiffEntry, w: &mut impl Write) -> std::io::Result<()> {
    if out.json {
        let mut j =
            json!({ "key": e.key.to_hex(), "old": leaf_json(&e.old), "new": leaf_json(&e.new) });
        j["old"]["present"] = json!(!e.old.is_empty());
        j["new"]["present"] = json!(!e.new.is_empty());
        write!(w, "{}{j}", if first { "" } else { "," })
    } else {
        let mark = match (e.old.is_empty(), e.new.is_empty()) {
            (true, _) => '+',
            (_, true) => '-',
            _ => '~',
        };
        writeln!(
            w,
            "{mark} {}  {} -> {}",
            e.key,
            leaf_text(&e.old),
            leaf_text(&e.new)
        )
    }
}

impl TreeJob for Diff {
    type Output = u64;

    /// Streams the differences to stdout; returns how many there were.
    async fn run<S: Store, L: Layout>(self, tree: &Tree<S, L>) -> Res<u64> {
        let other: Tree<S, L> = Tree::new(tree.store().open_namespace(&self.other)?);
        let (old, new) = (tree.view(), other.view());
        let mut diff = old.diff(&new);
        let stdout = std::io::stdout();
        let mut w = std::io::BufWriter::new(stdout.lock());
        let io = CliError::io("stdout");
        let mut count = 0u64;
        if self.out.json {
            write!(
                w,
                "{{\"old\":{},\"new\":{},\"differences\":[",
                json!(tree.store().name()),
                json!(self.other)
            )
            .map_err(io)?;
        }
        loop {
            let page = diff.next_page().await?;
            if page.is_empty() {
                break;
            }
            for e in &page {
                entry(self.out, count == 0, e, &mut w).map_err(CliError::io("stdout"))?;
                count += 1;
            }
        }
        let io = CliError::io("stdout");
        if self.out.json {
            writeln!(w, "],\"count\":{count},\"same\":{}}}", count == 0).map_err(io)?;
        } else if count == 0 {
            writeln!(w, "no differences").map_err(io)?;
        } else {
            writeln!(w, "{count} difference(s)").map_err(io)?;
        }
        w.flush().map_err(CliError::io("stdout"))?;
        Ok(count)
    }
}

/// `diff NS1 NS2`: exit 1 when any key differs.
pub async fn diff(db: &Db, args: DiffArgs, layout: LayoutArg, out: Output) -> Res<Outcome> {
    db.namespace(&args.ns1).await?;
    db.namespace(&args.ns2).await?;
    let job = Diff {
        other: args.ns2,
        out,
    };
    let count = db.with_tree(layout, &args.ns1, job).await?;
    Ok(if count == 0 {
        Outcome::Ok
    } else {
        Outcome::Failed
    })
}
