//! The read-your-writes token: a position in the primary's write-ahead log.

use std::fmt;

/// A position in the primary's WAL that covers a write: a standby that has
/// replayed up to it shows the write (see
/// [`ReplicaSet::commit_token`](crate::ReplicaSet::commit_token)).
///
/// Tokens are ordered as the log is. `Display` prints Postgres's `X/Y`
/// form; [`lsn`](Self::lsn) and [`from_lsn`](Self::from_lsn) carry a token
/// through a client as one integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CommitToken(u64);

impl CommitToken {
    /// The token at WAL position `lsn` (bytes from the log's start).
    pub fn from_lsn(lsn: u64) -> Self {
        CommitToken(lsn)
    }

    /// The WAL position, in bytes from the log's start.
    pub fn lsn(self) -> u64 {
        self.0
    }
}

impl fmt::Display for CommitToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xffff_ffff)
    }
}

#[cfg(test)]
mod tests {
    use crate::CommitToken;

    #[test]
    fn prints_as_postgres_does() {
        assert_eq!(CommitToken::from_lsn(0x1_0000_00A8).to_string(), "1/A8");
        assert_eq!(CommitToken::from_lsn(0x3000000).to_string(), "0/3000000");
        assert!(CommitToken::from_lsn(5) < CommitToken::from_lsn(6));
    }
}
