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

/// Appends `v` as [`INT_WIDTH`] ASCII characters: `format!("{v:020}")`
/// (a `-` then 19 digits, or 20 digits), without allocating; a commit
/// packs five of them per row.
pub(crate) fn push_int(out: &mut Vec<u8>, v: i64) {
    let digits = if v < 0 {
        out.push(b'-');
        INT_WIDTH - 1
    } else {
        INT_WIDTH
    };
    push_digits(out, v.unsigned_abs(), digits);
}

/// Appends the last `width` decimal digits of `v`, zero-padded.
fn push_digits(out: &mut Vec<u8>, mut v: u64, width: usize) {
    let mut buf = [b'0'; INT_WIDTH];
    let width = width.min(INT_WIDTH);
    for d in buf[..width].iter_mut().rev() {
        // `v % 10` is below 10: the cast cannot truncate.
        *d = b'0' + (v % 10) as u8;
        v /= 10;
    }
    out.extend_from_slice(&buf[..width]);
}

/// Appends a depth as 3 ASCII digits (`format!("{:03}", depth.min(999))`).
pub(crate) fn push_depth(out: &mut Vec<u8>, depth: usize) {
    push_digits(out, u64::try_from(depth.min(999)).unwrap_or(999), 3);
}

/// A row count as an SQL integer.
pub(crate) fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// One row of a packed statement: its namespace, position, body (empty
/// for keys alone) and two integers the statement may use (a version, the
/// newest pinned version).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PackedRow<'a> {
    pub ns: i64,
    pub key: &'a RowKey,
    pub body: &'a [u8],
    pub a: i64,
    pub b: i64,
}

/// Strata rows of one or more namespaces packed column by column:
/// namespace ids as integers, paths zero-padded to 32 bytes
/// (`substr(?, i * 32 + 1, (depth + 7) / 8)` cuts the real path back
/// out), depths as 3-digit text, bodies concatenated with an offset and a
/// length each, and two integer columns.
#[derive(Debug, Default)]
pub(crate) struct PackedRows {
    /// Number of rows.
    pub len: usize,
    /// Namespace ids (integers).
    pub ns: Vec<u8>,
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
    /// The rows' first integers.
    pub a: Vec<u8>,
    /// The rows' second integers.
    pub b: Vec<u8>,
}

impl PackedRows {
    /// Packs rows, in order, into as few chunks as the size limits allow.
    pub fn chunks<'a>(rows: impl IntoIterator<Item = PackedRow<'a>>) -> Vec<PackedRows> {
        let mut out: Vec<PackedRows> = Vec::new();
        let mut cur = PackedRows::default();
        for row in rows {
            if cur.len == MAX_ROWS
                || (cur.len > 0 && cur.body.len().saturating_add(row.body.len()) > MAX_BODY_BYTES)
            {
                out.push(std::mem::take(&mut cur));
            }
            push_int(&mut cur.ns, row.ns);
            cur.path.extend_from_slice(row.key.path.padded());
            push_depth(&mut cur.depth, row.key.depth);
            push_int(&mut cur.body_at, count(cur.body.len()));
            push_int(&mut cur.body_len, count(row.body.len()));
            cur.body.extend_from_slice(row.body);
            push_int(&mut cur.a, row.a);
            push_int(&mut cur.b, row.b);
            cur.len += 1;
        }
        if cur.len > 0 {
            out.push(cur);
        }
        out
    }
}

/// Texts packed into one blob, with an offset and a length (integers)
/// each: `CAST(substr(?text, off + 1, len) AS TEXT)` cuts one back out.
#[derive(Debug, Default)]
pub(crate) struct PackedTexts {
    /// Number of texts.
    pub len: usize,
    /// The texts, concatenated.
    pub text: Vec<u8>,
    /// Offset of each text (integers).
    pub at: Vec<u8>,
    /// Length of each text in bytes (integers).
    pub text_len: Vec<u8>,
    /// An integer per text.
    pub int: Vec<u8>,
}

impl PackedTexts {
    /// Packs `(text, integer)` pairs, in order.
    pub fn new<'a>(items: impl IntoIterator<Item = (&'a str, i64)>) -> PackedTexts {
        let mut out = PackedTexts::default();
        for (text, int) in items {
            push_int(&mut out.at, count(out.text.len()));
            push_int(&mut out.text_len, count(text.len()));
            out.text.extend_from_slice(text.as_bytes());
            push_int(&mut out.int, int);
            out.len += 1;
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
        for v in [
            0,
            7,
            -7,
            1 << 40,
            -(1 << 40),
            i64::MAX,
            i64::MIN,
            i64::MIN + 1,
        ] {
            let mut out = Vec::new();
            push_int(&mut out, v);
            assert_eq!(out, format!("{v:0INT_WIDTH$}").into_bytes(), "{v}");
        }
        for depth in [0, 4, 12, 256, 999, 1000] {
            let mut out = Vec::new();
            push_depth(&mut out, depth);
            assert_eq!(
                out,
                format!("{:03}", depth.min(999)).into_bytes(),
                "{depth}"
            );
        }
    }
}
