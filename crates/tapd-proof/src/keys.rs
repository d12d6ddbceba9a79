//! 33-byte compressed public keys as tapd serializes them.

use core::fmt;

use crate::codec::Reader;
use crate::error::{Context, DecodeError, KeyError, NonCanonicalReason};
use crate::secp;

/// A public key in its 33-byte compressed serialization.
///
/// Where the decoder got it from decides what was checked: script keys,
/// group keys, Taproot internal keys and delegation keys are valid
/// secp256k1 points; previous-ID script keys and V0 group key reveal raw
/// keys are valid points or all zero (tapd's "empty" key); V1 group key
/// reveal internal keys and STXO proof keys are taken as raw bytes, as tapd
/// does.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PublicKey(
    /// The 33 bytes: a parity byte (2 or 3) and the x coordinate.
    pub [u8; 33],
);

impl PublicKey {
    /// The 33 bytes.
    pub fn as_bytes(&self) -> &[u8; 33] {
        &self.0
    }

    /// The 32-byte x-only (BIP-340) serialization: the key without its
    /// parity byte, what btcd's `schnorr.SerializePubKey` returns.
    pub fn x_only(&self) -> [u8; 32] {
        let [_parity, x @ ..] = self.0;
        x
    }

    /// Whether all 33 bytes are zero (tapd's "empty" key).
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 33]
    }

    /// Checks that the bytes are a compressed secp256k1 point.
    pub fn validate(&self) -> Result<(), KeyError> {
        secp::check_compressed(&self.0)
    }

    /// The key in lower-case hex.
    pub fn to_hex(&self) -> alloc::string::String {
        hex::encode(self.0)
    }
}

/// The all-zero ("empty") key.
impl Default for PublicKey {
    fn default() -> Self {
        PublicKey([0; 33])
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.to_hex())
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// How much of a key tapd checks where it is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyRule {
    /// tapd's `CompressedPubKeyDecoder`: a valid point; all zero decodes to
    /// the empty key, which tapd re-encodes as `02 || 0^32`, so we refuse it.
    Point,
    /// tapd's `SerializedKeyDecoder`: all zero, or a valid point.
    PointOrZero,
    /// tapd's `DBytes33`: any 33 bytes.
    Raw,
}

/// Reads 33 bytes as a key under `rule`.
pub(crate) fn read_key(
    r: &mut Reader<'_>,
    rule: KeyRule,
    context: Context,
) -> Result<PublicKey, DecodeError> {
    let offset = r.offset();
    let key = PublicKey(r.array(context)?);
    match rule {
        KeyRule::Raw => {}
        KeyRule::PointOrZero if key.is_zero() => {}
        KeyRule::Point if key.is_zero() => {
            return Err(DecodeError::NonCanonical {
                context,
                offset,
                reason: NonCanonicalReason::EmptyKey,
            });
        }
        KeyRule::Point | KeyRule::PointOrZero => {
            key.validate()
                .map_err(|reason| DecodeError::InvalidPublicKey {
                    context,
                    offset,
                    reason,
                })?
        }
    }
    Ok(key)
}
