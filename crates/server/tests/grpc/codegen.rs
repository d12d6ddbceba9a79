//! The generated code in `src/grpc/gen/` is what `tonic-prost-build`
//! makes of `proto/` today (parsed by protox, no protoc). To regenerate
//! after changing a .proto: `MSSMT_REGENERATE_GRPC=1 scripts/test.sh -p
//! ms-smt-server --test grpc codegen`.

use std::path::PathBuf;

fn generate(out: &std::path::Path) {
    let proto = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("proto");
    let fds = protox::compile(["universe.proto"], [&proto]).expect("parse proto/");
    tonic_prost_build::configure()
        .build_transport(false)
        .emit_rerun_if_changed(false)
        .out_dir(out)
        .compile_fds(fds)
        .expect("generate");
}

#[test]
fn committed_code_is_generated_from_the_proto() {
    let committed = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/grpc/gen");
    let dir = tempfile::tempdir().expect("tempdir");
    generate(dir.path());
    let regenerate = std::env::var_os("MSSMT_REGENERATE_GRPC").is_some();
    for file in ["taprpc.rs", "universerpc.rs"] {
        let fresh = std::fs::read_to_string(dir.path().join(file)).expect("generated");
        assert!(fresh.contains("pub "), "{file} is empty");
        if regenerate {
            std::fs::write(committed.join(file), &fresh).expect("write");
            continue;
        }
        let old = std::fs::read_to_string(committed.join(file)).unwrap_or_default();
        assert!(
            old == fresh,
            "src/grpc/gen/{file} is not what proto/ generates; regenerate it \
             (MSSMT_REGENERATE_GRPC=1)"
        );
    }
}
