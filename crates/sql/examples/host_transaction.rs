//! Tree writes inside a transaction the host application already holds:
//! the host's own rows and the tree commit or roll back together.
//!
//! ```text
//! cargo run --release --example host_transaction
//! ```
//!
//! Uses a temporary SQLite file; with `MSSMT_PG_URL` set it runs the same
//! steps on PostgreSQL too.

use std::error::Error;

use ms_smt::{CompactedTree, Key, Leaf};
use ms_smt_sql::{PostgresStore, SqliteStore};
use sqlx::Connection;

type Res<T> = Result<T, Box<dyn Error>>;

/// Order `id` in one host transaction: the host's order row and the tree's
/// leaf for it (key `[id; 32]`, sum `10 * id`), committed or rolled back
/// together.
async fn sqlite_order(store: &SqliteStore, id: u8, note: &str, commit: bool) -> Res<()> {
    let mut tx = store.pool().begin_with("BEGIN IMMEDIATE").await?;
    sqlx::query("INSERT INTO orders (id, note) VALUES (?, ?)")
        .bind(i64::from(id))
        .bind(note)
        .execute(&mut *tx)
        .await?;
    let tree = CompactedTree::new(store.in_transaction(&mut tx));
    let leaf = Leaf::new(format!("order {id}").into_bytes(), 10 * u64::from(id));
    tree.insert(Key([id; 32]), leaf).await?;
    drop(tree);
    if commit {
        tx.commit().await?;
    } else {
        tx.rollback().await?;
    }
    Ok(())
}

async fn sqlite() -> Res<()> {
    let path = std::env::temp_dir().join(format!("ms-smt-host-{}.db", std::process::id()));
    let store = SqliteStore::open(&path)
        .await?
        .open_namespace("orders-tree");
    sqlx::query("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, note TEXT)")
        .execute(store.pool())
        .await?;

    // 1. Rolled back: neither the order row nor the tree write survives.
    sqlite_order(&store, 1, "cancelled", false).await?;
    // 2. Committed: both are there.
    sqlite_order(&store, 2, "paid", true).await?;

    let orders: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders")
        .fetch_one(store.pool())
        .await?;
    let tree = CompactedTree::new(store.clone());
    let root = tree.root().await?;
    println!(
        "sqlite:   {orders} order row(s), tree sum {} (order 1 rolled back: {}, order 2 committed: {})",
        root.sum,
        tree.get(&Key([1; 32])).await?.is_empty(),
        !tree.get(&Key([2; 32])).await?.is_empty()
    );
    store.pool().close().await;
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.clone().into_os_string();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
    Ok(())
}

async fn postgres(url: &str) -> Res<()> {
    let store = PostgresStore::connect(url)
        .await?
        .open_namespace(&format!("host-example-{}", std::process::id()));
    let mut conn = store.pool().acquire().await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS host_example_orders (id BIGINT PRIMARY KEY, note TEXT)",
    )
    .execute(&mut *conn)
    .await?;
    let mut tx = conn.begin().await?;
    sqlx::query(
        "INSERT INTO host_example_orders (id, note) VALUES ($1, 'paid') ON CONFLICT DO NOTHING",
    )
    .bind(i64::from(std::process::id()))
    .execute(&mut *tx)
    .await?;
    let tree = CompactedTree::new(store.in_transaction(&mut tx));
    tree.insert(Key([3; 32]), Leaf::new(b"order 3".to_vec(), 30))
        .await?;
    drop(tree);
    tx.commit().await?;
    let tree = CompactedTree::new(store.clone());
    println!(
        "postgres: tree sum {} after the committed host transaction",
        tree.root().await?.sum
    );
    tree.delete_all().await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Res<()> {
    sqlite().await?;
    if let Some(url) = std::env::var("MSSMT_PG_URL").ok().filter(|u| !u.is_empty()) {
        postgres(&url).await?;
    }
    Ok(())
}
