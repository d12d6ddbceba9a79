//! `audit NS`: recompute and check everything the namespace stores.

use clap::Args;
use indicatif::ProgressBar;
use ms_smt::{AuditReport, Layout, ProgressSink, Tree};
use serde_json::{Value, json};

use crate::Outcome;
use crate::db::{Db, DbExt, LayoutArg, Store, TreeJob};
use crate::error::Res;
use crate::output::{Output, node_json, node_text};

/// Problems printed per tree in text output (JSON lists every one the
/// report keeps).
const SHOWN: usize = 20;

/// Arguments of `audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// The namespace.
    pub ns: String,
}

/// The audit, showing the library's progress reports on `bar`.
struct Audit {
    bar: ProgressBar,
}

impl TreeJob for Audit {
    type Output = AuditReport;

    async fn run<S: Store, L: Layout>(self, tree: &Tree<S, L>) -> Res<AuditReport> {
        let report = tree.audit().await;
        self.bar.finish_and_clear();
        Ok(report?)
    }

    fn progress(&self) -> ProgressSink {
        let bar = self.bar.clone();
        ProgressSink::new(move |p| {
            if let Some(total) = p.total {
                bar.set_length(total);
            }
            bar.set_position(p.done);
        })
    }
}

fn report_json(report: &AuditReport) -> Value {
    json!({
        "clean": report.problems.is_empty() && report.more_problems == 0,
        "stored_root": node_json(&report.stored_root),
        "stored_rows": report.stored_items,
        "nodes": report.nodes,
        "leaves": report.leaves,
        "problems": report.problems.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
        "more_problems": report.more_problems,
    })
}

fn report_text(what: &str, report: &AuditReport, text: &mut String) {
    let count = report.problems.len() as u64 + report.more_problems;
    let verdict = if count == 0 {
        "clean".to_owned()
    } else {
        format!("{count} problem(s)")
    };
    text.push_str(&format!(
        "{what}: {verdict} ({} rows, {} nodes, {} leaves; root {})",
        report.stored_items,
        report.nodes,
        report.leaves,
        node_text(&report.stored_root)
    ));
    for p in report.problems.iter().take(SHOWN) {
        text.push_str(&format!("\n  {p}"));
    }
    if count > SHOWN as u64 {
        text.push_str(&format!("\n  ... and {} more", count - SHOWN as u64));
    }
}

/// `audit NS`: exit 1 when anything is wrong in the tree or a pinned one.
pub async fn audit(db: &Db, args: AuditArgs, layout: LayoutArg, out: Output) -> Res<Outcome> {
    db.namespace(&args.ns).await?;
    let job = Audit {
        bar: out.counter("audit", "items checked"),
    };
    let report = db.with_tree(layout, &args.ns, job).await?;
    let clean = report.is_clean();
    let mut json = report_json(&report);
    json["namespace"] = json!(args.ns);
    json["clean"] = json!(clean);
    json["pinned"] = Value::Array(
        report
            .pinned
            .iter()
            .map(|p| {
                let mut j = report_json(&p.report);
                j["pin"] = json!(p.pin.name);
                j["version"] = json!(p.pin.version);
                j
            })
            .collect(),
    );
    out.emit(json, || {
        let mut text = String::new();
        report_text(&format!("namespace {:?}", args.ns), &report, &mut text);
        for p in &report.pinned {
            text.push('\n');
            report_text(&format!("  pin {:?}", p.pin.name), &p.report, &mut text);
        }
        text
    });
    if clean {
        Ok(Outcome::Ok)
    } else {
        eprintln!("ms-smt: audit of {:?} found problems", args.ns);
        Ok(Outcome::Failed)
    }
}
