//! The committed seed corpus, `fuzz/corpus/<target>/seed-*`, generated from
//! the official vectors.
//!
//! * `cargo test --release --manifest-path fuzz/Cargo.toml -- --ignored write_seed_corpus`
//!   rewrites the seed files (other files in the corpus directories, which
//!   libFuzzer adds and `.gitignore` leaves out, are kept).
//! * `seed_corpus_is_current` fails when the committed seeds differ from
//!   what the generator makes, and runs every seed through its target's
//!   checks.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use ms_smt_fuzz::props::{Op, State, Stats, apply, check_decode, check_roundtrip, run_case};
use ms_smt_fuzz::{corpus, parse_roundtrip, parse_verify};

type Seeds = BTreeMap<&'static str, BTreeMap<String, Vec<u8>>>;

/// A tiny deterministic generator (splitmix64), so the seeds never depend on
/// a crate's RNG version.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn op_kind(op: &Op) -> String {
    let s = format!("{op:?}");
    s.split([' ', '{']).next().unwrap_or("").to_string()
}

fn generate() -> Seeds {
    let c = corpus();
    let mut seeds: Seeds = BTreeMap::new();

    // proof_decode: real encodings with every shape of bitmap the vectors
    // have, and the forms Go accepts but a strict decoder must reject.
    let decode = seeds.entry("proof_decode").or_default();
    let picks: Vec<usize> = (0..c.cases.len())
        .filter(|i| {
            *i < 1010 && i % 25 == 0
                || *i >= 1010 && (i - 1010) % 4 == 0
                || (1000..1010).contains(i)
        })
        .collect();
    for &i in &picks {
        let b = &c.cases[i].bytes;
        decode.insert(format!("seed-case{i:04}"), b.clone());
    }
    for &i in picks.iter().step_by(4) {
        let b = &c.cases[i].bytes;
        decode.insert(
            format!("seed-case{i:04}-short-bitmap"),
            b[..b.len() - 1].to_vec(),
        );
        let mut t = b.clone();
        t.extend_from_slice(&[0xff, 0xff]);
        decode.insert(format!("seed-case{i:04}-trailing"), t);
        let mut m = b.clone();
        let last = m.len() - 1;
        m[last] ^= 0x80;
        decode.insert(format!("seed-case{i:04}-count-mismatch"), m);
        // An empty sibling written out as an explicit node (Go accepts it).
        if let Some(j) =
            (0..=255u8).find(|j| b[b.len() - 32 + usize::from(*j) / 8] >> (j % 8) & 1 == 1)
        {
            let mut st = State {
                bytes: b.clone(),
                key: c.cases[i].key,
                leaf: c.cases[i].leaf.clone(),
            };
            apply(&Op::ExpandEmpty { j }, &mut st, c);
            decode.insert(format!("seed-case{i:04}-explicit-empty"), st.bytes);
        }
    }
    decode.insert("seed-empty".into(), Vec::new());
    decode.insert("seed-one-byte".into(), vec![0x01]);
    decode.insert("seed-all-empty".into(), {
        let mut b = vec![0, 0];
        b.extend_from_slice(&[0xff; 32]);
        b
    });

    // proof_verify: each picked case unmutated, and each with one mutation
    // of every kind (found by searching byte strings deterministically).
    let verify = seeds.entry("proof_verify").or_default();
    let mut mix = Mix(0x6d73_736d_7466_757a);
    for &i in &picks {
        verify.insert(
            format!("seed-case{i:04}"),
            (i as u16).to_le_bytes().to_vec(),
        );
    }
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    let mut tries = 0;
    while kinds.len() < usize::from(ms_smt_fuzz::props::OP_KINDS) && tries < 1_000_000 {
        tries += 1;
        let i = picks[(mix.next() as usize) % picks.len()];
        let len = 1 + (mix.next() % 48) as usize;
        let mut data = (i as u16).to_le_bytes().to_vec();
        data.extend(mix.bytes(len));
        let (_, ops) = parse_verify(&data);
        if let Some(first) = ops.first() {
            let kind = op_kind(first);
            let n = kinds.entry(kind.clone()).or_default();
            if *n < 3 {
                *n += 1;
                verify.insert(format!("seed-op-{kind}-{n}"), data);
            }
        }
    }

    // proof_roundtrip: the vector proofs' own bitmaps and nodes, and random
    // structured inputs.
    let roundtrip = seeds.entry("proof_roundtrip").or_default();
    for &i in picks.iter().step_by(2) {
        let case = &c.cases[i];
        let b = &case.bytes;
        // See parse_roundtrip: selectors are `byte % n`, integers little-endian.
        let mut data = b[b.len() - 32..].to_vec(); // bitmap
        data.extend_from_slice(&case.key.0);
        data.push(15); // sum: any u64
        data.extend_from_slice(&case.leaf.sum().to_le_bytes());
        let value = &case.leaf.value()[..case.leaf.value().len().min(80)];
        data.push(value.len() as u8);
        data.extend_from_slice(value);
        data.push(1); // one key bit to flip
        data.push(i as u8);
        data.push(0); // no sums for empty siblings
        let n = b.len().saturating_sub(34) / 40;
        for r in b[2..2 + 40 * n].chunks_exact(40) {
            data.push(7); // explicit hash bytes
            data.extend_from_slice(&r[..32]);
            data.push(15); // sum: any u64
            let mut s = [0u8; 8];
            s.copy_from_slice(&r[32..]);
            data.extend_from_slice(&u64::from_be_bytes(s).to_le_bytes());
        }
        roundtrip.insert(format!("seed-case{i:04}"), data);
    }
    for n in 0..40 {
        let len = 64 + (mix.next() % 600) as usize;
        roundtrip.insert(format!("seed-random{n:02}"), mix.bytes(len));
    }
    seeds
}

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target)
}

fn check_seed(target: &str, data: &[u8], stats: &mut Stats) {
    match target {
        "proof_decode" => {
            let _ = check_decode(data, stats);
        }
        "proof_verify" => {
            let (case, ops) = parse_verify(data);
            run_case(corpus(), case, &ops, stats);
        }
        "proof_roundtrip" => {
            if let Ok(input) = parse_roundtrip(data) {
                check_roundtrip(&input, stats);
            }
        }
        _ => unreachable!(),
    }
}

#[test]
#[ignore = "writes fuzz/corpus/*/seed-*"]
fn write_seed_corpus() {
    for (target, files) in generate() {
        let dir = corpus_dir(target);
        fs::create_dir_all(&dir).unwrap();
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with("seed-") {
                fs::remove_file(&path).unwrap();
            }
        }
        let mut bytes = 0;
        for (name, data) in &files {
            fs::write(dir.join(name), data).unwrap();
            bytes += data.len();
        }
        eprintln!("{target}: {} seeds, {bytes} bytes", files.len());
    }
}

#[test]
fn seed_corpus_is_current() {
    for (target, files) in generate() {
        let dir = corpus_dir(target);
        let mut on_disk: Vec<String> = fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e} (run write_seed_corpus)", dir.display()))
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("seed-"))
            .collect();
        on_disk.sort();
        let expected: Vec<String> = files.keys().cloned().collect();
        assert_eq!(
            on_disk, expected,
            "{target}: seed files (run write_seed_corpus)"
        );
        let mut stats = Stats::default();
        for (name, data) in &files {
            let disk = fs::read(dir.join(name)).unwrap();
            assert!(
                disk == *data,
                "{target}/{name} is stale (run write_seed_corpus)"
            );
            check_seed(target, data, &mut stats);
        }
        eprintln!("{target}: {} seeds checked: {stats:?}", files.len());
    }
}
