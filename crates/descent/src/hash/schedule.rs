//! The second block of a branch hash, scheduled once per sum.
//!
//! A branch preimage is 72 bytes, so its second 64-byte block is the
//! 8-byte sum, the terminator and the length: it depends on the sum alone.
//! A lift hashes the same sum at every level of its climb (about 240
//! times), so its 64 message words (with the round constants added) are
//! computed once and the second compression runs rounds only.

/// The SHA-256 round constants.
pub(crate) const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

/// The message schedule of the second block of every branch hash with one
/// sum, round constants added, four words per group of four rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SumSchedule {
    sum: u64,
    added: [[u32; 4]; 16],
}

impl SumSchedule {
    /// Schedules the block `be64(sum) || 0x80 || 0… || be64(576)`.
    pub fn new(sum: u64) -> Self {
        let mut w = [0u32; 64];
        w[0] = (sum >> 32) as u32;
        w[1] = sum as u32;
        w[2] = 0x8000_0000;
        w[15] = 576;
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let added = std::array::from_fn(|g| {
            std::array::from_fn(|j| w[4 * g + j].wrapping_add(K[4 * g + j]))
        });
        SumSchedule { sum, added }
    }

    /// The sum it was made for.
    pub fn sum(&self) -> u64 {
        self.sum
    }

    /// Words `4g..4g + 4` plus their round constants, for each group `g`.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn added(&self) -> &[[u32; 4]; 16] {
        &self.added
    }
}
