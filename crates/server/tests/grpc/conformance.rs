//! Our `.proto` files against taproot-assets' own (copied unchanged at
//! 95bd8d41 into `../shared/reference/taproot-assets/taprpc`): both parsed
//! by protox, and every service method, message, field and enum value we
//! declare must be the reference's, by name, number, type, label, oneof
//! and deprecation. The fields we leave out are named here, so leaving out
//! another one fails.

use std::path::PathBuf;

use protox::prost_reflect::{DescriptorPool, FieldDescriptor, Kind, MessageDescriptor};

/// The reference's fields that our messages do not carry, and why.
const LEFT_OUT: &[(&str, u32)] = &[
    // taprpc.Asset, decoded from the proof by tapd; tapd's syncer reads
    // the proof bytes (field 2) only.
    ("universerpc.AssetLeaf", 1),
    // Decoded from an issuance proof's genesis reveal; not read by the
    // syncer.
    ("universerpc.AssetProofResponse", 7),
];

fn reference_dir() -> PathBuf {
    std::env::var_os("MSSMT_TAPD_REFERENCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            ms_smt_test_support::repo_root().join("../shared/reference/taproot-assets/taprpc")
        })
}

fn ours_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("proto")
}

fn pool(includes: &[PathBuf], file: &str) -> DescriptorPool {
    protox::Compiler::new(includes)
        .expect("includes")
        .include_imports(true)
        .open_file(file)
        .unwrap_or_else(|e| panic!("parse {file}: {e:?}"))
        .descriptor_pool()
}

pub(crate) fn ours() -> DescriptorPool {
    pool(&[ours_dir()], "universe.proto")
}

fn reference() -> DescriptorPool {
    let dir = reference_dir();
    pool(&[dir.clone(), dir.join("universerpc")], "universe.proto")
}

/// A field's type as text that means the same in both pools.
fn kind(field: &FieldDescriptor) -> String {
    match field.kind() {
        Kind::Message(m) => format!("message {}", m.full_name()),
        Kind::Enum(e) => format!("enum {}", e.full_name()),
        other => format!("{other:?}"),
    }
}

/// Everything about a field that the wire and the generated code depend on.
fn shape(field: &FieldDescriptor) -> String {
    let deprecated = field
        .field_descriptor_proto()
        .options
        .as_ref()
        .and_then(|o| o.deprecated)
        .unwrap_or(false);
    format!(
        "{} #{} {} {:?} list={} map={} oneof={:?} presence={} deprecated={deprecated}",
        field.name(),
        field.number(),
        kind(field),
        field.cardinality(),
        field.is_list(),
        field.is_map(),
        field.containing_oneof().map(|o| o.name().to_owned()),
        field.supports_presence(),
    )
}

fn check_message(ours: &MessageDescriptor, reference: &DescriptorPool) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(theirs) = reference.get_message_by_name(ours.full_name()) else {
        return vec![format!(
            "message {} is not the reference's",
            ours.full_name()
        )];
    };
    for field in ours.fields() {
        match theirs.get_field(field.number()) {
            Some(t) if shape(&t) == shape(&field) => {}
            Some(t) => problems.push(format!(
                "{}: ours {} / reference {}",
                ours.full_name(),
                shape(&field),
                shape(&t)
            )),
            None => problems.push(format!(
                "{}: field #{} is not the reference's",
                ours.full_name(),
                field.number()
            )),
        }
    }
    for field in theirs.fields() {
        let left_out = LEFT_OUT.contains(&(ours.full_name(), field.number()));
        let have = ours.get_field(field.number()).is_some();
        if !have && !left_out {
            problems.push(format!(
                "{}: reference field {} is missing",
                ours.full_name(),
                shape(&field)
            ));
        }
        if have && left_out {
            problems.push(format!(
                "{}: field #{} is listed as left out but declared",
                ours.full_name(),
                field.number()
            ));
        }
    }
    problems
}

#[test]
fn our_proto_is_the_references() {
    let ours = ours();
    let reference = reference();
    let mut problems = Vec::new();
    let mut messages = 0;
    for message in ours.all_messages() {
        messages += 1;
        problems.extend(check_message(&message, &reference));
    }
    let mut enums = 0;
    for e in ours.all_enums() {
        enums += 1;
        let Some(theirs) = reference.get_enum_by_name(e.full_name()) else {
            problems.push(format!("enum {} is not the reference's", e.full_name()));
            continue;
        };
        let values = |d: &protox::prost_reflect::EnumDescriptor| -> Vec<(String, i32)> {
            d.values()
                .map(|v| (v.name().to_owned(), v.number()))
                .collect()
        };
        if values(&e) != values(&theirs) {
            problems.push(format!(
                "enum {}: ours {:?} / reference {:?}",
                e.full_name(),
                values(&e),
                values(&theirs)
            ));
        }
    }
    let mut methods = 0;
    for service in ours.services() {
        let Some(theirs) = reference.get_service_by_name(service.full_name()) else {
            problems.push(format!(
                "service {} is not the reference's",
                service.full_name()
            ));
            continue;
        };
        for method in service.methods() {
            methods += 1;
            let Some(t) = theirs.methods().find(|m| m.name() == method.name()) else {
                problems.push(format!(
                    "method {} is not the reference's",
                    method.full_name()
                ));
                continue;
            };
            let sig = |m: &protox::prost_reflect::MethodDescriptor| {
                (
                    m.input().full_name().to_owned(),
                    m.output().full_name().to_owned(),
                    m.is_client_streaming(),
                    m.is_server_streaming(),
                )
            };
            if sig(&method) != sig(&t) {
                problems.push(format!(
                    "method {}: ours {:?} / reference {:?}",
                    method.full_name(),
                    sig(&method),
                    sig(&t)
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // What the service serves, so that an emptied .proto cannot pass.
    let service = ours
        .get_service_by_name("universerpc.Universe")
        .expect("the service");
    let mut names: Vec<String> = service.methods().map(|m| m.name().to_owned()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "AssetLeafKeys",
            "AssetLeaves",
            "AssetRoots",
            "Info",
            "InsertProof",
            "MultiverseRoot",
            "QueryAssetRoots",
            "QueryProof",
            "UniverseStats"
        ]
    );
    assert_eq!(methods, 9);
    assert!(
        messages >= 20 && enums == 2,
        "{messages} messages, {enums} enums"
    );
}

#[test]
fn a_wrong_field_number_is_caught() {
    // The check itself: a reference message compared with a pool whose
    // field differs must report it.
    let reference = reference();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("bad.proto"),
        "syntax = \"proto3\";\npackage universerpc;\nmessage InfoResponse { int64 runtime_id = 2; }\n",
    )
    .expect("write");
    let bad = pool(&[dir.path().to_path_buf()], "bad.proto");
    let message = bad
        .get_message_by_name("universerpc.InfoResponse")
        .expect("message");
    let problems = check_message(&message, &reference);
    assert_eq!(problems.len(), 2, "{problems:?}");
}
