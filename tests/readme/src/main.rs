//! Runs every ```rust example of the README, each in a `tokio::spawn`ed
//! task on a multi-threaded runtime (so each must be `Send`, as in a
//! service), in a scratch directory (their SQLite files land there).

use std::future::Future;
use std::pin::Pin;

/// One example's future.
type ExampleFuture =
    Pin<Box<dyn Future<Output = Result<(), Box<dyn std::error::Error + Send + Sync>>> + Send>>;

include!(concat!(env!("OUT_DIR"), "/examples.rs"));

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = std::env::temp_dir().join(format!("ms-smt-readme-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    std::env::set_current_dir(&dir).expect("enter it");
    let mut failed = 0;
    for (line, example) in examples() {
        match tokio::spawn(example).await {
            Ok(Ok(())) => println!("README example at line {line}: ok"),
            Ok(Err(e)) => {
                failed += 1;
                eprintln!("README example at line {line}: {e}");
            }
            Err(e) => {
                failed += 1;
                eprintln!("README example at line {line} panicked: {e}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if failed > 0 {
        eprintln!("{failed} README example(s) failed");
        std::process::exit(1);
    }
}
