//! The binary footprint of verifying one compressed proof: this program
//! decodes a proof in the Go wire format strictly and checks it against a
//! root, and nothing else (no store, no runtime, no JSON).
//!
//! ```text
//! cargo build --release -p ms-smt-core --example verify_footprint
//! strip -o /tmp/verify_footprint target/release/examples/verify_footprint
//! verify_footprint KEY VALUE SUM ROOT_HASH ROOT_SUM PROOF   # hex, decimal
//! ```
//!
//! Exits 0 when the proof shows the leaf (`VALUE`, `SUM`) at `KEY` under the
//! root, 1 when it does not, 2 on malformed arguments or proof bytes.

use std::process::ExitCode;

use ms_smt_core::{ComputedNode, Hash, Key, Leaf, Proof};

fn run(args: &[String]) -> Result<bool, String> {
    let [key, value, sum, root_hash, root_sum, proof] = args else {
        return Err("usage: verify_footprint KEY VALUE SUM ROOT_HASH ROOT_SUM PROOF".into());
    };
    let key: Key = key.parse().map_err(|e| format!("key: {e}"))?;
    let value = hex::decode(value).map_err(|e| format!("value: {e}"))?;
    let sum = sum.parse().map_err(|e| format!("sum: {e}"))?;
    let root_hash: Key = root_hash.parse().map_err(|e| format!("root hash: {e}"))?;
    let root_sum = root_sum.parse().map_err(|e| format!("root sum: {e}"))?;
    let bytes = hex::decode(proof).map_err(|e| format!("proof: {e}"))?;
    let proof = Proof::from_bytes(&bytes).map_err(|e| format!("proof: {e}"))?;
    let root = ComputedNode::new(Hash(root_hash.0), root_sum);
    Ok(proof.verify(&key, &Leaf::new(value, sum), &root))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(why) => {
            eprintln!("{why}");
            ExitCode::from(2)
        }
    }
}
