//! Packed blob parameters for SQLite: many rows in a handful of binds.
//!
//! A statement with thousands of `?` parameters is slow twice over: its
//! text changes with the row count, so SQLite parses and compiles it on
//! every call, and the driver looks each parameter's name up (linear in
//! the count, so quadratic per statement). Instead every column of a row
//! set travels as ONE blob and the SQL cuts it apart with `substr`, which
//! on a blob is a constant-time slice. The statement text never changes:
//! it is prepared once per connection and cached.
//!
//! Layouts, for row `i` counted from 0 by [`INDEX_CTE`]:
//! * 32-byte hashes: `substr(blob, i * 32 + 1, 32)`;
//! * integers: [`INT_WIDTH`] ASCII characters each (`{:020}`, sign
//!   included), read with `CAST(substr(blob, i * 20 + 1, 20) AS INTEGER)`
//!   (a blob cast to an integer is read as text);
//! * one kind byte per row ([`KIND_BRANCH`] ...) saying which optional
//!   columns the row has; absent 32-byte fields are packed as zeros;
//! * variable-length values: concatenated, with an offset and a length
//!   (integers) per row.

use super::sql::Changes;

/// Counts `0 .. ?2` (the rows packed into the blob parameters): the driving
/// table of every packed statement. `?2` must be at least 1.
pub(crate) const INDEX_CTE: &str =
    "idx(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM idx WHERE i + 1 < ?2)";

/// Characters per packed integer: an i64 with its sign, zero-padded.
pub(crate) const INT_WIDTH: usize = 20;

/// Kind byte of a branch row (`l_hash`, `r_hash`): `x'42'` in SQL.
pub(crate) const KIND_BRANCH: u8 = b'B';
/// Kind byte of a plain leaf row (`value`): `x'4c'` in SQL.
pub(crate) const KIND_LEAF: u8 = b'L';
/// Kind byte of a compacted leaf row (`leaf_key`, `value`): `x'43'` in SQL.
pub(crate) const KIND_COMPACTED: u8 = b'C';
/// Kind byte of a row that only changes a reference count: `x'4e'` in SQL.
pub(crate) const KIND_COUNT_ONLY: u8 = b'N';

/// Rows per packed statement at most.
const MAX_ROWS: usize = 16_384;
/// Value bytes per packed statement at most (SQLite's own limit on one
/// blob is 1 GB by default).
const MAX_VALUE_BYTES: usize = 64 << 20;

/// Appends `v` as [`INT_WIDTH`] ASCII characters.
pub(crate) fn push_int(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(format!("{v:0INT_WIDTH$}").as_bytes());
}

/// A row count as an SQL integer.
pub(crate) fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Rows of a [`Changes`] packed column by column (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct PackedRows {
    /// Number of rows.
    pub len: usize,
    /// 32-byte node hashes.
    pub hash: Vec<u8>,
    /// One kind byte per row.
    pub kind: Vec<u8>,
    /// 32-byte left child hashes (zeros unless a branch).
    pub l_hash: Vec<u8>,
    /// 32-byte right child hashes (zeros unless a branch).
    pub r_hash: Vec<u8>,
    /// 32-byte compacted-leaf keys (zeros unless a compacted leaf).
    pub leaf_key: Vec<u8>,
    /// Leaf values, concatenated.
    pub value: Vec<u8>,
    /// Offset of each row's value in `value` (integers).
    pub value_at: Vec<u8>,
    /// Length of each row's value (integers).
    pub value_len: Vec<u8>,
    /// Sums as SQL integers (integers).
    pub sum: Vec<u8>,
    /// Reference-count deltas (integers).
    pub delta: Vec<u8>,
}

impl PackedRows {
    /// Packs the rows of `changes` at `rows`, in order, into as few chunks
    /// as the size limits allow.
    pub fn chunks(changes: &Changes<'_>, rows: impl IntoIterator<Item = usize>) -> Vec<PackedRows> {
        let mut out: Vec<PackedRows> = Vec::new();
        let mut cur = PackedRows::default();
        for i in rows {
            let value = changes.value[i].unwrap_or_default();
            if cur.len == MAX_ROWS
                || (cur.len > 0 && cur.value.len().saturating_add(value.len()) > MAX_VALUE_BYTES)
            {
                out.push(std::mem::take(&mut cur));
            }
            cur.push(changes, i);
        }
        if cur.len > 0 {
            out.push(cur);
        }
        out
    }

    fn push(&mut self, changes: &Changes<'_>, i: usize) {
        const ZERO: [u8; 32] = [0; 32];
        let field =
            |f: Option<&[u8]>| -> [u8; 32] { f.and_then(|b| b.try_into().ok()).unwrap_or(ZERO) };
        let kind = match (changes.l_hash[i], changes.leaf_key[i], changes.value[i]) {
            (Some(_), _, _) => KIND_BRANCH,
            (None, Some(_), _) => KIND_COMPACTED,
            (None, None, Some(_)) => KIND_LEAF,
            (None, None, None) => KIND_COUNT_ONLY,
        };
        let value = changes.value[i].unwrap_or_default();
        self.hash.extend_from_slice(changes.hash[i]);
        self.kind.push(kind);
        self.l_hash.extend_from_slice(&field(changes.l_hash[i]));
        self.r_hash.extend_from_slice(&field(changes.r_hash[i]));
        self.leaf_key.extend_from_slice(&field(changes.leaf_key[i]));
        push_int(&mut self.value_at, count(self.value.len()));
        push_int(&mut self.value_len, count(value.len()));
        self.value.extend_from_slice(value);
        push_int(&mut self.sum, changes.sum[i]);
        push_int(&mut self.delta, changes.delta[i]);
        self.len += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_fixed_width_with_sign() {
        let mut out = Vec::new();
        for v in [0, 1, -1, i64::MAX, i64::MIN] {
            let before = out.len();
            push_int(&mut out, v);
            assert_eq!(out.len() - before, INT_WIDTH, "{v}");
            let text = std::str::from_utf8(&out[before..]).expect("ascii");
            assert_eq!(text.parse::<i64>().expect("parses"), v);
        }
    }
}
