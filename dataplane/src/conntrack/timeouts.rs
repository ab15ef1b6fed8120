//! Per-state idle timeouts.
//!
//! Every packet that advances (or validly retransmits within) a flow moves its
//! deadline to `now + timeout(new state)`. The defaults are Linux's
//! `nf_conntrack_*_timeout*` sysctls with kube-proxy's overrides
//! (`--conntrack-tcp-timeout-established` 24h,
//! `--conntrack-tcp-timeout-close-wait` 1h), so a Portico gateway forgets
//! flows at the same moments a kube-proxy node would.

use super::{FlowState, TcpState};

/// Idle timeouts in milliseconds, per state. All must be non-zero.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Timeouts {
    pub tcp_syn_sent_ms: u64,
    pub tcp_syn_recv_ms: u64,
    pub tcp_established_ms: u64,
    pub tcp_fin_wait_ms: u64,
    pub tcp_close_wait_ms: u64,
    pub tcp_last_ack_ms: u64,
    pub tcp_time_wait_ms: u64,
    pub tcp_close_ms: u64,
    /// UDP flow that has not seen a reply yet.
    pub udp_ms: u64,
    /// UDP flow once a reply was seen (Linux's `udp_timeout_stream`).
    pub udp_stream_ms: u64,
    pub icmp_ms: u64,
}

const SECOND_MS: u64 = 1_000;

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            tcp_syn_sent_ms: 120 * SECOND_MS,
            tcp_syn_recv_ms: 60 * SECOND_MS,
            tcp_established_ms: 24 * 3_600 * SECOND_MS,
            tcp_fin_wait_ms: 120 * SECOND_MS,
            tcp_close_wait_ms: 3_600 * SECOND_MS,
            tcp_last_ack_ms: 30 * SECOND_MS,
            tcp_time_wait_ms: 120 * SECOND_MS,
            tcp_close_ms: 10 * SECOND_MS,
            udp_ms: 30 * SECOND_MS,
            udp_stream_ms: 120 * SECOND_MS,
            icmp_ms: 30 * SECOND_MS,
        }
    }
}

impl Timeouts {
    /// Timeout of a flow in `state`; `replied` selects the UDP stream
    /// timeout.
    #[inline]
    pub fn for_state(&self, state: FlowState, replied: bool) -> u64 {
        match state {
            FlowState::Tcp(tcp) => self.for_tcp(tcp),
            FlowState::Udp if replied => self.udp_stream_ms,
            FlowState::Udp => self.udp_ms,
            FlowState::Icmp => self.icmp_ms,
        }
    }

    /// Timeout of a TCP flow in `state`.
    #[inline]
    pub fn for_tcp(&self, state: TcpState) -> u64 {
        match state {
            TcpState::SynSent => self.tcp_syn_sent_ms,
            TcpState::SynRecv => self.tcp_syn_recv_ms,
            TcpState::Established => self.tcp_established_ms,
            TcpState::FinWait => self.tcp_fin_wait_ms,
            TcpState::CloseWait => self.tcp_close_wait_ms,
            TcpState::LastAck => self.tcp_last_ack_ms,
            TcpState::TimeWait => self.tcp_time_wait_ms,
            TcpState::Close => self.tcp_close_ms,
        }
    }

    /// Every timeout with its field name (for validation and display).
    pub fn named(&self) -> [(&'static str, u64); 11] {
        [
            ("tcp_syn_sent_ms", self.tcp_syn_sent_ms),
            ("tcp_syn_recv_ms", self.tcp_syn_recv_ms),
            ("tcp_established_ms", self.tcp_established_ms),
            ("tcp_fin_wait_ms", self.tcp_fin_wait_ms),
            ("tcp_close_wait_ms", self.tcp_close_wait_ms),
            ("tcp_last_ack_ms", self.tcp_last_ack_ms),
            ("tcp_time_wait_ms", self.tcp_time_wait_ms),
            ("tcp_close_ms", self.tcp_close_ms),
            ("udp_ms", self.udp_ms),
            ("udp_stream_ms", self.udp_stream_ms),
            ("icmp_ms", self.icmp_ms),
        ]
    }

    /// Name of the first timeout that is zero, if any (a zero timeout would
    /// expire a flow on the packet that created it).
    pub fn first_zero(&self) -> Option<&'static str> {
        self.named()
            .into_iter()
            .find(|&(_, ms)| ms == 0)
            .map(|(name, _)| name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_kube_proxys() {
        let t = Timeouts::default();
        assert_eq!(t.tcp_established_ms, 86_400_000);
        assert_eq!(t.tcp_close_wait_ms, 3_600_000);
        assert_eq!(t.for_tcp(TcpState::SynSent), 120_000);
        assert_eq!(t.for_tcp(TcpState::SynRecv), 60_000);
        assert_eq!(t.for_tcp(TcpState::FinWait), 120_000);
        assert_eq!(t.for_tcp(TcpState::LastAck), 30_000);
        assert_eq!(t.for_tcp(TcpState::TimeWait), 120_000);
        assert_eq!(t.for_tcp(TcpState::Close), 10_000);
        assert_eq!(t.for_state(FlowState::Udp, false), 30_000);
        assert_eq!(t.for_state(FlowState::Udp, true), 120_000);
        assert_eq!(t.for_state(FlowState::Icmp, true), 30_000);
        assert_eq!(t.first_zero(), None);
    }

    #[test]
    fn every_state_maps_to_its_own_field() {
        // Give each field a distinct value and check each state reads its own.
        let t = Timeouts {
            tcp_syn_sent_ms: 1,
            tcp_syn_recv_ms: 2,
            tcp_established_ms: 3,
            tcp_fin_wait_ms: 4,
            tcp_close_wait_ms: 5,
            tcp_last_ack_ms: 6,
            tcp_time_wait_ms: 7,
            tcp_close_ms: 8,
            ..Timeouts::default()
        };
        for (i, s) in TcpState::ALL.iter().enumerate() {
            assert_eq!(t.for_tcp(*s), i as u64 + 1);
        }
    }

    #[test]
    fn first_zero_names_the_field() {
        let t = Timeouts {
            udp_stream_ms: 0,
            ..Timeouts::default()
        };
        assert_eq!(t.first_zero(), Some("udp_stream_ms"));
    }
}
