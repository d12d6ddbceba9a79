//! The secp256k1 membership test of a compressed public key (what btcec's
//! `ParsePubKey` checks for 33 bytes): prefix 2 or 3, x below the field
//! prime, and x³ + 7 a square modulo the prime (its candidate square root squares
//! back to it).
//!
//! Field elements are four little-endian 64-bit limbs. Every index below is
//! bounded by a constant loop range, and every wide product and sum is of
//! values small enough for `u128` (bounds stated where it matters), so
//! nothing here can panic or overflow.
#![allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]

use crate::error::KeyError;

type Fe = [u64; 4];

/// The field prime 2^256 − 2^32 − 977.
const P: Fe = [0xFFFF_FFFE_FFFF_FC2F, u64::MAX, u64::MAX, u64::MAX];
/// 2^256 mod p.
const C: u128 = 0x1_0000_03D1;
#[cfg(test)]
const ONE: Fe = [1, 0, 0, 0];

fn from_be(bytes: &[u8; 32]) -> Fe {
    let mut out = [0u64; 4];
    for (limb, chunk) in out.iter_mut().rev().zip(bytes.chunks_exact(8)) {
        *limb = u64::from_be_bytes(<[u8; 8]>::try_from(chunk).unwrap_or([0; 8]));
    }
    out
}

fn geq(a: &Fe, b: &Fe) -> bool {
    for i in (0..4).rev() {
        if a[i] != b[i] {
            return a[i] > b[i];
        }
    }
    true
}

fn sub(a: &Fe, b: &Fe) -> Fe {
    let mut out = [0u64; 4];
    let mut borrow = false;
    for i in 0..4 {
        let (d1, b1) = a[i].overflowing_sub(b[i]);
        let (d2, b2) = d1.overflowing_sub(u64::from(borrow));
        out[i] = d2;
        borrow = b1 || b2;
    }
    out
}

/// Reduces a value below 2^256 to below p.
fn normalize(mut a: Fe) -> Fe {
    while geq(&a, &P) {
        a = sub(&a, &P);
    }
    a
}

/// Adds `c` (below 2^70) to `a`, folding a carry out of 2^256 back in as C.
fn add_folding(a: &Fe, c: u128) -> Fe {
    let mut out = *a;
    let mut carry = c;
    for limb in out.iter_mut() {
        let v = u128::from(*limb) + carry;
        *limb = v as u64;
        carry = v >> 64;
    }
    if carry != 0 {
        // out + 2^256 ≡ out + C, and out is now below 2^70: no carry again.
        let mut carry = C;
        for limb in out.iter_mut() {
            let v = u128::from(*limb) + carry;
            *limb = v as u64;
            carry = v >> 64;
        }
    }
    normalize(out)
}

fn mul(a: &Fe, b: &Fe) -> Fe {
    let mut t = [0u64; 8];
    for i in 0..4 {
        let mut carry: u128 = 0;
        for j in 0..4 {
            // (2^64 − 1)² + 2·(2^64 − 1) = 2^128 − 1: fits.
            let v = u128::from(a[i]) * u128::from(b[j]) + u128::from(t[i + j]) + carry;
            t[i + j] = v as u64;
            carry = v >> 64;
        }
        t[i + 4] = carry as u64;
    }
    // t = lo + hi·2^256 ≡ lo + hi·C (mod p).
    let mut lo = [0u64; 4];
    let mut carry: u128 = 0;
    for i in 0..4 {
        // hi limb · C < 2^97, plus a limb and a carry below 2^35: fits.
        let v = u128::from(t[i]) + u128::from(t[i + 4]) * C + carry;
        lo[i] = v as u64;
        carry = v >> 64;
    }
    // carry < 2^35, so carry · C < 2^69.
    add_folding(&lo, carry * C)
}

/// `a^(2^n)`.
fn square_n(a: &Fe, n: usize) -> Fe {
    let mut r = *a;
    for _ in 0..n {
        r = mul(&r, &r);
    }
    r
}

/// `a^((p + 1) / 4)`, a square root of `a` when `a` is a square (p ≡ 3
/// mod 4), by libsecp256k1's addition chain: 253 squarings, 13 products.
fn sqrt_candidate(a: &Fe) -> Fe {
    let x2 = mul(&square_n(a, 1), a);
    let x3 = mul(&square_n(&x2, 1), a);
    let x6 = mul(&square_n(&x3, 3), &x3);
    let x9 = mul(&square_n(&x6, 3), &x3);
    let x11 = mul(&square_n(&x9, 2), &x2);
    let x22 = mul(&square_n(&x11, 11), &x11);
    let x44 = mul(&square_n(&x22, 22), &x22);
    let x88 = mul(&square_n(&x44, 44), &x44);
    let x176 = mul(&square_n(&x88, 88), &x88);
    let x220 = mul(&square_n(&x176, 44), &x44);
    let x223 = mul(&square_n(&x220, 3), &x3);
    let t = mul(&square_n(&x223, 23), &x22);
    let t = mul(&square_n(&t, 6), &x2);
    square_n(&t, 2)
}

/// Whether 33 bytes are a compressed secp256k1 point.
pub(crate) fn check_compressed(key: &[u8; 33]) -> Result<(), KeyError> {
    let [prefix, x @ ..] = *key;
    if prefix != 2 && prefix != 3 {
        return Err(KeyError::BadPrefix { prefix });
    }
    let x = from_be(&x);
    if geq(&x, &P) {
        return Err(KeyError::XOutOfRange);
    }
    let y2 = add_folding(&mul(&mul(&x, &x), &x), 7);
    let y = sqrt_candidate(&y2);
    if mul(&y, &y) == y2 {
        Ok(())
    } else {
        Err(KeyError::NotOnCurve)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(hex: &str) -> [u8; 33] {
        let mut out = [0u8; 33];
        hex::decode_to_slice(hex, &mut out).unwrap_or_else(|e| panic!("{hex}: {e}"));
        out
    }

    #[test]
    fn known_points_are_on_the_curve() {
        for x in [
            // G, 2G, 3G.
            "79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798",
            "c6047f9441ed7d6d3045406e95c07cd85c778e4b8cef3ca7abac09b95c709ee5",
            "f9308a019258c31049344f85f89d5229b531c845836f99b08601f113bce036f9",
            // tapd's NUMS key.
            "7c79b9b26e463895eef5679d8558942c86c4ad2233adef01bc3e6d540b3653fe",
        ] {
            for prefix in ["02", "03"] {
                assert_eq!(
                    check_compressed(&key(&format!("{prefix}{x}"))),
                    Ok(()),
                    "{x}"
                );
            }
        }
    }

    #[test]
    fn off_curve_and_out_of_range_are_refused() {
        // BIP-340 test vector 5: "public key not on the curve".
        let x = "eefdea4cdb677750a420fee807eacf21eb9898ae79b9768766e4faa04a2d4a34";
        assert_eq!(
            check_compressed(&key(&format!("02{x}"))),
            Err(KeyError::NotOnCurve)
        );
        // BIP-340 test vector 14: x exceeds the field size.
        let x = "fffffffffffffffffffffffffffffffffffffffffffffffffffffffefffffc30";
        assert_eq!(
            check_compressed(&key(&format!("03{x}"))),
            Err(KeyError::XOutOfRange)
        );
        let g = "79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798";
        assert_eq!(
            check_compressed(&key(&format!("04{g}"))),
            Err(KeyError::BadPrefix { prefix: 4 })
        );
    }

    #[test]
    fn about_half_of_all_x_are_on_the_curve() {
        // A deterministic walk over x; Euler's criterion holds for close to
        // half of them. A broken field multiplication gives 0 or all.
        let mut x = [0u8; 33];
        x[0] = 2;
        let mut valid = 0;
        for i in 0u32..200 {
            x[1..5].copy_from_slice(&i.wrapping_mul(2_654_435_761).to_be_bytes());
            x[32] = i as u8;
            if check_compressed(&x).is_ok() {
                valid += 1;
            }
        }
        assert!((60..=140).contains(&valid), "{valid} of 200");
    }

    fn pow(a: &Fe, e: &Fe) -> Fe {
        let mut r = ONE;
        for limb in e.iter().rev() {
            for bit in (0..64).rev() {
                r = mul(&r, &r);
                if (limb >> bit) & 1 == 1 {
                    r = mul(&r, a);
                }
            }
        }
        r
    }

    #[test]
    fn the_square_root_chain_agrees_with_eulers_criterion() {
        // Euler's criterion by plain square-and-multiply with (p − 1) / 2,
        // against the chain, on a walk through the field.
        let pm1 = sub(&P, &ONE);
        let mut half = [0u64; 4];
        for i in 0..4 {
            let high = if i < 3 { pm1[i + 1] << 63 } else { 0 };
            half[i] = (pm1[i] >> 1) | high;
        }
        let mut a: Fe = [0x0123_4567_89ab_cdef, 7, 0, 1 << 40];
        let mut squares = 0;
        for _ in 0..64 {
            let y = sqrt_candidate(&a);
            let is_square = pow(&a, &half) == ONE;
            assert_eq!(mul(&y, &y) == a, is_square, "{a:x?}");
            squares += usize::from(is_square);
            a = add_folding(&mul(&a, &a), 3);
        }
        assert!((10..=54).contains(&squares), "{squares} of 64");
    }

    #[test]
    fn field_arithmetic_wraps_correctly() {
        // (p − 1)² ≡ 1 and (p − 1) + 7 ≡ 6.
        let pm1 = sub(&P, &ONE);
        assert_eq!(mul(&pm1, &pm1), ONE);
        assert_eq!(add_folding(&pm1, 7), [6, 0, 0, 0]);
        // 2^255 · 2 = 2^256 ≡ C.
        let top = [0, 0, 0, 1 << 63];
        assert_eq!(mul(&top, &[2, 0, 0, 0]), [C as u64, 0, 0, 0]);
    }
}
