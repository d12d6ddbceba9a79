//! Bitcoin structures inside a proof: outpoints, the block header and the
//! anchor transaction, in btcd's `wire` encodings.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use sha2::{Digest, Sha256};

use crate::codec::{Reader, count, len_u64, put_compact_size};
use crate::error::{Context, DecodeError, NonCanonicalReason};
use crate::limits::{
    MAX_MESSAGE_PAYLOAD, MAX_TX_IN_PER_MESSAGE, MAX_TX_OUT_PER_MESSAGE, MAX_WITNESS_ITEM_SIZE,
    MAX_WITNESS_ITEMS_PER_INPUT,
};

/// SHA-256 of SHA-256 (Bitcoin's `DoubleHashH`).
pub fn double_sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(Sha256::digest(data)).into()
}

/// A 32-byte hash in the reversed hex form Bitcoin displays (btcd's
/// `chainhash.Hash.String`).
pub fn display_hash(hash: &[u8; 32]) -> String {
    let mut reversed = *hash;
    reversed.reverse();
    hex::encode(reversed)
}

/// A transaction outpoint. `txid` is in internal byte order (as hashed and
/// as written on the wire), not the reversed display order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct OutPoint {
    /// The transaction's hash, internal byte order.
    pub txid: [u8; 32],
    /// The output index.
    pub index: u32,
}

impl OutPoint {
    /// The outpoint as tapd's TLV encoders write it (`asset.OutPointEncoder`):
    /// the hash, then the index **big-endian**.
    pub fn tlv_bytes(&self) -> [u8; 36] {
        self.bytes(self.index.to_be_bytes())
    }

    /// The outpoint as Bitcoin writes it (btcd's `wire.WriteOutPoint`, used
    /// by tapd for asset IDs and universe leaf keys): the hash, then the
    /// index **little-endian**.
    pub fn bitcoin_bytes(&self) -> [u8; 36] {
        self.bytes(self.index.to_le_bytes())
    }

    fn bytes(&self, index: [u8; 4]) -> [u8; 36] {
        let mut out = [0u8; 36];
        let (hash, tail) = out.split_at_mut(32);
        hash.copy_from_slice(&self.txid);
        tail.copy_from_slice(&index);
        out
    }

    /// Whether the hash is all zero and the index is zero.
    pub fn is_zero(&self) -> bool {
        self.txid == [0; 32] && self.index == 0
    }

    /// Reads the TLV form.
    pub(crate) fn read_tlv(r: &mut Reader<'_>, context: Context) -> Result<Self, DecodeError> {
        let txid = r.array(context)?;
        let index = r.u32_be(context)?;
        Ok(OutPoint { txid, index })
    }

    /// Reads the Bitcoin form.
    fn read_bitcoin(r: &mut Reader<'_>, context: Context) -> Result<Self, DecodeError> {
        let txid = r.array(context)?;
        let index = r.u32_le(context)?;
        Ok(OutPoint { txid, index })
    }
}

/// `txid:index` with the txid in display order, as btcd prints outpoints.
impl fmt::Display for OutPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", display_hash(&self.txid), self.index)
    }
}

impl fmt::Debug for OutPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OutPoint({self})")
    }
}

/// An 80-byte Bitcoin block header (btcd `wire.BlockHeader`). Hashes are in
/// internal byte order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct BlockHeader {
    /// Block version.
    pub version: i32,
    /// Hash of the previous block.
    pub prev_block: [u8; 32],
    /// Merkle root of the block's transactions.
    pub merkle_root: [u8; 32],
    /// Unix time, seconds.
    pub timestamp: u32,
    /// Compact difficulty target.
    pub bits: u32,
    /// Nonce.
    pub nonce: u32,
}

impl BlockHeader {
    /// Encoded size.
    pub const SIZE: usize = 80;

    /// Reads exactly 80 bytes.
    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let c = Context::BlockHeader;
        Ok(BlockHeader {
            version: r.i32_le(c)?,
            prev_block: r.array(c)?,
            merkle_root: r.array(c)?,
            timestamp: r.u32_le(c)?,
            bits: r.u32_le(c)?,
            nonce: r.u32_le(c)?,
        })
    }

    /// The 80 bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::SIZE);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.prev_block);
        out.extend_from_slice(&self.merkle_root);
        out.extend_from_slice(&self.timestamp.to_le_bytes());
        out.extend_from_slice(&self.bits.to_le_bytes());
        out.extend_from_slice(&self.nonce.to_le_bytes());
        out
    }

    /// The block hash (double SHA-256 of the header), internal byte order.
    pub fn block_hash(&self) -> [u8; 32] {
        double_sha256(&self.encode())
    }
}

/// A transaction input.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct TxIn {
    /// The output it spends.
    pub previous_output: OutPoint,
    /// The signature script.
    pub script_sig: Vec<u8>,
    /// The sequence number.
    pub sequence: u32,
    /// The segwit witness stack (empty without one).
    pub witness: Vec<Vec<u8>>,
}

/// A transaction output.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct TxOut {
    /// Value in satoshis (signed, as btcd reads it).
    pub value: i64,
    /// The output script.
    pub script_pubkey: Vec<u8>,
}

/// A Bitcoin transaction (btcd `wire.MsgTx`), decoded as btcd's
/// `Deserialize` does: the segwit encoding when the input count is zero
/// and a flag byte of 1 follows.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Transaction {
    /// Transaction version.
    pub version: i32,
    /// The inputs.
    pub inputs: Vec<TxIn>,
    /// The outputs.
    pub outputs: Vec<TxOut>,
    /// Lock time.
    pub lock_time: u32,
}

fn read_script(r: &mut Reader<'_>, max: u64, context: Context) -> Result<Vec<u8>, DecodeError> {
    let offset = r.offset();
    let length = r.compact_size(context)?;
    if length > max {
        return Err(DecodeError::BytesTooLong {
            context,
            offset,
            length,
            max,
        });
    }
    Ok(r.take(length, context)?.to_vec())
}

fn put_script(out: &mut Vec<u8>, script: &[u8]) {
    put_compact_size(out, len_u64(script.len()));
    out.extend_from_slice(script);
}

impl Transaction {
    /// Decodes a whole transaction: every byte must belong to it.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let tx = Self::read(&mut r)?;
        r.finish(Context::AnchorTx)?;
        Ok(tx)
    }

    /// Reads one transaction from `r`.
    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let c = Context::AnchorTx;
        let version = r.i32_le(c)?;
        let marker_offset = r.offset();
        let (mut n_in, mut cap_in) = count(r, MAX_TX_IN_PER_MESSAGE, 41, c, false)?;
        let mut segwit = false;
        if n_in == 0 {
            let offset = r.offset();
            let flag = r.u8(c)?;
            if flag != 0x01 {
                return Err(DecodeError::WitnessFlag { offset, flag });
            }
            segwit = true;
            (n_in, cap_in) = count(r, MAX_TX_IN_PER_MESSAGE, 41, c, false)?;
        }
        let mut inputs = Vec::with_capacity(cap_in);
        for _ in 0..n_in {
            let previous_output = OutPoint::read_bitcoin(r, c)?;
            let script_sig = read_script(r, MAX_MESSAGE_PAYLOAD, c)?;
            let sequence = r.u32_le(c)?;
            inputs.push(TxIn {
                previous_output,
                script_sig,
                sequence,
                witness: Vec::new(),
            });
        }
        let (n_out, cap_out) = count(r, MAX_TX_OUT_PER_MESSAGE, 9, c, false)?;
        let mut outputs = Vec::with_capacity(cap_out);
        for _ in 0..n_out {
            let value = r.i64_le(c)?;
            let script_pubkey = read_script(r, MAX_MESSAGE_PAYLOAD, c)?;
            outputs.push(TxOut {
                value,
                script_pubkey,
            });
        }
        if segwit {
            for input in &mut inputs {
                let (n, cap) = count(r, MAX_WITNESS_ITEMS_PER_INPUT, 1, c, false)?;
                let mut witness = Vec::with_capacity(cap);
                for _ in 0..n {
                    witness.push(read_script(r, MAX_WITNESS_ITEM_SIZE, c)?);
                }
                input.witness = witness;
            }
            // btcd would re-encode this without the marker (and Bitcoin
            // Core refuses it as a superfluous witness record).
            if inputs.iter().all(|i| i.witness.is_empty()) {
                return Err(DecodeError::NonCanonical {
                    context: c,
                    offset: marker_offset,
                    reason: NonCanonicalReason::SuperfluousWitness,
                });
            }
        }
        let lock_time = r.u32_le(c)?;
        Ok(Transaction {
            version,
            inputs,
            outputs,
            lock_time,
        })
    }

    /// Whether any input has witness data (btcd's `HasWitness`).
    pub fn has_witness(&self) -> bool {
        self.inputs.iter().any(|i| !i.witness.is_empty())
    }

    fn write(&self, out: &mut Vec<u8>, with_witness: bool) {
        let segwit = with_witness && self.has_witness();
        out.extend_from_slice(&self.version.to_le_bytes());
        if segwit {
            out.extend_from_slice(&[0x00, 0x01]);
        }
        put_compact_size(out, len_u64(self.inputs.len()));
        for input in &self.inputs {
            out.extend_from_slice(&input.previous_output.bitcoin_bytes());
            put_script(out, &input.script_sig);
            out.extend_from_slice(&input.sequence.to_le_bytes());
        }
        put_compact_size(out, len_u64(self.outputs.len()));
        for output in &self.outputs {
            out.extend_from_slice(&output.value.to_le_bytes());
            put_script(out, &output.script_pubkey);
        }
        if segwit {
            for input in &self.inputs {
                put_compact_size(out, len_u64(input.witness.len()));
                for item in &input.witness {
                    put_script(out, item);
                }
            }
        }
        out.extend_from_slice(&self.lock_time.to_le_bytes());
    }

    /// The full serialization (with witness data when there is any), as
    /// btcd's `Serialize`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write(&mut out, true);
        out
    }

    /// The serialization without witness data (btcd's `SerializeNoWitness`).
    pub fn encode_no_witness(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write(&mut out, false);
        out
    }

    /// The transaction ID (btcd's `TxHash`: double SHA-256 of the
    /// serialization without witness data), internal byte order.
    pub fn txid(&self) -> [u8; 32] {
        double_sha256(&self.encode_no_witness())
    }
}
