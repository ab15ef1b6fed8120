//! The `virtio_net_hdr` a packet socket with `PACKET_VNET_HDR` puts before
//! every frame (VIRTIO 1.2 §5.1.6 "Device Operation", `struct
//! virtio_net_hdr` without `num_buffers`; Linux `include/uapi/linux/
//! virtio_net.h`), and what it says about one frame as [`Offload`]: the
//! GSO/GRO super-packet and partial-checksum metadata the pipeline carries
//! with the frame.
//!
//! Layout (10 bytes, little-endian on every host Portico runs on, as the
//! kernel's packet socket uses `vio_le()`):
//!
//! | off | field | meaning |
//! |---|---|---|
//! | 0 | `flags` | `NEEDS_CSUM` (1): the L4 checksum field at `csum_start + csum_offset` holds the pseudo-header sum only, whoever sends the frame finishes it over `csum_start..end`; `DATA_VALID` (2): checksums already verified |
//! | 1 | `gso_type` | `NONE` 0, `TCPV4` 1, `UDP` 3 (UFO, unsupported), `TCPV6` 4, `UDP_L4` 5, ORed with `ECN` 0x80 |
//! | 2 | `hdr_len` | bytes of headers (a hint) |
//! | 4 | `gso_size` | payload bytes per segment |
//! | 6 | `csum_start` | where the checksummed range starts, from the Ethernet header |
//! | 8 | `csum_offset` | where the checksum field is, from `csum_start` (16 TCP, 6 UDP) |
//!
//! A super-packet (`gso_type != NONE`) always has `NEEDS_CSUM`: its one L4
//! checksum field is a seed from which each segment's checksum is computed
//! when it is cut (by the kernel's GSO, the NIC's TSO, or [`super::gso`]).

/// Bytes of the header (`struct virtio_net_hdr`).
pub const HEADER_LEN: usize = 10;

/// `flags` bits.
pub mod flags {
    pub const NEEDS_CSUM: u8 = 1;
    pub const DATA_VALID: u8 = 2;
}

/// `gso_type` values.
pub mod gso_type {
    pub const NONE: u8 = 0;
    pub const TCPV4: u8 = 1;
    pub const UDP: u8 = 3;
    pub const TCPV6: u8 = 4;
    pub const UDP_L4: u8 = 5;
    pub const ECN: u8 = 0x80;
}

/// What kind of super-packet a frame is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Gso {
    /// An ordinary frame.
    #[default]
    None,
    /// TCP over IPv4, cut into `gso_size`-byte segments.
    TcpV4,
    /// TCP over IPv6.
    TcpV6,
    /// UDP (`UDP_SEGMENT`), cut into `gso_size`-byte datagrams.
    UdpL4,
}

/// A frame's offload metadata: super-packet and partial checksum. Offsets
/// are from the start of the frame (the Ethernet header).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offload {
    pub gso: Gso,
    /// The TCP segments had CE marked (`gso_type` ECN bit).
    pub ecn: bool,
    /// Payload bytes per segment (0 when `gso` is `None`).
    pub gso_size: u16,
    /// The L4 checksum field holds the pseudo-header seed only.
    pub needs_csum: bool,
    pub csum_start: u16,
    pub csum_offset: u16,
}

/// Why a `virtio_net_hdr` cannot be taken as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VnetError {
    #[error("gso_type {0:#x} is not TCPv4, TCPv6 or UDP_L4")]
    UnsupportedGso(u8),
    #[error("a super-packet without NEEDS_CSUM or with gso_size 0")]
    BadSuperPacket,
}

impl Offload {
    /// No offload: a complete frame with complete checksums.
    pub const NONE: Offload = Offload {
        gso: Gso::None,
        ecn: false,
        gso_size: 0,
        needs_csum: false,
        csum_start: 0,
        csum_offset: 0,
    };

    /// Whether the frame is a super-packet.
    #[inline(always)]
    pub fn is_gso(&self) -> bool {
        self.gso != Gso::None
    }

    /// Whether the frame needs anything done before it can go on a wire
    /// that knows no offloads.
    #[inline(always)]
    pub fn is_none(&self) -> bool {
        !self.is_gso() && !self.needs_csum
    }

    /// Decode a received header, with `shift` bytes added to `csum_start`
    /// (an 802.1Q tag put back in front of it). `Ok` with
    /// `DATA_VALID` reported separately by [`data_valid`].
    pub fn decode(h: &[u8; HEADER_LEN], shift: u16) -> Result<Offload, VnetError> {
        let le = |i: usize| u16::from_le_bytes([h[i], h[i + 1]]);
        let ty = h[1];
        let gso = match ty & !gso_type::ECN {
            gso_type::NONE => Gso::None,
            gso_type::TCPV4 => Gso::TcpV4,
            gso_type::TCPV6 => Gso::TcpV6,
            gso_type::UDP_L4 => Gso::UdpL4,
            other => return Err(VnetError::UnsupportedGso(other)),
        };
        let needs_csum = h[0] & flags::NEEDS_CSUM != 0;
        let gso_size = le(4);
        if gso != Gso::None && (!needs_csum || gso_size == 0) {
            return Err(VnetError::BadSuperPacket);
        }
        Ok(Offload {
            gso,
            ecn: gso != Gso::None && ty & gso_type::ECN != 0,
            gso_size: if gso == Gso::None { 0 } else { gso_size },
            needs_csum,
            csum_start: if needs_csum {
                le(6).saturating_add(shift)
            } else {
                0
            },
            csum_offset: if needs_csum { le(8) } else { 0 },
        })
    }

    /// Encode for transmission; `hdr_len` is the bytes of headers up to the
    /// end of the L4 header (the kernel's hint of what to keep linear).
    pub fn encode(&self, hdr_len: u16) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        if self.needs_csum {
            h[0] = flags::NEEDS_CSUM;
        }
        h[1] = match self.gso {
            Gso::None => gso_type::NONE,
            Gso::TcpV4 => gso_type::TCPV4,
            Gso::TcpV6 => gso_type::TCPV6,
            Gso::UdpL4 => gso_type::UDP_L4,
        } | if self.ecn && self.is_gso() {
            gso_type::ECN
        } else {
            0
        };
        h[2..4].copy_from_slice(&hdr_len.to_le_bytes());
        h[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        if self.needs_csum {
            h[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
            h[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
        }
        h
    }
}

/// Whether a received header says the checksums were verified
/// (`DATA_VALID`).
#[inline]
pub fn data_valid(h: &[u8; HEADER_LEN]) -> bool {
    h[0] & flags::DATA_VALID != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tcpv4_super_packet_round_trips() {
        let o = Offload {
            gso: Gso::TcpV4,
            ecn: true,
            gso_size: 1448,
            needs_csum: true,
            csum_start: 34,
            csum_offset: 16,
        };
        let h = o.encode(66);
        assert_eq!(h, [1, 0x81, 66, 0, 0xa8, 0x05, 34, 0, 16, 0]);
        assert_eq!(Offload::decode(&h, 0), Ok(o));
        let shifted = Offload::decode(&h, 4).unwrap();
        assert_eq!(shifted.csum_start, 38);
    }

    #[test]
    fn bad_headers_are_refused_by_reason() {
        let mut h = Offload::NONE.encode(0);
        assert_eq!(Offload::decode(&h, 0), Ok(Offload::NONE));
        h[1] = gso_type::UDP;
        assert_eq!(
            Offload::decode(&h, 0),
            Err(VnetError::UnsupportedGso(gso_type::UDP))
        );
        h[1] = gso_type::TCPV4;
        h[4] = 100;
        assert_eq!(Offload::decode(&h, 0), Err(VnetError::BadSuperPacket));
        h[0] = flags::NEEDS_CSUM | flags::DATA_VALID;
        h[4] = 0;
        assert_eq!(Offload::decode(&h, 0), Err(VnetError::BadSuperPacket));
        assert!(data_valid(&h));
    }
}
