//! `pin NS NAME` and `unpin NS NAME`.

use clap::Args;
use ms_smt::store::Pin;
use ms_smt::{Layout, Tree};
use serde_json::json;

use crate::Outcome;
use crate::db::{Db, DbExt, LayoutArg, Store, TreeJob};
use crate::error::{CliError, Res};
use crate::output::{Output, node_json, node_text};

/// Arguments of `pin` and `unpin`.
#[derive(Debug, Args)]
pub struct PinArgs {
    /// The namespace.
    pub ns: String,
    /// The pin's name.
    pub name: String,
}

struct MakePin(String);

impl TreeJob for MakePin {
    type Output = Pin;

    async fn run<S: Store, L: Layout>(self, tree: &Tree<S, L>) -> Res<Pin> {
        Ok(tree.pin(&self.0).await?)
    }
}

struct RemovePin(String);

impl TreeJob for RemovePin {
    type Output = bool;

    async fn run<S: Store, L: Layout>(self, tree: &Tree<S, L>) -> Res<bool> {
        Ok(tree.unpin(&self.0).await?)
    }
}

/// `pin NS NAME`: pins the current root (replacing a pin of that name).
pub async fn pin(db: &Db, args: PinArgs, layout: LayoutArg, out: Output) -> Res<Outcome> {
    db.namespace(&args.ns).await?;
    let pin = db
        .with_tree(layout, &args.ns, MakePin(args.name.clone()))
        .await?;
    out.emit(
        json!({ "namespace": args.ns, "pin": pin.name, "version": pin.version, "root": node_json(&pin.root) }),
        || {
            format!(
                "pinned {:?} at version {}: {}",
                pin.name,
                pin.version,
                node_text(&pin.root)
            )
        },
    );
    Ok(Outcome::Ok)
}

/// `unpin NS NAME`: an error when there is no such pin.
pub async fn unpin(db: &Db, args: PinArgs, layout: LayoutArg, out: Output) -> Res<Outcome> {
    db.namespace(&args.ns).await?;
    let removed = db
        .with_tree(layout, &args.ns, RemovePin(args.name.clone()))
        .await?;
    if !removed {
        return Err(CliError::NoSuchPin {
            namespace: args.ns,
            name: args.name,
        });
    }
    out.emit(
        json!({ "namespace": args.ns, "unpinned": args.name }),
        || format!("unpinned {:?}", args.name),
    );
    Ok(Outcome::Ok)
}
