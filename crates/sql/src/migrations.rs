//! Migration sets: a crate's versioned DDL, per engine, as `.sql` files
//! embedded at build time (`migrations/<engine>/NNNN_*.sql`), and the
//! tree schema's own set ([`TREE_SCHEMA`]).
//!
//! Every set is recorded in the one ledger, `ms_smt_migrations`, a row per
//! (set, version) with its checksum, so the tree schema and the schemas of
//! the crates above (the server's access tokens) migrate independently in
//! the same database, beside a host application's own migrations. A
//! released migration is frozen: its file is checksummed byte for byte
//! (less trailing white space, so an editor's final newline changes
//! nothing), and a change is a new version. A migration that moved to
//! another set is kept as [`Migration::retired`]: databases that applied it
//! still verify, new ones never run it.

/// One versioned DDL step of a set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// The version: increasing within its set, never reused.
    pub version: i64,
    /// What it does, as the ledger records it.
    pub description: &'static str,
    /// What it runs, or what it ran when it ran.
    pub step: Step,
}

/// What a [`Migration`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Runs these statements (unprepared, in one transaction with the
    /// version's ledger row).
    Sql(&'static str),
    /// Ran in an earlier release and moved elsewhere (another set owns
    /// what it made): never run again, only verified against its
    /// checksum where the ledger has it.
    Retired {
        /// SHA-256 of the SQL it ran.
        checksum: [u8; 32],
    },
}

impl Migration {
    /// A version that runs `sql` (an embedded `.sql` file).
    pub const fn sql(version: i64, description: &'static str, sql: &'static str) -> Self {
        Migration {
            version,
            description,
            step: Step::Sql(sql.trim_ascii_end()),
        }
    }

    /// A version that ran in an earlier release and now belongs to
    /// another set; `checksum` is the SHA-256 of the SQL it ran.
    pub const fn retired(version: i64, description: &'static str, checksum: [u8; 32]) -> Self {
        Migration {
            version,
            description,
            step: Step::Retired { checksum },
        }
    }

    /// The checksum the ledger records for this version.
    pub fn checksum(&self) -> [u8; 32] {
        match self.step {
            Step::Sql(sql) => checksum(sql),
            Step::Retired { checksum } => checksum,
        }
    }
}

/// SHA-256 of a migration's SQL: what the ledger records.
pub fn checksum(sql: &str) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(sql.as_bytes()).into()
}

/// A crate's schema: its name in the ledger and its versions on each
/// engine, oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigrationSet {
    /// The set's name in the ledger's `migration_set` column (a crate's
    /// name, e.g. `ms-smt`).
    pub name: &'static str,
    /// Its versions on SQLite.
    pub sqlite: &'static [Migration],
    /// Its versions on Postgres.
    pub postgres: &'static [Migration],
}

/// The tree schema: namespaces, strata rows, versions and pins, the change
/// journal and the leaf counts (`migrations/README.md` says what each
/// version does). SQLite schema 5 and Postgres schema 4 are the first
/// released ones; the earlier versions stay as the path for databases made
/// before them. The access tokens (SQLite 7, Postgres 6) moved to the
/// server's own set in 0.2.0.
pub const TREE_SCHEMA: MigrationSet = MigrationSet {
    name: "ms-smt",
    sqlite: &[
        Migration::sql(
            2,
            "namespaces and position-keyed strata",
            include_str!("../migrations/sqlite/0002_namespaces_and_position_keyed_strata.sql"),
        ),
        Migration::sql(
            4,
            "strata rows in a rowid table with a unique position index",
            include_str!(
                "../migrations/sqlite/0004_strata_rows_in_a_rowid_table_with_a_unique_position_index.sql"
            ),
        ),
        Migration::sql(
            5,
            "versions, pins and the rows pins keep",
            include_str!("../migrations/sqlite/0005_versions_pins_and_the_rows_pins_keep.sql"),
        ),
        Migration::sql(
            6,
            "the change journal",
            include_str!("../migrations/sqlite/0006_the_change_journal.sql"),
        ),
        Migration::retired(
            7,
            "the federation server's access tokens",
            hex32("54f8f10584846cb9dd39addae4d25af8e02b9c8f47aa32293e2be482c49e08bb"),
        ),
        Migration::sql(
            8,
            "a leaf count per namespace",
            include_str!("../migrations/sqlite/0008_a_leaf_count_per_namespace.sql"),
        ),
    ],
    postgres: &[
        Migration::sql(
            2,
            "namespaces and position-keyed strata",
            include_str!("../migrations/postgres/0002_namespaces_and_position_keyed_strata.sql"),
        ),
        Migration::sql(
            4,
            "versions, pins and the rows pins keep",
            include_str!("../migrations/postgres/0004_versions_pins_and_the_rows_pins_keep.sql"),
        ),
        Migration::sql(
            5,
            "the change journal",
            include_str!("../migrations/postgres/0005_the_change_journal.sql"),
        ),
        Migration::retired(
            6,
            "the federation server's access tokens",
            hex32("21a27428a8768ee42b77590d6c56422b9ebc5c000668e5bf497fafcc1989133e"),
        ),
        Migration::sql(
            7,
            "a leaf count per namespace",
            include_str!("../migrations/postgres/0007_a_leaf_count_per_namespace.sql"),
        ),
        Migration::sql(
            8,
            "autovacuum of the strata at 5 % dead rows",
            include_str!("../migrations/postgres/0008_autovacuum_of_the_strata_at_5_dead_rows.sql"),
        ),
    ],
};

/// A 32-byte checksum from its 64 hex digits, at compile time (a typo is
/// a build error).
pub const fn hex32(hex: &str) -> [u8; 32] {
    const fn digit(c: u8) -> u8 {
        match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => panic!("a checksum is 64 lowercase hex digits"),
        }
    }
    let bytes = hex.as_bytes();
    assert!(bytes.len() == 64, "a checksum is 64 lowercase hex digits");
    let mut out = [0u8; 32];
    let mut i = 0;
    while i < 32 {
        out[i] = digit(bytes[2 * i]) << 4 | digit(bytes[2 * i + 1]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{Migration, MigrationSet, TREE_SCHEMA};

    /// Every migration's checksum, pinned: a released migration must never
    /// change (a database that applied it would then be refused), so a
    /// change to one fails here first. A new version is pinned as the
    /// failure prints.
    fn pinned(migrations: &[Migration], pins: &[(i64, &str)]) {
        let actual: Vec<(i64, String)> = migrations
            .iter()
            .map(|m| (m.version, hex::encode(m.checksum())))
            .collect();
        let pins: Vec<(i64, String)> = pins.iter().map(|(v, c)| (*v, (*c).to_owned())).collect();
        assert_eq!(
            pins, actual,
            "a migration changed, or is new: a released migration must stay as it is \
             (a change is a new version); pin a new one as listed"
        );
    }

    #[test]
    fn sqlite_migrations_are_pinned() {
        pinned(
            TREE_SCHEMA.sqlite,
            &[
                (
                    2,
                    "0ca86eb8879d899a75b6c70351f68534b247a7b877ccf1aa49a13f10505f40a2",
                ),
                (
                    4,
                    "f88180a4b845333c61233c00adf8e82d2dff3ec483a19460a2d2d60731f078d7",
                ),
                (
                    5,
                    "ac913183c401b16ca89f3fa90c23574b404fdb2598fed9d528432da71fb12bcd",
                ),
                (
                    6,
                    "b1d1af6fe9ba5a235d129a687c2dfa7f817f8d77ff70e0c70c0453ba88a43439",
                ),
                (
                    7,
                    "54f8f10584846cb9dd39addae4d25af8e02b9c8f47aa32293e2be482c49e08bb",
                ),
                (
                    8,
                    "e0f219ada97fcdffd026a7b4beafaa5236bb8d3ff368d2616215a4854796e6fd",
                ),
            ],
        );
    }

    #[test]
    fn postgres_migrations_are_pinned() {
        pinned(
            TREE_SCHEMA.postgres,
            &[
                (
                    2,
                    "aa2c12c9ac1772db94351fc46b711bc25e6ac11a3712306593bed56af15d84df",
                ),
                (
                    4,
                    "68d46c99698dff226f89bcaabe9f257ddf9f1a28460dc0da192debefa5c5b11f",
                ),
                (
                    5,
                    "9a3cb5ebc0d5169d85ea4a98f8a630c769a68df5efd43363b0d2f0c21c01fcb0",
                ),
                (
                    6,
                    "21a27428a8768ee42b77590d6c56422b9ebc5c000668e5bf497fafcc1989133e",
                ),
                (
                    7,
                    "5996039822304ae24b7904df132d7783de5950c121e7d46ff096f2045a2cc183",
                ),
                (
                    8,
                    "73fada945cbee0b508343408bd4cc85caa4d362f820228da14fb72b4743174d3",
                ),
            ],
        );
    }

    /// Versions increase within each engine's list.
    #[test]
    fn versions_increase() {
        let set: MigrationSet = TREE_SCHEMA;
        for list in [set.sqlite, set.postgres] {
            assert!(list.windows(2).all(|w| w[0].version < w[1].version));
        }
    }
}
