//! Big-endian field access that never panics: out-of-range reads give 0 and
//! out-of-range writes are skipped. Callers check lengths up front; these
//! helpers only make a forgotten check harmless instead of a crash.

use std::net::{Ipv4Addr, Ipv6Addr};

#[inline(always)]
pub(crate) fn u8_at(buf: &[u8], off: usize) -> u8 {
    match buf.get(off) {
        Some(&b) => b,
        None => 0,
    }
}

#[inline(always)]
pub(crate) fn u16_at(buf: &[u8], off: usize) -> u16 {
    match buf.get(off..off.wrapping_add(2)) {
        Some(&[a, b]) => u16::from_be_bytes([a, b]),
        _ => 0,
    }
}

#[inline(always)]
pub(crate) fn u32_at(buf: &[u8], off: usize) -> u32 {
    match buf.get(off..off.wrapping_add(4)) {
        Some(&[a, b, c, d]) => u32::from_be_bytes([a, b, c, d]),
        _ => 0,
    }
}

#[inline(always)]
pub(crate) fn ipv4_at(buf: &[u8], off: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32_at(buf, off))
}

#[inline(always)]
pub(crate) fn ipv6_at(buf: &[u8], off: usize) -> Ipv6Addr {
    Ipv6Addr::from(array_at::<16>(buf, off))
}

#[inline(always)]
pub(crate) fn array_at<const N: usize>(buf: &[u8], off: usize) -> [u8; N] {
    match buf.get(off..off.wrapping_add(N)) {
        Some(s) => {
            let mut out = [0u8; N];
            out.copy_from_slice(s);
            out
        }
        None => [0u8; N],
    }
}

#[inline(always)]
pub(crate) fn set_u8(buf: &mut [u8], off: usize, v: u8) {
    if let Some(b) = buf.get_mut(off) {
        *b = v;
    }
}

#[inline(always)]
pub(crate) fn set_bytes(buf: &mut [u8], off: usize, v: &[u8]) {
    if let Some(dst) = buf.get_mut(off..off.wrapping_add(v.len())) {
        dst.copy_from_slice(v);
    }
}

#[inline(always)]
pub(crate) fn set_u16(buf: &mut [u8], off: usize, v: u16) {
    set_bytes(buf, off, &v.to_be_bytes());
}

#[inline(always)]
pub(crate) fn set_u32(buf: &mut [u8], off: usize, v: u32) {
    set_bytes(buf, off, &v.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_reads_are_zero_and_writes_are_skipped() {
        let mut b = [1u8, 2, 3];
        assert_eq!(u16_at(&b, 1), 0x0203);
        assert_eq!(u16_at(&b, 2), 0);
        assert_eq!(u32_at(&b, 0), 0);
        assert_eq!(u16_at(&b, usize::MAX), 0);
        assert_eq!(array_at::<2>(&b, 2), [0, 0]);
        set_u16(&mut b, 2, 0xffff);
        set_u32(&mut b, usize::MAX - 1, 0xffff_ffff);
        assert_eq!(b, [1, 2, 3]);
        set_u16(&mut b, 0, 0xaabb);
        assert_eq!(b, [0xaa, 0xbb, 3]);
    }
}
