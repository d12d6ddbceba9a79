//! The import rule of the crate, checked on its sources: imports run one
//! way, from the primitives up to the crate root, and `mod.rs` files only
//! declare and re-export.
//!
//! ```text
//!   primitives < layout, pin < descent < strata < proof < audit < store
//!     < store's SQL core < tree < universe < metrics < federation < tapd
//!     < lib.rs,
//!     test_utils
//! ```
//!
//! Every `crate::…` path outside comments (in `use` lines and inline) is
//! resolved to the module it names; a file may name its own module or one
//! ranked below it, never one above. Equal ranks are only the primitives,
//! which import each other freely.

use std::path::{Path, PathBuf};

/// The rank of a module path (`["store", "sql", …]`); `None` for the crate
/// root (`lib.rs`) and `test_utils`, which may import anything.
fn rank(path: &[&str]) -> Option<u32> {
    let first = *path.first()?;
    Some(match first {
        "hash" | "key" | "leaf" | "lift" | "empty" | "position" | "node" | "sum" | "error"
        | "progress" | "tuning" => 0,
        "layout" | "pin" => 1,
        "descent" => 2,
        "strata" => 3,
        "proof" => 4,
        "audit" => 5,
        "store" => match path.get(1) {
            Some(&"sql") => 7,
            _ => 6,
        },
        // The SQL write path's test hooks (cargo feature `failpoints`).
        "failpoint" => 7,
        "tree" => 8,
        "universe" => 9,
        // The writer's and the store's counters in the Prometheus text
        // format: above the tree and stores it reads, below the server
        // that serves them.
        "metrics" => 10,
        // Federation over HTTP (cargo feature `http`): above the universe
        // operations and the metrics it serves.
        "federation" => 11,
        // Interop with tapd's tables: above the tree and universe
        // operations it imports into and exports from.
        "tapd" => 12,
        "lib" | "test_utils" => return None,
        other => panic!("module {other} has no rank: add it to tests/layers.rs"),
    })
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        // src/bin holds the operator CLI: its own crate over the public API.
        if path.is_dir() && path.file_name().is_some_and(|n| n != "bin") {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a source file: `src/store/sql/handle.rs` ->
/// `["store", "sql", "handle"]`, `src/store/mod.rs` -> `["store"]`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// Every `crate::a::b` path in the code (not comments) of `text`, as its
/// segments, with the line it is on.
fn crate_paths(text: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            let after = &rest[i + "crate::".len()..];
            let segments: Vec<String> = after
                .split("::")
                .map(|s| {
                    s.chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect::<String>()
                })
                .take_while(|s| !s.is_empty())
                .collect();
            // Keep module segments only (lower case): the item name ends it.
            let modules: Vec<String> = segments
                .into_iter()
                .take_while(|s| s.chars().next().is_some_and(|c| c.is_ascii_lowercase()))
                .collect();
            if !modules.is_empty() {
                out.push((n + 1, modules));
            }
            rest = after;
        }
    }
    out
}

#[test]
fn imports_run_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut violations = Vec::new();
    for file in &files {
        let module = module_of(&src, file);
        let refs: Vec<&str> = module.iter().map(String::as_str).collect();
        let Some(own) = rank(&refs) else { continue };
        let text = std::fs::read_to_string(file).expect("read source");
        for (line, path) in crate_paths(&text) {
            let target: Vec<&str> = path.iter().map(String::as_str).collect();
            // A function or macro at the crate root (`crate::fail_point!`).
            if rank(&target[..1]).is_none() && target.len() == 1 {
                continue;
            }
            let Some(theirs) = rank(&target) else {
                continue;
            };
            if theirs > own {
                violations.push(format!(
                    "{}:{line}: {} (rank {own}) imports crate::{} (rank {theirs})",
                    file.strip_prefix(&src).expect("rel").display(),
                    module.join("::"),
                    path.join("::"),
                ));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "imports that run upward:\n{}",
        violations.join("\n")
    );
}

#[test]
fn mod_files_only_declare_and_reexport() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut bad = Vec::new();
    for file in files.iter().filter(|f| f.ends_with("mod.rs")) {
        let text = std::fs::read_to_string(file).expect("read");
        for (n, line) in text.lines().enumerate() {
            let t = line.trim();
            let allowed = t.is_empty()
                || t.starts_with("//")
                || t.starts_with("#[")
                || t.starts_with("#![")
                || t.starts_with("mod ")
                || t.starts_with("pub mod ")
                || t.starts_with("pub(crate) mod ")
                || t.starts_with("pub use ")
                || t.starts_with("pub(crate) use ")
                // continuation lines of a multi-line `pub use … {…};`
                || t.ends_with(',')
                || t == "};";
            if !allowed {
                bad.push(format!("{}:{}: {t}", file.display(), n + 1));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "mod.rs files hold more than declarations:\n{}",
        bad.join("\n")
    );
}
