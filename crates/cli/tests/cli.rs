//! End-to-end tests of the `ms-smt` binary: the built executable run on
//! real SQLite files and on Postgres (`MSSMT_PG_URL`, required when
//! `MSSMT_REQUIRE_PG=1`). Every root the CLI reports is checked against
//! the same leaves built in memory through the library.

use crate::support;

use std::path::{Path, PathBuf};

use crate::cli_support::{Run, ms_smt};
use ms_smt::{ComputedNode, Key, Leaf};
use serde_json::Value;
use sqlx::Connection;
use support::{hkey, pg_url, root_of, unique};

/// Leaves in the test file.
const LEAVES: u64 = 300;

/// Runs `args` on `db`; the run must succeed.
fn ok(db: &str, args: &[&str]) -> Run {
    let mut all = vec!["--db", db];
    all.extend_from_slice(args);
    let run = ms_smt(&all);
    assert_eq!(run.code, 0, "{args:?}: {}{}", run.stdout, run.stderr);
    run
}

/// Runs `args` on `db` with `--json`; the run must succeed.
fn ok_json(db: &str, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    ok(db, &all).json()
}

/// The run ended with `code` and one line on stderr, without a panic.
fn assert_refused(run: &Run, code: i32, what: &str) {
    assert_eq!(run.code, code, "{what}: {}{}", run.stdout, run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "{what}: {:?}", run.stderr);
    assert!(!run.stderr.contains("panicked"), "{what}: {}", run.stderr);
}

/// The leaves of the test file: spread keys, values and sums from `i`.
fn leaves(tag: &str) -> Vec<(Key, Leaf)> {
    (0..LEAVES)
        .map(|i| {
            let value = format!("asset {i}").into_bytes();
            (hkey(tag, i), Leaf::new(value, i * 7 + 1))
        })
        .collect()
}

fn jsonl(leaves: &[(Key, Leaf)]) -> String {
    leaves
        .iter()
        .map(|(k, l)| {
            format!(
                "{{\"key\": \"{k}\", \"value\": \"{}\", \"sum\": {}}}\n",
                hex::encode(l.value()),
                l.sum()
            )
        })
        .collect()
}

fn csv(leaves: &[(Key, Leaf)]) -> String {
    let rows: String = leaves
        .iter()
        .map(|(k, l)| format!("{k},{},{}\n", hex::encode(l.value()), l.sum()))
        .collect();
    format!("key,value,sum\n{rows}")
}

fn node(v: &Value) -> ComputedNode {
    let hash: [u8; 32] = hex::decode(v["hash"].as_str().expect("hash"))
        .expect("hex")
        .try_into()
        .expect("32 bytes");
    ComputedNode::new(ms_smt::Hash(hash), v["sum"].as_u64().expect("sum"))
}

/// A namespace's entry in `namespaces --json`, if listed.
fn listed(db: &str, ns: &str) -> Option<Value> {
    ok_json(db, &["namespaces"])["namespaces"]
        .as_array()
        .expect("array")
        .iter()
        .find(|n| n["name"] == ns)
        .cloned()
}

/// What `namespaces --json` shows: a failed command must leave it as it
/// was.
fn snapshot(db: &str) -> Value {
    ok_json(db, &["namespaces"])
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Flips one byte in the middle of the deepest strata row of `ns` (the
/// first by path among the deepest), or of its root row (depth 0) with
/// `root`: a second call puts it back.
async fn corrupt_row<DB: sqlx::Database>(conn: &mut DB::Connection, ns: &str, root: bool)
where
    <DB as sqlx::Database>::Arguments: sqlx::IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'r> (Vec<u8>, i64, Vec<u8>): sqlx::FromRow<'r, DB::Row>,
    for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Vec<u8>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let id = "(SELECT id FROM ms_smt_namespaces WHERE name = $1)";
    let (path, depth, mut body): (Vec<u8>, i64, Vec<u8>) =
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT path, CAST(depth AS BIGINT), body FROM ms_smt_strata WHERE ns = {id} \
         ORDER BY depth {}, path LIMIT 1",
            if root { "ASC" } else { "DESC" }
        )))
        .bind(ns.to_owned())
        .fetch_one(&mut *conn)
        .await
        .expect("a row");
    let mid = body.len() / 2;
    body[mid] ^= 0x55;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE ms_smt_strata SET body = $2 WHERE ns = {id} AND path = $3 AND depth = $4"
    )))
    .bind(ns.to_owned())
    .bind(body)
    .bind(path)
    .bind(depth)
    .execute(&mut *conn)
    .await
    .expect("update");
}

/// Which engine `db` is, to corrupt a row of it directly.
enum Engine {
    Sqlite(PathBuf),
    Postgres(String),
}

async fn corrupt(engine: &Engine, ns: &str) {
    corrupt_at(engine, ns, false).await;
}

async fn corrupt_at(engine: &Engine, ns: &str, root: bool) {
    match engine {
        Engine::Sqlite(path) => {
            let url = format!("sqlite://{}", path.display());
            let mut conn = sqlx::SqliteConnection::connect(&url).await.expect("open");
            corrupt_row::<sqlx::Sqlite>(&mut conn, ns, root).await;
            conn.close().await.expect("close");
        }
        Engine::Postgres(url) => {
            let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
            corrupt_row::<sqlx::Postgres>(&mut conn, ns, root).await;
            conn.close().await.expect("close");
        }
    }
}

/// Runs `statement` on the database directly.
async fn exec(engine: &Engine, statement: &str) {
    let statement = sqlx::AssertSqlSafe(statement.to_owned());
    match engine {
        Engine::Sqlite(path) => {
            let url = format!("sqlite://{}", path.display());
            let mut conn = sqlx::SqliteConnection::connect(&url).await.expect("open");
            sqlx::raw_sql(statement)
                .execute(&mut conn)
                .await
                .expect("exec");
            conn.close().await.expect("close");
        }
        Engine::Postgres(url) => {
            let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
            sqlx::raw_sql(statement)
                .execute(&mut conn)
                .await
                .expect("exec");
            conn.close().await.expect("close");
        }
    }
}

/// `namespaces` reads no tree: a damaged root row is listed beside the
/// sound namespaces (exit 1). `maintain` counts a namespace left
/// uncounted (as an upgrade leaves it) and reports its steps.
async fn listing_and_maintenance(db: &str, engine: &Engine, ns: &str, copy: &str) {
    corrupt_at(engine, copy, true).await;
    let run = ms_smt(&["--db", db, "--json", "namespaces"]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let listing = run.json();
    let entry = |name: &str| {
        listing["namespaces"]
            .as_array()
            .expect("array")
            .iter()
            .find(|n| n["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} not listed"))
    };
    assert!(entry(copy)["damage"].is_string(), "{listing}");
    assert_eq!(entry(ns)["leaves"], LEAVES);
    assert_eq!(listing["damaged"], 1);
    corrupt_at(engine, copy, true).await;
    assert_eq!(snapshot(db)["damaged"], 0, "mended");

    exec(
        engine,
        &format!(
            "UPDATE ms_smt_namespaces SET leaves = 0, leaves_since = version WHERE name = '{ns}'"
        ),
    )
    .await;
    let entry = listed(db, ns).expect("listed");
    assert!(entry["leaves"].is_null(), "{entry}");
    assert!(entry["leaves_uncounted_since"].is_u64(), "{entry}");
    let done = ok_json(db, &["maintain"]);
    assert_eq!(done["uncounted"], 0, "{done}");
    let counted = &done["steps"][0]["namespaces"];
    assert_eq!(counted[0]["name"], ns, "{done}");
    assert_eq!(counted[0]["leaves"], LEAVES, "{done}");
    assert_eq!(listed(db, ns).expect("listed")["leaves"], LEAVES);
    let again = ok_json(
        db,
        &[
            "maintain",
            "--vacuum",
            "full",
            "--journal-keep-versions",
            "10",
        ],
    );
    assert_eq!(again["steps"][0]["namespaces"], serde_json::json!([]));
    assert!(again["after"]["db_bytes"].as_u64().is_some(), "{again}");
}

/// The whole operator path on database `db`, with a second SQLite
/// database `second` to import into.
async fn scenario(db: &str, engine: Engine, second: &str, dir: &Path) {
    std::fs::create_dir_all(dir).expect("work dir");
    let ns = unique("cli");
    let copy = format!("{ns}-copy");
    let all = leaves(&ns);
    let expected = root_of(std::slice::from_ref(&all)).await;
    let file = write(dir, "leaves.jsonl", &jsonl(&all));

    // load (batches of 64, one transaction), then what it shows.
    let loaded = ok_json(db, &["load", &ns, s(&file), "--batch", "64"]);
    assert_eq!(loaded["records"], LEAVES);
    assert_eq!(loaded["batches"], LEAVES.div_ceil(64));
    assert_eq!(node(&loaded["root"]), expected);
    let entry = listed(db, &ns).expect("listed");
    assert_eq!(entry["leaves"], LEAVES);
    assert_eq!(node(&entry["root"]), expected);
    assert_eq!(entry["pins"], 0);
    assert_eq!(
        entry["version"],
        LEAVES.div_ceil(64),
        "one commit per batch"
    );
    let stats = ok_json(db, &["stats", &ns]);
    assert_eq!(stats["leaves"], LEAVES);
    assert_eq!(node(&stats["root"]), expected);
    let text = ok(db, &["stats", &ns]).stdout;
    assert!(text.contains(&expected.hash.to_hex()), "{text}");

    // get, present and absent.
    let (key, leaf) = &all[17];
    let got = ok_json(db, &["get", &ns, &key.to_hex()]);
    assert_eq!(got["present"], true);
    assert_eq!(got["value"], hex::encode(leaf.value()));
    assert_eq!(got["sum"], leaf.sum());
    let absent = hkey("absent", 0).to_hex();
    assert_eq!(ok_json(db, &["get", &ns, &absent])["present"], false);
    assert_eq!(ok(db, &["get", &ns, &absent]).stdout.trim(), "absent");

    // proof: hex to stdout, raw bytes to a file; verify both, then
    // tampered leaves, roots and proofs.
    let proof_hex = ok(db, &["proof", &ns, &key.to_hex()])
        .stdout
        .trim()
        .to_owned();
    let proof_file = dir.join("proof.bin");
    ok(db, &["proof", &ns, &key.to_hex(), "--out", s(&proof_file)]);
    assert_eq!(
        hex::encode(std::fs::read(&proof_file).expect("proof")),
        proof_hex
    );
    let (root_hex, root_sum) = (expected.hash.to_hex(), expected.sum.to_string());
    let value = hex::encode(leaf.value());
    let sum = leaf.sum().to_string();
    let verify = |proof: [&str; 2], value: &str, sum: &str, root: &str| {
        ms_smt(&[
            "verify",
            proof[0],
            proof[1],
            "--root",
            root,
            "--root-sum",
            &root_sum,
            "--key",
            &key.to_hex(),
            "--value",
            value,
            "--sum",
            sum,
        ])
    };
    for proof in [["--proof", &proof_hex], ["--proof-file", s(&proof_file)]] {
        let run = verify(proof, &value, &sum, &root_hex);
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert_eq!(run.stdout.trim(), "verified");
    }
    let bumped = (leaf.sum() + 1).to_string();
    assert_refused(
        &verify(["--proof", &proof_hex], &value, &bumped, &root_hex),
        1,
        "sum",
    );
    assert_refused(
        &verify(["--proof", &proof_hex], "00", &sum, &root_hex),
        1,
        "value",
    );
    let other_root = hkey("root", 0).to_hex();
    assert_refused(
        &verify(["--proof", &proof_hex], &value, &sum, &other_root),
        1,
        "root",
    );
    let mut tampered = hex::decode(&proof_hex).expect("hex");
    let last = tampered.len() - 40;
    tampered[last] ^= 1;
    let run = verify(
        ["--proof", &hex::encode(&tampered)],
        &value,
        &sum,
        &root_hex,
    );
    assert_ne!(run.code, 0, "a tampered proof verified");
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert_refused(
        &verify(["--proof", "0001ff"], &value, &sum, &root_hex),
        2,
        "malformed",
    );
    // An absent key's proof verifies against the empty leaf.
    let exclusion = ok(db, &["proof", &ns, &absent]).stdout.trim().to_owned();
    let run = ms_smt(&[
        "verify",
        "--proof",
        &exclusion,
        "--root",
        &root_hex,
        "--root-sum",
        &root_sum,
        "--key",
        &absent,
        "--value",
        "",
        "--sum",
        "0",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);

    // audit: clean.
    let audit = ok_json(db, &["audit", &ns]);
    assert_eq!(audit["clean"], true);
    assert_eq!(audit["leaves"], LEAVES);

    // pin and unpin.
    let pin = ok_json(db, &["pin", &ns, "before"]);
    assert_eq!(node(&pin["root"]), expected);
    assert_eq!(listed(db, &ns).expect("listed")["pins"], 1);
    ok(db, &["unpin", &ns, "before"]);
    assert_eq!(listed(db, &ns).expect("listed")["pins"], 0);
    assert_refused(
        &ms_smt(&["--db", db, "unpin", &ns, "before"]),
        2,
        "unpin twice",
    );

    // export (level 3: 8 chunks), again (everything already there).
    let export = dir.join("export");
    let first = ok_json(db, &["export", &ns, s(&export), "--level", "3"]);
    assert_eq!(first["chunks"], 8);
    assert_eq!(first["written"], 8);
    assert_eq!(first["leaves"], LEAVES);
    let again = ok_json(db, &["export", &ns, s(&export)]);
    assert_eq!(
        (again["written"].as_u64(), again["skipped"].as_u64()),
        (Some(0), Some(8))
    );
    // A chunk file lost is written again, alone.
    let chunk = std::fs::read_dir(&export)
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|e| e == "msch"))
        .expect("a chunk file");
    std::fs::remove_file(&chunk).expect("remove");
    assert_eq!(ok_json(db, &["export", &ns, s(&export)])["written"], 1);

    // import into a second database, and into this one beside the
    // original; diff finds nothing, then the one changed key.
    let imported = ok_json(second, &["import", &ns, s(&export)]);
    assert_eq!(node(&imported["root"]), expected);
    assert_eq!(
        (imported["added"].as_u64(), imported["resumed"].as_u64()),
        (Some(8), Some(0))
    );
    assert_eq!(ok_json(second, &["audit", &ns])["clean"], true);
    assert_eq!(node(&ok_json(second, &["stats", &ns])["root"]), expected);
    ok(db, &["import", &copy, s(&export)]);
    let diff = ok(db, &["diff", &ns, &copy]);
    assert_eq!(diff.stdout.trim(), "no differences");
    assert_eq!(ok_json(db, &["diff", &ns, &copy])["count"], 0);
    let change = write(dir, "change.csv", &format!("{key},ff,5\n"));
    ok(db, &["load", &copy, s(&change)]);
    let run = ms_smt(&["--db", db, "--json", "diff", &ns, &copy]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let differ = run.json();
    assert_eq!(differ["count"], 1);
    assert_eq!(differ["differences"][0]["key"], key.to_hex());
    assert_eq!(differ["differences"][0]["new"]["value"], "ff");

    // audit of a corrupted row: problems, exit 1.
    corrupt(&engine, &copy).await;
    let run = ms_smt(&["--db", db, "--json", "audit", &copy]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert_eq!(run.json()["clean"], false);
    assert_eq!(ok_json(db, &["audit", &ns])["clean"], true, "only the copy");
    // Mended, so that the listings below (which walk every namespace's
    // leaves) do not depend on which byte the flip hit.
    corrupt(&engine, &copy).await;
    assert_eq!(ok_json(db, &["audit", &copy])["clean"], true, "mended");
    listing_and_maintenance(db, &engine, &ns, &copy).await;

    many_trees(db, dir).await;
    bad_inputs(db, &ns, dir, &all, &export).await;
}

/// One file over several namespaces (`"ns"` per record) under a parent
/// (`--parent`): one transaction; each tree is what its records build,
/// and the parent holds each tree's root at the SHA-256 of its name.
async fn many_trees(db: &str, dir: &Path) {
    let parent = unique("cli-parent");
    let names = [format!("{parent}-a"), format!("{parent}-b")];
    let mut text = String::new();
    let mut by_tree: Vec<Vec<(Key, Leaf)>> = vec![Vec::new(), Vec::new()];
    for (i, (key, leaf)) in leaves(&parent).into_iter().enumerate() {
        let t = i % 2;
        text.push_str(&format!(
            "{{\"ns\":\"{}\",\"key\":\"{}\",\"value\":\"{}\",\"sum\":{}}}\n",
            names[t],
            key.to_hex(),
            hex::encode(leaf.value()),
            leaf.sum()
        ));
        by_tree[t].push((key, leaf));
    }
    let file = write(dir, "many.jsonl", &text);
    let loaded = ok_json(
        db,
        &[
            "load",
            &names[0],
            s(&file),
            "--batch",
            "50",
            "--parent",
            &parent,
        ],
    );
    let mut parent_leaves = Vec::new();
    for (name, leaves) in names.iter().zip(&by_tree) {
        let root = root_of(std::slice::from_ref(leaves)).await;
        assert_eq!(node(&loaded["trees"][name.as_str()]), root, "{name}");
        let key = Key(ms_smt_core::hash::sha256(name.as_bytes()).0);
        parent_leaves.push((key, ms_smt::LinkSum::ChildRoot.leaf(&root)));
    }
    let top = root_of(&[parent_leaves]).await;
    assert_eq!(node(&loaded["trees"][parent.as_str()]), top, "the parent");
    assert_eq!(ok_json(db, &["stats", &parent])["leaves"], 2);
}

/// Every bad input: exit 2 (or 1), one line on stderr, nothing changed.
async fn bad_inputs(db: &str, ns: &str, dir: &Path, all: &[(Key, Leaf)], export: &Path) {
    let before = snapshot(db);
    let refused = |args: &[&str], what: &str| {
        let mut full = vec!["--db", db];
        full.extend_from_slice(args);
        assert_refused(&ms_smt(&full), 2, what);
    };
    refused(&["get", ns, "zz"], "a key that is not hex");
    refused(&["get", ns, "abcd"], "a short key");
    refused(&["proof", ns, &"0".repeat(66)], "a long key");
    let fresh = unique("absent-ns");
    refused(&["get", &fresh, &all[0].0.to_hex()], "a missing namespace");
    refused(&["audit", &fresh], "audit of a missing namespace");
    refused(&["pin", &fresh, "p"], "pin of a missing namespace");
    refused(
        &["export", &fresh, s(&dir.join("nothing"))],
        "export of a missing namespace",
    );
    refused(&["diff", ns, &fresh], "diff with a missing namespace");
    refused(
        &["load", ns, s(&dir.join("missing.jsonl"))],
        "a missing load file",
    );
    refused(
        &["import", &fresh, s(&dir.join("missing"))],
        "a missing export directory",
    );
    refused(
        &["import", ns, s(export)],
        "import into a non-empty namespace",
    );

    // A file whose last line is bad: nothing of it is written.
    let mut text = csv(&all[..10]);
    text.push_str(&format!("{},zz,1\n", hkey("bad", 0)));
    let bad = write(dir, "bad.csv", &text);
    refused(&["load", ns, s(&bad)], "a bad value on the last line");
    let text = jsonl(&all[..3]) + "{\"key\": \"00\", \"value\": \"\", \"sum\": 1}\n";
    refused(
        &["load", ns, s(&write(dir, "bad.jsonl", &text))],
        "a bad key",
    );
    let text = jsonl(&all[..3]) + "{\"key\": \"00\", \"value\": \"\", \"sum\": -1}\n";
    refused(
        &["load", ns, s(&write(dir, "neg.jsonl", &text))],
        "a negative sum",
    );
    refused(
        &["load", ns, s(&write(dir, "x.txt", "x\n"))],
        "an unknown format",
    );

    // A file that fails part-way (the second batch overflows the sum):
    // the first batch, already written inside the transaction, goes too.
    let new_key = hkey("overflow", 0);
    let text = format!("{new_key},01,5\n{},01,{}\n", hkey("overflow", 1), u64::MAX);
    let overflow = write(dir, "overflow.csv", &text);
    refused(
        &["load", ns, s(&overflow), "--batch", "1"],
        "a sum overflow",
    );
    refused(
        &["load", &fresh, s(&overflow), "--batch", "1"],
        "an overflow into a new namespace",
    );
    assert_eq!(
        ok_json(db, &["get", ns, &new_key.to_hex()])["present"],
        false
    );

    // A tampered chunk file is refused before anything is written.
    let tampered = dir.join("tampered");
    std::fs::create_dir_all(&tampered).expect("dir");
    for entry in std::fs::read_dir(export).expect("dir") {
        let path = entry.expect("entry").path();
        let name = path.file_name().expect("name");
        std::fs::copy(&path, tampered.join(name)).expect("copy");
    }
    let chunk = std::fs::read_dir(&tampered)
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|e| e == "msch"))
        .expect("a chunk");
    let mut bytes = std::fs::read(&chunk).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&chunk, bytes).expect("write");
    refused(&["import", &fresh, s(&tampered)], "a tampered chunk");

    assert_eq!(
        snapshot(db),
        before,
        "a refused command changed the database"
    );
}

#[tokio::test]
async fn sqlite_end_to_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("assets.db");
    let second = dir.path().join("second.db");
    scenario(
        s(&db),
        Engine::Sqlite(db.clone()),
        s(&second),
        &dir.path().join("work"),
    )
    .await;
}

#[tokio::test]
async fn postgres_end_to_end() {
    let Some(url) = pg_url("postgres_end_to_end") else {
        return;
    };
    // A database of its own: `namespaces` walks every namespace of the
    // database, and other tests (some corrupting rows on purpose) share
    // the test database.
    let (base, _) = url.rsplit_once('/').expect("a database in the URL");
    let name = support::sanitize(&unique("mssmt_cli")).to_lowercase();
    let mut admin = sqlx::PgConnection::connect(&url).await.expect("connect");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .expect("create database");
    let own = format!("{base}/{name}");
    let dir = tempfile::tempdir().expect("tempdir");
    let second = dir.path().join("second.db");
    scenario(
        &own,
        Engine::Postgres(own.clone()),
        s(&second),
        &dir.path().join("work"),
    )
    .await;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE {name} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await
    .expect("drop database");
}

/// Read commands never create an SQLite file; a wrong URL or a file
/// that is not an ms-smt database is one line on stderr.
#[test]
fn missing_and_wrong_databases() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing.db");
    let key = hkey("k", 0).to_hex();
    for args in [
        vec!["namespaces"],
        vec!["stats", "ns"],
        vec!["audit", "ns"],
        vec!["get", "ns", &key],
        vec!["proof", "ns", &key],
        vec!["export", "ns", "out"],
        vec!["diff", "a", "b"],
        vec!["pin", "ns", "p"],
        vec!["unpin", "ns", "p"],
    ] {
        let mut full = vec!["--db", s(&missing)];
        full.extend(args.iter().copied());
        assert_refused(&ms_smt(&full), 2, &format!("{args:?}"));
        assert!(!missing.exists(), "{args:?} created the database file");
    }
    // A load whose file is bad does not create the database either.
    let bad = write(dir.path(), "bad.jsonl", "{\"key\": 1}\n");
    assert_refused(
        &ms_smt(&["--db", s(&missing), "load", "ns", s(&bad)]),
        2,
        "bad load",
    );
    assert!(
        !missing.exists(),
        "a refused load created the database file"
    );
    // Nor one that fails in the database (a sum overflow).
    let text = format!("{},00,{}\n{},00,1\n", hkey("o", 0), u64::MAX, hkey("o", 1));
    let overflow = write(dir.path(), "overflow.csv", &text);
    assert_refused(
        &ms_smt(&["--db", s(&missing), "load", "ns", s(&overflow)]),
        2,
        "overflowing load",
    );
    assert!(!missing.exists(), "a failed load left the database file");
    // An SQLite file of someone else's is not migrated by a read.
    let other = dir.path().join("other.db");
    std::fs::write(&other, b"").expect("empty file");
    assert_refused(&ms_smt(&["--db", s(&other), "namespaces"]), 2, "not ms-smt");
    // Nor by a write that needs an existing ms-smt database.
    assert_refused(
        &ms_smt(&["--db", s(&other), "pin", "ns", "p"]),
        2,
        "pin, not ms-smt",
    );
    assert_eq!(std::fs::metadata(&other).expect("file").len(), 0);
    let text_file = write(dir.path(), "text.db", "not a database at all, just text\n");
    assert_refused(&ms_smt(&["--db", s(&text_file), "namespaces"]), 2, "text");
    // Nothing listens on port 1; a URL that does not parse.
    let refused = ms_smt(&["--db", "postgres://postgres@127.0.0.1:1/x", "namespaces"]);
    assert_refused(&refused, 2, "connection refused");
    assert_refused(
        &ms_smt(&["--db", "postgres://bad host/x", "namespaces"]),
        2,
        "bad URL",
    );
    // No --db where one is needed; bad arguments.
    assert_refused(&ms_smt(&["namespaces"]), 2, "no --db");
    assert_refused(
        &ms_smt(&["--db", s(&missing), "frobnicate"]),
        2,
        "unknown command",
    );
}
