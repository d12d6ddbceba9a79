//! Byte cursors, BigSize and CompactSize integers, and TLV streams in the
//! rules of lnd's `tlv` package as tapd uses it.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use crate::error::{Context, DecodeError, NonCanonicalReason};
use crate::limits::MAX_RECORD_SIZE;

/// A usize as a u64 (lossless on every supported target).
pub(crate) fn len_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// A read cursor over a slice that reports offsets relative to the start of
/// the top-level input.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> Reader<'a> {
    /// A cursor at the start of `buf`, whose offset 0 is `buf[0]`.
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            pos: 0,
            base: 0,
        }
    }

    /// The absolute offset of the next byte.
    pub(crate) fn offset(&self) -> usize {
        self.base.saturating_add(self.pos)
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Whether every byte has been read.
    pub(crate) fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// The unread bytes, without consuming them.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or(&[])
    }

    fn truncated(&self, context: Context, needed: u64) -> DecodeError {
        DecodeError::Truncated {
            context,
            offset: self.offset(),
            needed,
            available: self.remaining(),
        }
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: u64, context: Context) -> Result<&'a [u8], DecodeError> {
        let err = self.truncated(context, n);
        let n = usize::try_from(n).map_err(|_| err.clone())?;
        let end = self.pos.checked_add(n).ok_or_else(|| err.clone())?;
        let bytes = self.buf.get(self.pos..end).ok_or(err)?;
        self.pos = end;
        Ok(bytes)
    }

    /// A cursor over the next `n` bytes, which are consumed here.
    pub(crate) fn sub(&mut self, n: u64, context: Context) -> Result<Reader<'a>, DecodeError> {
        let base = self.offset();
        let buf = self.take(n, context)?;
        Ok(Reader { buf, pos: 0, base })
    }

    /// The next `N` bytes as an array.
    pub(crate) fn array<const N: usize>(
        &mut self,
        context: Context,
    ) -> Result<[u8; N], DecodeError> {
        let err = self.truncated(context, len_u64(N));
        let bytes = self.take(len_u64(N), context)?;
        <[u8; N]>::try_from(bytes).map_err(|_| err)
    }

    /// One byte.
    pub(crate) fn u8(&mut self, context: Context) -> Result<u8, DecodeError> {
        let [b] = self.array::<1>(context)?;
        Ok(b)
    }

    /// A big-endian u16.
    pub(crate) fn u16_be(&mut self, context: Context) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array(context)?))
    }

    /// A big-endian u32.
    pub(crate) fn u32_be(&mut self, context: Context) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array(context)?))
    }

    /// A big-endian u64.
    pub(crate) fn u64_be(&mut self, context: Context) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array(context)?))
    }

    /// A little-endian u32.
    pub(crate) fn u32_le(&mut self, context: Context) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array(context)?))
    }

    /// A little-endian i32.
    pub(crate) fn i32_le(&mut self, context: Context) -> Result<i32, DecodeError> {
        Ok(i32::from_le_bytes(self.array(context)?))
    }

    /// A little-endian i64.
    pub(crate) fn i64_le(&mut self, context: Context) -> Result<i64, DecodeError> {
        Ok(i64::from_le_bytes(self.array(context)?))
    }

    /// A BigSize integer (big-endian, `0xfd`/`0xfe`/`0xff` prefixes, shortest
    /// form only), as lnd's `tlv.ReadVarInt`.
    pub(crate) fn bigsize(&mut self, context: Context) -> Result<u64, DecodeError> {
        let offset = self.offset();
        let non_canonical = DecodeError::NonCanonicalBigSize { context, offset };
        match self.u8(context)? {
            0xfd => {
                let v = u64::from(self.u16_be(context)?);
                if v < 0xfd { Err(non_canonical) } else { Ok(v) }
            }
            0xfe => {
                let v = u64::from(self.u32_be(context)?);
                if v <= 0xffff {
                    Err(non_canonical)
                } else {
                    Ok(v)
                }
            }
            0xff => {
                let v = self.u64_be(context)?;
                if v <= 0xffff_ffff {
                    Err(non_canonical)
                } else {
                    Ok(v)
                }
            }
            d => Ok(u64::from(d)),
        }
    }

    /// A Bitcoin CompactSize integer (little-endian, shortest form only), as
    /// btcd's `wire.ReadVarInt`.
    pub(crate) fn compact_size(&mut self, context: Context) -> Result<u64, DecodeError> {
        let offset = self.offset();
        let non_canonical = DecodeError::NonCanonicalCompactSize { context, offset };
        match self.u8(context)? {
            0xfd => {
                let v = u64::from(u16::from_le_bytes(self.array(context)?));
                if v < 0xfd { Err(non_canonical) } else { Ok(v) }
            }
            0xfe => {
                let v = u64::from(u32::from_le_bytes(self.array(context)?));
                if v <= 0xffff {
                    Err(non_canonical)
                } else {
                    Ok(v)
                }
            }
            0xff => {
                let v = u64::from_le_bytes(self.array(context)?);
                if v <= 0xffff_ffff {
                    Err(non_canonical)
                } else {
                    Ok(v)
                }
            }
            d => Ok(u64::from(d)),
        }
    }

    /// A BigSize length followed by that many bytes, the length at most
    /// `max` (tapd's `InlineVarBytesDecoder`).
    pub(crate) fn inline_bytes(
        &mut self,
        max: u64,
        context: Context,
    ) -> Result<Reader<'a>, DecodeError> {
        let offset = self.offset();
        let length = self.bigsize(context)?;
        if length > max {
            return Err(DecodeError::BytesTooLong {
                context,
                offset,
                length,
                max,
            });
        }
        self.sub(length, context)
    }

    /// Refuses unread bytes.
    pub(crate) fn finish(&self, context: Context) -> Result<(), DecodeError> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes {
                context,
                offset: self.offset(),
                remaining: self.remaining(),
            })
        }
    }
}

/// A list count read before the list: at most `max`, and never more items
/// than the remaining bytes could hold at `min_item` bytes each (so a
/// forged count cannot make us allocate). Returns the count and a safe
/// initial capacity.
pub(crate) fn count(
    r: &mut Reader<'_>,
    max: u64,
    min_item: usize,
    context: Context,
    bigsize: bool,
) -> Result<(u64, usize), DecodeError> {
    let offset = r.offset();
    let count = if bigsize {
        r.bigsize(context)?
    } else {
        r.compact_size(context)?
    };
    if count > max {
        return Err(DecodeError::CountTooLarge {
            context,
            offset,
            count,
            max,
        });
    }
    let fits = r.remaining().checked_div(min_item.max(1)).unwrap_or(0);
    let capacity = usize::try_from(count).unwrap_or(usize::MAX).min(fits);
    Ok((count, capacity))
}

/// One TLV record of a stream.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Record<'a> {
    /// The record's type.
    pub(crate) typ: u64,
    /// Offset of the record's type.
    pub(crate) offset: usize,
    /// The record's value.
    pub(crate) value: Reader<'a>,
}

impl<'a> Record<'a> {
    /// The value's length.
    pub(crate) fn len(&self) -> u64 {
        len_u64(self.value.remaining())
    }

    /// Refuses a value whose length is not `expected`.
    pub(crate) fn expect_len(&self, context: Context, expected: u64) -> Result<(), DecodeError> {
        if self.len() == expected {
            Ok(())
        } else {
            Err(DecodeError::InvalidLength {
                context,
                offset: self.offset,
                record_type: self.typ,
                expected,
                actual: self.len(),
            })
        }
    }

    /// Refuses a value longer than `max` (lnd's `ErrRecordTooLarge`).
    pub(crate) fn max_len(&self, context: Context, max: u64) -> Result<(), DecodeError> {
        if self.len() > max {
            Err(DecodeError::RecordTooLarge {
                context,
                offset: self.offset,
                record_type: self.typ,
                length: self.len(),
                max,
            })
        } else {
            Ok(())
        }
    }

    /// The value as exactly `N` bytes.
    pub(crate) fn fixed<const N: usize>(
        mut self,
        context: Context,
    ) -> Result<[u8; N], DecodeError> {
        self.expect_len(context, len_u64(N))?;
        self.value.array(context)
    }

    /// The value as one byte.
    pub(crate) fn byte(self, context: Context) -> Result<u8, DecodeError> {
        let [b] = self.fixed::<1>(context)?;
        Ok(b)
    }

    /// The value as a BigSize integer filling it exactly.
    pub(crate) fn bigsize(mut self, context: Context) -> Result<u64, DecodeError> {
        let v = self.value.bigsize(context)?;
        self.value.finish(context)?;
        Ok(v)
    }

    /// The value as a 0/1 boolean byte (tapd reads any byte but 1 as false;
    /// we refuse bytes other than 0 and 1).
    pub(crate) fn bool(self, context: Context) -> Result<bool, DecodeError> {
        let offset = self.value.offset();
        match self.byte(context)? {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(DecodeError::InvalidBool {
                context,
                offset,
                value,
            }),
        }
    }

    /// A non-canonical error at this record.
    pub(crate) fn non_canonical(
        &self,
        context: Context,
        reason: NonCanonicalReason,
    ) -> DecodeError {
        DecodeError::NonCanonical {
            context,
            offset: self.offset,
            reason,
        }
    }

    /// An unexpected-record error at this record.
    pub(crate) fn unexpected(&self, context: Context) -> DecodeError {
        DecodeError::UnexpectedRecord {
            context,
            offset: self.offset,
            record_type: self.typ,
        }
    }

    /// An unknown-and-dropped error at this record.
    pub(crate) fn dropped(&self, context: Context) -> DecodeError {
        DecodeError::UnknownDroppedType {
            context,
            offset: self.offset,
            record_type: self.typ,
        }
    }

    /// tapd's strict rule for a type it does not know: an even one is
    /// refused, an odd one is kept (and re-encoded as it came).
    pub(crate) fn keep_unknown(
        self,
        context: Context,
        unknown: &mut BTreeMap<u64, Vec<u8>>,
    ) -> Result<(), DecodeError> {
        if self.typ & 1 == 0 {
            return Err(DecodeError::UnknownEvenType {
                context,
                offset: self.offset,
                record_type: self.typ,
            });
        }
        unknown.insert(self.typ, self.value.rest().to_vec());
        Ok(())
    }
}

/// A TLV stream reader: strictly increasing types, BigSize type and length,
/// lengths within the stream, and with `p2p` lnd's 65,535-byte cap on every
/// record (`DecodeP2P`).
pub(crate) struct Stream<'a> {
    r: Reader<'a>,
    context: Context,
    p2p: bool,
    previous: Option<u64>,
}

impl<'a> Stream<'a> {
    /// A stream over all of `r`.
    pub(crate) fn new(r: Reader<'a>, context: Context, p2p: bool) -> Self {
        Stream {
            r,
            context,
            p2p,
            previous: None,
        }
    }

    /// The next record, or `None` at the end of the input.
    pub(crate) fn next_record(&mut self) -> Result<Option<Record<'a>>, DecodeError> {
        if self.r.is_empty() {
            return Ok(None);
        }
        let context = self.context;
        let offset = self.r.offset();
        let typ = self.r.bigsize(context)?;
        if let Some(previous) = self.previous
            && typ <= previous
        {
            return Err(DecodeError::TypeOrder {
                context,
                offset,
                previous,
                record_type: typ,
            });
        }
        self.previous = Some(typ);
        let length = self.r.bigsize(context)?;
        if self.p2p && length > MAX_RECORD_SIZE {
            return Err(DecodeError::RecordTooLarge {
                context,
                offset,
                record_type: typ,
                length,
                max: MAX_RECORD_SIZE,
            });
        }
        let value = self.r.sub(length, context)?;
        Ok(Some(Record { typ, offset, value }))
    }
}

/// `v`, or a missing-record error.
pub(crate) fn required<T>(
    v: Option<T>,
    context: Context,
    record_type: u64,
) -> Result<T, DecodeError> {
    v.ok_or(DecodeError::MissingRecord {
        context,
        record_type,
    })
}

/// Appends a BigSize integer.
pub(crate) fn put_bigsize(out: &mut Vec<u8>, v: u64) {
    if let Ok(b) = u8::try_from(v)
        && b < 0xfd
    {
        out.push(b);
    } else if let Ok(v) = u16::try_from(v) {
        out.push(0xfd);
        out.extend_from_slice(&v.to_be_bytes());
    } else if let Ok(v) = u32::try_from(v) {
        out.push(0xfe);
        out.extend_from_slice(&v.to_be_bytes());
    } else {
        out.push(0xff);
        out.extend_from_slice(&v.to_be_bytes());
    }
}

/// Appends a Bitcoin CompactSize integer.
pub(crate) fn put_compact_size(out: &mut Vec<u8>, v: u64) {
    if let Ok(b) = u8::try_from(v)
        && b < 0xfd
    {
        out.push(b);
    } else if let Ok(v) = u16::try_from(v) {
        out.push(0xfd);
        out.extend_from_slice(&v.to_le_bytes());
    } else if let Ok(v) = u32::try_from(v) {
        out.push(0xfe);
        out.extend_from_slice(&v.to_le_bytes());
    } else {
        out.push(0xff);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Appends a BigSize length and the bytes.
pub(crate) fn put_inline(out: &mut Vec<u8>, bytes: &[u8]) {
    put_bigsize(out, len_u64(bytes.len()));
    out.extend_from_slice(bytes);
}

/// Collects TLV records and writes them sorted by type.
#[derive(Default)]
pub(crate) struct TlvWriter {
    records: Vec<(u64, Vec<u8>)>,
}

impl TlvWriter {
    /// An empty writer.
    pub(crate) fn new() -> Self {
        TlvWriter::default()
    }

    /// Adds a record.
    pub(crate) fn push(&mut self, typ: u64, value: Vec<u8>) {
        self.records.push((typ, value));
    }

    /// Adds kept unknown records.
    pub(crate) fn unknown(&mut self, unknown: &BTreeMap<u64, Vec<u8>>) {
        for (typ, value) in unknown {
            self.records.push((*typ, value.clone()));
        }
    }

    /// The stream's bytes.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        self.records.sort_by_key(|(typ, _)| *typ);
        let mut out = Vec::new();
        for (typ, value) in &self.records {
            put_bigsize(&mut out, *typ);
            put_inline(&mut out, value);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bigsize_and_compact_size_round_trip_at_every_boundary() {
        for v in [
            0,
            0xfc,
            0xfd,
            0xffff,
            0x1_0000,
            0xffff_ffff,
            0x1_0000_0000,
            u64::MAX,
        ] {
            let mut out = Vec::new();
            put_bigsize(&mut out, v);
            let mut r = Reader::new(&out);
            assert_eq!(r.bigsize(Context::Proof), Ok(v));
            assert!(r.is_empty());
            let mut out = Vec::new();
            put_compact_size(&mut out, v);
            let mut r = Reader::new(&out);
            assert_eq!(r.compact_size(Context::AnchorTx), Ok(v));
            assert!(r.is_empty());
        }
    }

    #[test]
    fn longer_forms_are_refused() {
        for bytes in [
            &[0xfd, 0x00, 0xfc][..],
            &[0xfe, 0, 0, 0xff, 0xff],
            &[0xff, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff],
        ] {
            assert_eq!(
                Reader::new(bytes).bigsize(Context::Proof),
                Err(DecodeError::NonCanonicalBigSize {
                    context: Context::Proof,
                    offset: 0
                })
            );
            let mut le = bytes.to_vec();
            if let Some(tail) = le.get_mut(1..) {
                tail.reverse();
            }
            assert_eq!(
                Reader::new(&le).compact_size(Context::AnchorTx),
                Err(DecodeError::NonCanonicalCompactSize {
                    context: Context::AnchorTx,
                    offset: 0
                })
            );
        }
    }

    #[test]
    fn streams_keep_order_and_the_p2p_cap() {
        let mut ok = Vec::new();
        for (t, v) in [(1u64, &b"a"[..]), (3, b""), (u64::MAX, b"z")] {
            put_bigsize(&mut ok, t);
            put_inline(&mut ok, v);
        }
        let mut s = Stream::new(Reader::new(&ok), Context::Proof, true);
        let mut types = Vec::new();
        while let Some(rec) = s.next_record().unwrap() {
            types.push(rec.typ);
        }
        assert_eq!(types, [1, 3, u64::MAX]);
        let big = [&[5u8, 0xfe, 0, 1, 0, 0][..], &[0; 65_536]].concat();
        let mut s = Stream::new(Reader::new(&big), Context::TaprootProof, true);
        assert!(matches!(
            s.next_record(),
            Err(DecodeError::RecordTooLarge { length: 65_536, .. })
        ));
        let mut s = Stream::new(Reader::new(&big), Context::Proof, false);
        assert_eq!(s.next_record().unwrap().unwrap().len(), 65_536);
    }
}
