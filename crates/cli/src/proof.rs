//! `get`, `proof` and `verify`: leaves and their proofs.

use std::path::PathBuf;

use clap::Args;
use ms_smt::{ComputedNode, Key, Layout, Leaf, Proof, Tree};
use serde_json::json;

use crate::Outcome;
use crate::db::{Db, DbExt, LayoutArg, Store, TreeJob, view_of};
use crate::error::{CliError, Res};
use crate::output::{
    Output, leaf_json, leaf_text, node_json, node_text, parse_hash, parse_hex, parse_key,
};

/// Reads of a proof racing writers that move the tree: the leaf, proof
/// and root are read again until they agree.
const PROOF_ATTEMPTS: usize = 8;

/// Arguments of `get`.
#[derive(Debug, Args)]
pub struct GetArgs {
    /// The namespace.
    pub ns: String,
    /// The key, 64 hex digits.
    pub key: String,
    /// Read the root pinned under this name instead of the current one.
    #[arg(long)]
    pub pin: Option<String>,
}

/// Arguments of `proof`.
#[derive(Debug, Args)]
pub struct ProofArgs {
    /// The namespace.
    pub ns: String,
    /// The key, 64 hex digits.
    pub key: String,
    /// Write the raw proof bytes to this file instead of hex to stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Prove against the root pinned under this name.
    #[arg(long)]
    pub pin: Option<String>,
}

/// Arguments of `verify`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("source").required(true).args(["proof", "proof_file"]))]
pub struct VerifyArgs {
    /// The proof as hex (Go wire format).
    #[arg(long)]
    pub proof: Option<String>,
    /// A file with the proof: raw bytes (as `proof --out` writes) or hex.
    #[arg(long, value_name = "FILE")]
    pub proof_file: Option<PathBuf>,
    /// The root hash, 64 hex digits.
    #[arg(long)]
    pub root: String,
    /// The root sum.
    #[arg(long)]
    pub root_sum: u64,
    /// The key, 64 hex digits.
    #[arg(long)]
    pub key: String,
    /// The leaf's value as hex ("" with --sum 0 for an absent key).
    #[arg(long)]
    pub value: String,
    /// The leaf's sum.
    #[arg(long)]
    pub sum: u64,
}

struct Get {
    key: Key,
    pin: Option<String>,
}

impl TreeJob for Get {
    type Output = Leaf;

    async fn run<S: Store, L: Layout>(self, tree: &Tree<S, L>) -> Res<Leaf> {
        Ok(view_of(tree, self.pin.as_deref())
            .await?
            .get(&self.key)
            .await?)
    }
}

/// `get NS KEY`: the leaf, or "absent".
pub async fn get(db: &Db, args: GetArgs, layout: LayoutArg, out: Output) -> Res<Outcome> {
    let key = parse_key(&args.key)?;
    db.namespace(&args.ns).await?;
    let leaf = db
        .with_tree(layout, &args.ns, Get { key, pin: args.pin })
        .await?;
    let mut json = leaf_json(&leaf);
    json["key"] = json!(key.to_hex());
    json["present"] = json!(!leaf.is_empty());
    out.emit(json, || leaf_text(&leaf));
    Ok(Outcome::Ok)
}

struct Prove {
    key: Key,
    pin: Option<String>,
}

impl TreeJob for Prove {
    type Output = (ComputedNode, Leaf, Proof);

    async fn run<S: Store, L: Layout>(self, tree: &Tree<S, L>) -> Res<Self::Output> {
        let view = view_of(tree, self.pin.as_deref()).await?;
        let mut attempt = 0;
        loop {
            let leaf = view.get(&self.key).await?;
            let proof = view.merkle_proof(&self.key).await?;
            let root = view.root().await?;
            attempt += 1;
            if proof.verify(&self.key, &leaf, &root) || attempt >= PROOF_ATTEMPTS {
                return Ok((root, leaf, proof));
            }
        }
    }
}

/// `proof NS KEY`: the compressed proof, hex on stdout or raw to `--out`.
pub async fn proof(db: &Db, args: ProofArgs, layout: LayoutArg, out: Output) -> Res<Outcome> {
    let key = parse_key(&args.key)?;
    db.namespace(&args.ns).await?;
    let (root, leaf, proof) = db
        .with_tree(layout, &args.ns, Prove { key, pin: args.pin })
        .await?;
    let bytes = proof.to_bytes();
    if let Some(path) = &args.out {
        std::fs::write(path, &bytes).map_err(CliError::io(path))?;
    }
    let json = json!({
        "key": key.to_hex(),
        "root": node_json(&root),
        "leaf": leaf_json(&leaf),
        "present": !leaf.is_empty(),
        "proof": hex::encode(&bytes),
        "bytes": bytes.len(),
        "out": args.out.as_ref().map(|p| p.display().to_string()),
    });
    out.emit(json, || match &args.out {
        Some(path) => {
            eprintln!(
                "wrote {} bytes to {}; root {}; leaf {}",
                bytes.len(),
                path.display(),
                node_text(&root),
                leaf_text(&leaf)
            );
            String::new()
        }
        None => hex::encode(&bytes),
    });
    Ok(Outcome::Ok)
}

/// The proof bytes `args` name: hex, or a file of raw bytes or hex. A
/// raw encoding starts with its node count (at most 256, big-endian
/// u16), so its first byte is 0 or 1 and never an ASCII hex digit.
fn proof_bytes(args: &VerifyArgs) -> Res<Vec<u8>> {
    if let Some(text) = &args.proof {
        return parse_hex("proof", text);
    }
    let Some(path) = &args.proof_file else {
        return Ok(Vec::new());
    };
    let bytes = std::fs::read(path).map_err(CliError::io(path))?;
    match bytes.first() {
        Some(b) if b.is_ascii_hexdigit() => {
            parse_hex("proof file", &String::from_utf8_lossy(&bytes))
        }
        _ => Ok(bytes),
    }
}

/// `verify`: exit 1 (and a line on stderr) when the proof does not show
/// the leaf at the key under the root.
pub fn verify(args: VerifyArgs, out: Output) -> Res<Outcome> {
    let key = parse_key(&args.key)?;
    let root = ComputedNode::new(parse_hash("root", &args.root)?, args.root_sum);
    let leaf = Leaf::new(parse_hex("value", &args.value)?, args.sum);
    let proof = Proof::from_bytes(&proof_bytes(&args)?)?;
    let ok = proof.verify(&key, &leaf, &root);
    let computed = proof.root(&key, &leaf).ok();
    out.emit(
        json!({
            "verified": ok,
            "key": key.to_hex(),
            "root": node_json(&root),
            "leaf": leaf_json(&leaf),
            "computed_root": computed.as_ref().map(node_json),
        }),
        || {
            if ok {
                "verified".to_owned()
            } else {
                String::new()
            }
        },
    );
    if ok {
        return Ok(Outcome::Ok);
    }
    let why = match computed {
        Some(c) => format!("it computes root {}", node_text(&c)),
        None => "its sums overflow u64".to_owned(),
    };
    eprintln!(
        "ms-smt: proof does not verify: {why}, not {}",
        node_text(&root)
    );
    Ok(Outcome::Failed)
}
