//! `ms-smt tapd audit|import|export` on copies of the tapd SQLite fixture
//! (../shared/fixtures/tapd, or $MSSMT_TAPD_FIXTURES): exit codes, the
//! per-namespace JSON, nothing written on bad input.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cli_support::{Run, ms_smt};
use serde_json::Value;

fn fixture() -> PathBuf {
    support::tapd_fixtures().join("tapd-sqlite.db")
}

/// A copy of the fixture in `dir`.
fn copy(dir: &Path) -> String {
    let path = dir.join("tapd.db");
    std::fs::copy(fixture(), &path).expect("copy fixture");
    path.to_string_lossy().into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Runs `ms-smt --db <db> <args>`.
fn on_db(db: &Path, args: &[&str]) -> Run {
    ms_smt(&[&["--db", s(db)], args].concat())
}

/// Runs `ms-smt --db <db> tapd import --from <from> --namespace <namespace>`.
fn import_one(db: &Path, from: &str, namespace: &str) -> Run {
    on_db(
        db,
        &["tapd", "import", "--from", from, "--namespace", namespace],
    )
}

/// Runs `ms-smt --db <db> tapd export --to <to> <flags>`.
fn export(db: &Path, to: &Path, flags: &[&str]) -> Run {
    on_db(db, &[&["tapd", "export", "--to", s(to)], flags].concat())
}

#[test]
fn audit_import_export_round_trip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = copy(dir.path());
    let before = std::fs::read(&src).expect("read");
    let audit = ms_smt(&["tapd", "audit", "--from", &src, "--json"]);
    assert_eq!(audit.code, 0, "{}", audit.stderr);
    let objects = audit.objects();
    let names: Vec<&str> = objects
        .iter()
        .map(|o| o["namespace"].as_str().expect("ns"))
        .collect();
    assert_eq!(names, ["universe-a", "universe-b", "universe-c"]);
    for o in &objects {
        for field in [
            "root_hash",
            "root_sum",
            "leaves",
            "unreachable_rows",
            "problems",
        ] {
            assert!(o.get(field).is_some(), "{field} missing in {o}");
        }
        assert_eq!(o["problems"], Value::Array(vec![]));
    }
    assert_eq!(objects[1]["root_sum"], "9223372110491487686");

    let db = dir.path().join("ms.db");
    let import = on_db(&db, &["--json", "tapd", "import", "--from", &src]);
    assert_eq!(import.code, 0, "{}", import.stderr);
    let imported = import.objects();
    for (a, i) in objects.iter().zip(&imported) {
        assert_eq!(a["root_hash"], i["root_hash"]);
        assert_eq!(a["root_sum"], i["root_sum"]);
        assert_eq!(a["leaves"], i["leaves"]);
    }
    // Again: the same tree, no error.
    let again = import_one(&db, &src, "universe-b");
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(again.stdout.contains("already there"), "{}", again.stdout);
    assert_eq!(
        std::fs::read(&src).expect("read"),
        before,
        "the source was written"
    );

    let out = dir.path().join("out.db");
    let no_schema = export(&db, &out, &[]);
    assert_eq!(no_schema.code, 2);
    let created = export(&db, &out, &["--create-schema"]);
    assert_eq!(created.code, 0, "{}", created.stderr);
    let exists = export(&db, &out, &["--namespace", "universe-a"]);
    assert_eq!(exists.code, 2);
    assert!(
        exists.stderr.contains("already exists"),
        "{}",
        exists.stderr
    );
    let replace = export(&db, &out, &["--namespace", "universe-a", "--replace"]);
    assert_eq!(replace.code, 0, "{}", replace.stderr);
    let back = ms_smt(&["tapd", "audit", "--from", s(&out), "--json"]);
    assert_eq!(back.code, 0, "{}", back.stderr);
    for (a, b) in objects.iter().zip(back.objects()) {
        assert_eq!(a["root_hash"], b["root_hash"]);
        assert_eq!(a["root_sum"], b["root_sum"]);
        assert_eq!(b["unreachable_rows"], 0);
    }
}

#[test]
fn damaged_source_fails_audit_and_import() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = copy(dir.path());
    let status = Command::new("sqlite3")
        .arg(&src)
        .arg(
            "UPDATE mssmt_nodes SET value = X'00' WHERE namespace = 'universe-b' AND hash_key = \
             (SELECT MIN(hash_key) FROM mssmt_nodes WHERE namespace = 'universe-b' AND key IS NOT NULL);",
        )
        .status();
    let Ok(status) = status else {
        panic!("this test needs the sqlite3 command to damage a copy");
    };
    assert!(status.success());
    let audit = ms_smt(&["tapd", "audit", "--from", &src, "--json"]);
    assert_eq!(audit.code, 1, "{}", audit.stderr);
    let objects = audit.objects();
    let b = objects
        .iter()
        .find(|o| o["namespace"] == "universe-b")
        .expect("universe-b");
    let problems = b["problems"].as_array().expect("problems");
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0]
            .as_str()
            .expect("text")
            .contains("does not hash"),
        "{problems:?}"
    );

    let db = dir.path().join("ms.db");
    let import = import_one(&db, &src, "universe-b");
    assert_eq!(import.code, 2);
    assert_eq!(import.stderr.lines().count(), 1, "{}", import.stderr);
    assert!(import.stderr.contains("universe-b"), "{}", import.stderr);
    let listed = on_db(&db, &["--json", "namespaces"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    assert!(!listed.stdout.contains("universe-b\""), "{}", listed.stdout);
}

#[test]
fn bad_input_is_one_line_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("ms.db");
    let missing = dir.path().join("missing.db");
    for (args, says) in [
        (vec!["tapd", "audit", "--from", s(&missing)], "no such file"),
        (
            vec!["--db", s(&db), "tapd", "import", "--from", s(&missing)],
            "no such file",
        ),
        (
            vec![
                "tapd",
                "audit",
                "--from",
                s(&fixture()),
                "--namespace",
                "nope",
            ],
            "no namespace",
        ),
        (
            vec![
                "--db",
                s(&db),
                "tapd",
                "import",
                "--from",
                s(&fixture()),
                "--namespace",
                "nope",
            ],
            "no namespace",
        ),
    ] {
        let run = ms_smt(&args);
        assert_eq!(run.code, 2, "{args:?}");
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
        assert!(run.stderr.contains(says), "{args:?}: {}", run.stderr);
    }
    assert!(!missing.exists() && !db.exists(), "a file was created");
    // An ms-smt database is not a tapd one.
    let made = import_one(&db, s(&fixture()), "universe-b");
    assert_eq!(made.code, 0, "{}", made.stderr);
    let not_tapd = ms_smt(&["tapd", "audit", "--from", s(&db)]);
    assert_eq!(not_tapd.code, 2);
    assert!(
        not_tapd.stderr.contains("not a tapd database"),
        "{}",
        not_tapd.stderr
    );
}
