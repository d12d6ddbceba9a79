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
//! * 32-byte fields (hashes, zero-padded row paths): `substr(blob, i * 32 + 1, n)`;
//! * small integers (depths): 3 ASCII digits each;
//! * integers: [`INT_WIDTH`] ASCII characters each (`{:020}`, sign
//!   included), read with `CAST(substr(blob, i * 20 + 1, 20) AS INTEGER)`
//!   (a blob cast to an integer is read as text);
//! * variable-length bodies: concatenated, with an offset and a length
//!   (integers) per row.

use crate::strata::RowKey;

/// Counts `0 .. ?2` (the rows packed into the blob parameters): the driving
/// table of every packed statement. `?2` must be at least 1.
pub(crate) const INDEX_CTE: &str =
    "idx(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM idx WHERE i + 1 < ?2)";

/// Characters per packed integer: an i64 with its sign, zero-padded.
pub(crate) const INT_WIDTH: usize = 20;

/// Rows per packed statement at most.
pub(crate) const MAX_ROWS: usize = 16_384;
/// Body bytes per packed statement at most (SQLite's own limit on one
/// blob is 1 GB by default).
pub(crate) const MAX_BODY_BYTES: usize = 64 << 20;

/// Appends `v` as [`INT_WIDTH`] ASCII characters.
pub(crate) fn push_int(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(format!("{v:0INT_WIDTH$}").as_bytes());
}

/// A row count as an SQL integer.
pub(crate) fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Strata row keys (and, for writes, bodies) packed column by column:
/// paths zero-padded to 32 bytes (`substr(?, i * 32 + 1, (depth + 7) / 8)`
/// cuts the real path back out), depths as 3-digit text, bodies
/// concatenated with an offset and a length each.
#[derive(Debug, Default)]
pub(crate) struct PackedRows {
    /// Number of rows.
    pub len: usize,
    /// 32-byte zero-padded paths.
    pub path: Vec<u8>,
    /// Depths, 3 ASCII digits each.
    pub depth: Vec<u8>,
    /// Bodies, concatenated.
    pub body: Vec<u8>,
    /// Offset of each body in `body` (integers).
    pub body_at: Vec<u8>,
    /// Length of each body (integers).
    pub body_len: Vec<u8>,
}

impl PackedRows {
    /// Packs `(key, body)` rows, in order, into as few chunks as the size
    /// limits allow (pass empty bodies for keys alone).
    pub fn chunks<'a>(rows: impl IntoIterator<Item = (&'a RowKey, &'a [u8])>) -> Vec<PackedRows> {
        let mut out: Vec<PackedRows> = Vec::new();
        let mut cur = PackedRows::default();
        for (key, body) in rows {
            if cur.len == MAX_ROWS
                || (cur.len > 0 && cur.body.len().saturating_add(body.len()) > MAX_BODY_BYTES)
            {
                out.push(std::mem::take(&mut cur));
            }
            let mut path = [0u8; 32];
            path[..key.path.len()].copy_from_slice(&key.path);
            cur.path.extend_from_slice(&path);
            cur.depth
                .extend_from_slice(format!("{:03}", key.depth.min(999)).as_bytes());
            push_int(&mut cur.body_at, count(cur.body.len()));
            push_int(&mut cur.body_len, count(body.len()));
            cur.body.extend_from_slice(body);
            cur.len += 1;
        }
        if cur.len > 0 {
            out.push(cur);
        }
        out
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
