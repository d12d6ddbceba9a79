//! SHA-256 branch hashes on x86-64 SHA-NI, `N` independent messages
//! interleaved on one core.
//!
//! `sha256rnds2` is latency-bound in one stream (about 1.1 ns per
//! instruction here); independent messages fill its pipeline. Bitcoin
//! Core's `TransformD64_2way` does the same for its merkle trees. The
//! message schedule (`sha256msg1/2`) runs on the same unit, so two lanes
//! come close to its limit on this machine and four gain little more (they
//! spill the 16 vector registers; BENCHMARKS.md, "Lanes"); a lift's second
//! blocks skip the schedule altogether ([`SumSchedule`]), and
//! [`ShaNi::climb`] keeps a lift's state in registers from level to level.
//!
//! This module holds all of the crate's `unsafe`: the loads and stores of
//! 16 bytes and the calls into the kernels after the CPU was checked.
//! [`super::lanes`] tests every kernel and lane count against `sha2` and
//! against the portable path.

use std::arch::x86_64::{
    __m128i, _mm_add_epi32, _mm_alignr_epi8, _mm_blend_epi16, _mm_blendv_epi8, _mm_loadu_si128,
    _mm_set_epi32, _mm_set_epi64x, _mm_set1_epi8, _mm_sha256msg1_epu32, _mm_sha256msg2_epu32,
    _mm_sha256rnds2_epu32, _mm_shuffle_epi8, _mm_shuffle_epi32, _mm_storeu_si128,
};

use super::climb::Climb;
use super::schedule::{K, SumSchedule};
use ms_smt_core::hash::Hash;

/// Proof that this CPU runs the SHA-NI kernels: only [`ShaNi::detect`]
/// makes one, after checking every instruction set they use.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ShaNi(());

impl ShaNi {
    /// `Some` when the CPU has SHA-NI, SSSE3 and SSE4.1.
    pub fn detect() -> Option<ShaNi> {
        (std::arch::is_x86_feature_detected!("sha")
            && std::arch::is_x86_feature_detected!("ssse3")
            && std::arch::is_x86_feature_detected!("sse4.1"))
        .then_some(ShaNi(()))
    }

    /// `H(left || right || be64(sum))` for `N` inputs at once.
    #[inline]
    pub fn branch_hashes<const N: usize>(self, inputs: &[(Hash, Hash, u64); N]) -> [Hash; N] {
        // SAFETY: a `ShaNi` exists only when `detect` found every target
        // feature `branch_lanes` enables.
        unsafe { branch_lanes(inputs) }
    }

    /// Lifts `climb`'s `N` nodes `nodes` up its `steps` levels (see
    /// [`Climb`]). The state stays in registers from one level to the next.
    #[inline]
    pub fn climb<const N: usize>(self, nodes: &mut [Hash; N], climb: &Climb<'_, N>) {
        // SAFETY: as in `branch_hashes`.
        unsafe { climb_lanes(nodes, climb) }
    }

    /// The same with each input's second block scheduled beforehand.
    #[inline]
    pub fn scheduled_hashes<const N: usize>(
        self,
        pairs: &[(Hash, Hash); N],
        schedules: &[&SumSchedule; N],
    ) -> [Hash; N] {
        // SAFETY: as in `branch_hashes`.
        unsafe { scheduled_lanes(pairs, schedules) }
    }
}

/// The byte shuffle that turns four big-endian words into native ones.
#[inline]
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
fn byte_swap_mask() -> __m128i {
    _mm_set_epi64x(0x0c0d_0e0f_0809_0a0b, 0x0405_0607_0001_0203)
}

/// Four message words from the 16 bytes of `bytes` at `AT`, read big-endian.
#[inline]
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
fn load_words<const AT: usize>(bytes: &[u8; 32], mask: __m128i) -> __m128i {
    const { assert!(AT + 16 <= 32) };
    // SAFETY: bytes `AT..AT + 16` lie inside the 32-byte array (checked at
    // compile time above) and `_mm_loadu_si128` has no alignment requirement.
    let raw = unsafe { _mm_loadu_si128(bytes.as_ptr().add(AT).cast::<__m128i>()) };
    _mm_shuffle_epi8(raw, mask)
}

/// The next four schedule words from the previous sixteen.
#[inline]
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
fn schedule(w0: __m128i, w1: __m128i, w2: __m128i, w3: __m128i) -> __m128i {
    let t1 = _mm_sha256msg1_epu32(w0, w1);
    let t2 = _mm_alignr_epi8(w3, w2, 4);
    _mm_sha256msg2_epu32(_mm_add_epi32(t1, t2), w3)
}

/// One 64-byte block of every lane: the 64 rounds, with each instruction
/// issued for all lanes before the next so that their latencies overlap.
/// `w` holds each lane's message words 0-15 on entry. The message ring is
/// rotated rather than indexed so that it stays in registers.
#[inline]
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
fn compress_lanes<const N: usize>(
    abef: &mut [__m128i; N],
    cdgh: &mut [__m128i; N],
    w: &mut [[__m128i; 4]; N],
) {
    let (abef0, cdgh0) = (*abef, *cdgh);
    for g in 0..4 {
        let msg: [__m128i; N] = std::array::from_fn(|l| w[l][0]);
        rounds4(abef, cdgh, &msg, g);
        for ring in w.iter_mut() {
            *ring = [ring[1], ring[2], ring[3], ring[0]];
        }
    }
    for g in 4..16 {
        let msg: [__m128i; N] =
            std::array::from_fn(|l| schedule(w[l][0], w[l][1], w[l][2], w[l][3]));
        rounds4(abef, cdgh, &msg, g);
        for (ring, next) in w.iter_mut().zip(msg) {
            *ring = [ring[1], ring[2], ring[3], next];
        }
    }
    for l in 0..N {
        abef[l] = _mm_add_epi32(abef[l], abef0[l]);
        cdgh[l] = _mm_add_epi32(cdgh[l], cdgh0[l]);
    }
}

/// Rounds `4g..4g + 4` of every lane, message words `msg`.
#[inline]
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
fn rounds4<const N: usize>(
    abef: &mut [__m128i; N],
    cdgh: &mut [__m128i; N],
    msg: &[__m128i; N],
    g: usize,
) {
    let k = _mm_set_epi32(
        K[4 * g + 3] as i32,
        K[4 * g + 2] as i32,
        K[4 * g + 1] as i32,
        K[4 * g] as i32,
    );
    let t: [__m128i; N] = std::array::from_fn(|l| _mm_add_epi32(msg[l], k));
    rounds4_added(abef, cdgh, &t);
}

/// Four rounds of every lane from message words with the constants added.
#[inline]
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
fn rounds4_added<const N: usize>(
    abef: &mut [__m128i; N],
    cdgh: &mut [__m128i; N],
    t: &[__m128i; N],
) {
    for l in 0..N {
        cdgh[l] = _mm_sha256rnds2_epu32(cdgh[l], abef[l], t[l]);
    }
    for l in 0..N {
        abef[l] = _mm_sha256rnds2_epu32(abef[l], cdgh[l], _mm_shuffle_epi32(t[l], 0x0e));
    }
}

/// The IV in the (ABEF, CDGH) register order `sha256rnds2` works on.
#[inline]
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
fn iv() -> (__m128i, __m128i) {
    (
        _mm_set_epi32(
            0x6a09e667u32 as i32,
            0xbb67ae85u32 as i32,
            0x510e527fu32 as i32,
            0x9b05688cu32 as i32,
        ),
        _mm_set_epi32(
            0x3c6ef372u32 as i32,
            0xa54ff53au32 as i32,
            0x1f83d9abu32 as i32,
            0x5be0cd19u32 as i32,
        ),
    )
}

/// Every lane's state after its first block, `left || right`.
#[inline]
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
fn first_block<const N: usize>(pairs: [(&Hash, &Hash); N]) -> ([__m128i; N], [__m128i; N]) {
    let mask = byte_swap_mask();
    let (abef_iv, cdgh_iv) = iv();
    let mut abef = [abef_iv; N];
    let mut cdgh = [cdgh_iv; N];
    let mut w: [[__m128i; 4]; N] = std::array::from_fn(|l| {
        let (left, right) = pairs[l];
        [
            load_words::<0>(&left.0, mask),
            load_words::<16>(&left.0, mask),
            load_words::<0>(&right.0, mask),
            load_words::<16>(&right.0, mask),
        ]
    });
    compress_lanes(&mut abef, &mut cdgh, &mut w);
    (abef, cdgh)
}

/// Every lane's digest from its final state.
#[inline]
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
fn digests<const N: usize>(abef: &[__m128i; N], cdgh: &[__m128i; N]) -> [Hash; N] {
    let mask = byte_swap_mask();
    let mut out = [Hash::default(); N];
    for l in 0..N {
        // Back from (ABEF, CDGH) to the words a..h, then to big-endian bytes.
        let feba = _mm_shuffle_epi32(abef[l], 0x1b);
        let dchg = _mm_shuffle_epi32(cdgh[l], 0xb1);
        let dcba = _mm_blend_epi16(feba, dchg, 0xf0);
        let hgef = _mm_alignr_epi8(dchg, feba, 8);
        let bytes = out[l].0.as_mut_ptr();
        // SAFETY: bytes 0..16 and 16..32 lie inside the 32-byte output and
        // `_mm_storeu_si128` has no alignment requirement.
        unsafe {
            _mm_storeu_si128(bytes.cast(), _mm_shuffle_epi8(dcba, mask));
            _mm_storeu_si128(bytes.add(16).cast(), _mm_shuffle_epi8(hgef, mask));
        }
    }
    out
}

/// `N` branch hashes: two compressions each from the IV, the second block
/// being the sum, the terminator and the 576-bit length.
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
fn branch_lanes<const N: usize>(inputs: &[(Hash, Hash, u64); N]) -> [Hash; N] {
    let (mut abef, mut cdgh) = first_block(std::array::from_fn(|l| (&inputs[l].0, &inputs[l].1)));
    let zero = _mm_set_epi32(0, 0, 0, 0);
    let mut w: [[__m128i; 4]; N] = std::array::from_fn(|l| {
        let sum = inputs[l].2;
        [
            _mm_set_epi32(
                0,
                0x8000_0000u32 as i32,
                sum as u32 as i32,
                (sum >> 32) as i32,
            ),
            zero,
            zero,
            _mm_set_epi32(576, 0, 0, 0),
        ]
    });
    compress_lanes(&mut abef, &mut cdgh, &mut w);
    digests(&abef, &cdgh)
}

/// `N` branch hashes whose second blocks were scheduled beforehand: the
/// second compression is rounds only, no `sha256msg1/2` (which share the
/// SHA unit with the rounds).
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
fn scheduled_lanes<const N: usize>(
    pairs: &[(Hash, Hash); N],
    schedules: &[&SumSchedule; N],
) -> [Hash; N] {
    let (mut abef, mut cdgh) = first_block(std::array::from_fn(|l| (&pairs[l].0, &pairs[l].1)));
    scheduled_block(&mut abef, &mut cdgh, schedules);
    digests(&abef, &cdgh)
}

/// Every lane's second block from its precomputed schedule: rounds only.
#[inline]
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
fn scheduled_block<const N: usize>(
    abef: &mut [__m128i; N],
    cdgh: &mut [__m128i; N],
    schedules: &[&SumSchedule; N],
) {
    let (abef0, cdgh0) = (*abef, *cdgh);
    for g in 0..16 {
        let t: [__m128i; N] = std::array::from_fn(|l| {
            let words = &schedules[l].added()[g];
            // SAFETY: `words` is a `[u32; 4]`, 16 readable bytes, and
            // `_mm_loadu_si128` has no alignment requirement.
            unsafe { _mm_loadu_si128(words.as_ptr().cast()) }
        });
        rounds4_added(abef, cdgh, &t);
    }
    for l in 0..N {
        abef[l] = _mm_add_epi32(abef[l], abef0[l]);
        cdgh[l] = _mm_add_epi32(cdgh[l], cdgh0[l]);
    }
}

/// The state words a..d and e..h of every lane, in message order: a
/// digest read big-endian, without going through bytes.
#[inline]
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
fn state_words<const N: usize>(abef: &[__m128i; N], cdgh: &[__m128i; N]) -> [[__m128i; 2]; N] {
    std::array::from_fn(|l| {
        let feba = _mm_shuffle_epi32(abef[l], 0x1b);
        let dchg = _mm_shuffle_epi32(cdgh[l], 0xb1);
        [
            _mm_blend_epi16(feba, dchg, 0xf0),
            _mm_alignr_epi8(dchg, feba, 8),
        ]
    })
}

/// See [`ShaNi::climb`].
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
fn climb_lanes<const N: usize>(nodes: &mut [Hash; N], climb: &Climb<'_, N>) {
    let mask = byte_swap_mask();
    let (abef_iv, cdgh_iv) = iv();
    let mut node: [[__m128i; 2]; N] = std::array::from_fn(|l| {
        [
            load_words::<0>(&nodes[l].0, mask),
            load_words::<16>(&nodes[l].0, mask),
        ]
    });
    let (mut abef, mut cdgh) = ([abef_iv; N], [cdgh_iv; N]);
    for step in 0..climb.steps {
        let mut w: [[__m128i; 4]; N] = std::array::from_fn(|l| {
            // The node sits at `at`; its parent's branch is at `at - 1`.
            let at = climb.from[l] - step;
            let empty = &climb.empties[at];
            let sibling = [
                load_words::<0>(&empty.0, mask),
                load_words::<16>(&empty.0, mask),
            ];
            // All ones when the node is the right child.
            let right = _mm_set1_epi8(-i8::from(climb.keys[l].bit(at - 1)));
            [
                _mm_blendv_epi8(node[l][0], sibling[0], right),
                _mm_blendv_epi8(node[l][1], sibling[1], right),
                _mm_blendv_epi8(sibling[0], node[l][0], right),
                _mm_blendv_epi8(sibling[1], node[l][1], right),
            ]
        });
        abef = [abef_iv; N];
        cdgh = [cdgh_iv; N];
        compress_lanes(&mut abef, &mut cdgh, &mut w);
        scheduled_block(&mut abef, &mut cdgh, &climb.schedules);
        node = state_words(&abef, &cdgh);
    }
    if climb.steps > 0 {
        *nodes = digests(&abef, &cdgh);
    }
}
