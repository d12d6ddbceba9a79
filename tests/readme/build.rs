//! Turns every ```rust block of the README into
//! `async fn readme_example_N() -> Result<(), Box<dyn Error + Send + Sync>>`
//! (in `$OUT_DIR/examples.rs`), and a list of them, so that the examples
//! compile exactly as the README shows them.

use std::fmt::Write;
use std::path::PathBuf;

fn main() {
    let readme = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    println!("cargo::rerun-if-changed={}", readme.display());
    let text = std::fs::read_to_string(&readme).expect("read README.md");
    let mut blocks: Vec<(usize, String)> = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        match (&mut current, line.trim_end()) {
            (None, "```rust") => current = Some((n + 2, String::new())),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some((_, body)), _) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(current.is_none(), "README.md: an unclosed ```rust block");
    assert!(!blocks.is_empty(), "README.md has no ```rust block");
    let mut out = String::new();
    for (i, (line, body)) in blocks.iter().enumerate() {
        writeln!(
            out,
            "/// The README's example {i} (its line {line}).\n\
             async fn readme_example_{i}() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {{\n\
             {body}}}\n"
        )
        .expect("write");
    }
    writeln!(out, "/// Every example: its README line, its function.").expect("write");
    writeln!(
        out,
        "fn examples() -> Vec<(usize, ExampleFuture)> {{\n    vec!["
    )
    .expect("write");
    for (i, (line, _)) in blocks.iter().enumerate() {
        writeln!(out, "        ({line}, Box::pin(readme_example_{i}())),").expect("write");
    }
    writeln!(out, "    ]\n}}").expect("write");
    let dest = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("examples.rs");
    std::fs::write(dest, out).expect("write examples.rs");
}
