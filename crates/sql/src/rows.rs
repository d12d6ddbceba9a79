//! Rows as the statements return them: named structs, each decoded by one
//! `FromRow` impl for both engines (the columns by position, in the order
//! the statements select them).

use sqlx::{ColumnIndex, Decode, FromRow, Row, Type};

/// What the rows here read of a row, column `i` by position: one blanket
/// impl carries the decode bounds for every engine, so each row's
/// `FromRow` needs only this.
pub trait Columns<'r>: Row {
    /// A text column.
    fn text(&'r self, i: usize) -> Result<String, sqlx::Error>;
    /// A BIGINT column.
    fn int(&'r self, i: usize) -> Result<i64, sqlx::Error>;
    /// A nullable BIGINT column.
    fn opt_int(&'r self, i: usize) -> Result<Option<i64>, sqlx::Error>;
    /// A nullable BLOB / BYTEA column.
    fn opt_bytes(&'r self, i: usize) -> Result<Option<Vec<u8>>, sqlx::Error>;
}

impl<'r, R> Columns<'r> for R
where
    R: Row,
    usize: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
    Option<i64>: Decode<'r, R::Database> + Type<R::Database>,
    Option<Vec<u8>>: Decode<'r, R::Database> + Type<R::Database>,
{
    fn text(&'r self, i: usize) -> Result<String, sqlx::Error> {
        self.try_get(i)
    }
    fn int(&'r self, i: usize) -> Result<i64, sqlx::Error> {
        self.try_get(i)
    }
    fn opt_int(&'r self, i: usize) -> Result<Option<i64>, sqlx::Error> {
        self.try_get(i)
    }
    fn opt_bytes(&'r self, i: usize) -> Result<Option<Vec<u8>>, sqlx::Error> {
        self.try_get(i)
    }
}

/// The columns every namespace row starts with: `name, id,
/// CAST(height AS BIGINT), root_hash, root_sum, version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceHead {
    /// The namespace's name.
    pub name: String,
    /// Its id.
    pub id: i64,
    /// Its stratum height.
    pub height: i64,
    /// Its root hash (NULL: the empty tree).
    pub root_hash: Option<Vec<u8>>,
    /// Its root sum, bit-cast (NULL: the empty tree).
    pub root_sum: Option<i64>,
    /// Commits it has taken.
    pub version: i64,
}

impl NamespaceHead {
    /// Columns 0 to 5 of `row`; the rest are the row's own.
    const COLUMNS: usize = 6;

    fn read<'r, R: Columns<'r>>(row: &'r R) -> Result<Self, sqlx::Error> {
        Ok(NamespaceHead {
            name: row.text(0)?,
            id: row.int(1)?,
            height: row.int(2)?,
            root_hash: row.opt_bytes(3)?,
            root_sum: row.opt_int(4)?,
            version: row.int(5)?,
        })
    }
}

/// A namespace's row: its [`NamespaceHead`], then `(newest pinned
/// version), journal_from`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceRow {
    /// Name, id, height, root and version.
    pub head: NamespaceHead,
    /// The newest version a pin holds (NULL: no pin).
    pub max_pin: Option<i64>,
    /// The version its change journal starts at (NULL: no journal).
    pub journal_from: Option<i64>,
}

impl<'r, R: Columns<'r>> FromRow<'r, R> for NamespaceRow {
    fn from_row(row: &'r R) -> Result<Self, sqlx::Error> {
        let next = NamespaceHead::COLUMNS;
        Ok(NamespaceRow {
            head: NamespaceHead::read(row)?,
            max_pin: row.opt_int(next)?,
            journal_from: row.opt_int(next + 1)?,
        })
    }
}

/// A namespace as the listing reads it: its [`NamespaceHead`], then
/// `(pins), leaves, leaves_since, (the root row's body)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListingRow {
    /// Name, id, height, root and version.
    pub head: NamespaceHead,
    /// How many pins it has.
    pub pins: i64,
    /// Its leaf count as its commits keep it.
    pub leaves: i64,
    /// The version its count started at, when it held leaves before the
    /// counts (NULL: exact).
    pub leaves_since: Option<i64>,
    /// The body of its root row (depth 0), if stored.
    pub root_row: Option<Vec<u8>>,
}

impl<'r, R: Columns<'r>> FromRow<'r, R> for ListingRow {
    fn from_row(row: &'r R) -> Result<Self, sqlx::Error> {
        let next = NamespaceHead::COLUMNS;
        Ok(ListingRow {
            head: NamespaceHead::read(row)?,
            pins: row.int(next)?,
            leaves: row.int(next + 1)?,
            leaves_since: row.opt_int(next + 2)?,
            root_row: row.opt_bytes(next + 3)?,
        })
    }
}
