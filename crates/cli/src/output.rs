//! Printing: human-readable text or, with `--json`, one JSON document per
//! command on stdout; parsing the hex arguments commands take.

use std::str::FromStr;

use indicatif::{ProgressBar, ProgressStyle};
use ms_smt::{ComputedNode, Hash, Key, Leaf};
use serde_json::{Value, json};

use crate::error::{CliError, Res};

/// How a command prints.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    /// `--json`: machine-readable output.
    pub json: bool,
}

impl Output {
    /// Prints `json` with `--json`, else the text `human` makes.
    pub fn emit(&self, json: Value, human: impl FnOnce() -> String) {
        if self.json {
            println!("{json}");
        } else {
            let text = human();
            if !text.is_empty() {
                println!("{text}");
            }
        }
    }

    /// A progress bar on stderr over `len` items (hidden when stderr is
    /// not a terminal, and with `--json`).
    pub fn bar(&self, len: u64, what: &str) -> ProgressBar {
        self.styled(len, what, "{human_pos}/{human_len}")
    }

    /// [`bar`](Self::bar) over `len` bytes.
    pub fn byte_bar(&self, len: u64, what: &str) -> ProgressBar {
        self.styled(len, what, "{binary_bytes}/{binary_total_bytes}")
    }

    /// A counter on stderr for work whose total may be unknown until it
    /// ends (a spinner with the count of `unit`; hidden as [`bar`](Self::bar) is).
    pub fn counter(&self, what: &str, unit: &str) -> ProgressBar {
        if self.json {
            return ProgressBar::hidden();
        }
        let template = format!("{{msg:>7}} [{{elapsed_precise}}] {{spinner}} {{human_pos}} {unit}");
        let style = ProgressStyle::with_template(&template)
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        let bar = ProgressBar::new_spinner().with_style(style);
        bar.set_message(what.to_owned());
        bar
    }

    fn styled(&self, len: u64, what: &str, counts: &str) -> ProgressBar {
        if self.json {
            return ProgressBar::hidden();
        }
        let template =
            format!("{{msg:>7}} [{{elapsed_precise}}] {{wide_bar}} {counts} (eta {{eta}})");
        let style = ProgressStyle::with_template(&template)
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        let bar = ProgressBar::new(len).with_style(style);
        bar.set_message(what.to_owned());
        bar
    }
}

/// A node as JSON: hash (hex) and sum.
pub fn node_json(node: &ComputedNode) -> Value {
    json!({ "hash": node.hash.to_hex(), "sum": node.sum })
}

/// A leaf as JSON: value (hex) and sum.
pub fn leaf_json(leaf: &Leaf) -> Value {
    json!({ "value": hex::encode(leaf.value()), "sum": leaf.sum() })
}

/// A node as text.
pub fn node_text(node: &ComputedNode) -> String {
    format!("{} sum {}", node.hash, node.sum)
}

/// A leaf as text.
pub fn leaf_text(leaf: &Leaf) -> String {
    if leaf.is_empty() {
        "absent".to_owned()
    } else {
        format!("value {} sum {}", hex::encode(leaf.value()), leaf.sum())
    }
}

/// A namespace name as printed: control characters escaped (an import's
/// staging namespace ends in U+001F).
pub fn name_text(name: &str) -> String {
    name.escape_debug().to_string()
}

/// A key argument (64 hex digits).
pub fn parse_key(text: &str) -> Res<Key> {
    Key::from_str(text.trim()).map_err(|source| CliError::BadKey {
        text: text.to_owned(),
        source,
    })
}

/// A hex argument (may be empty).
pub fn parse_hex(what: &'static str, text: &str) -> Res<Vec<u8>> {
    hex::decode(text.trim()).map_err(|source| CliError::BadHex { what, source })
}

/// A 32-byte hash argument.
pub fn parse_hash(what: &'static str, text: &str) -> Res<Hash> {
    let bytes = parse_hex(what, text)?;
    let len = bytes.len();
    <[u8; 32]>::try_from(bytes)
        .map(Hash)
        .map_err(|_| CliError::HashLength { what, len })
}
