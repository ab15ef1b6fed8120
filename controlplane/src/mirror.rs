//! The concepts and limits both nic-config and the dataplane define, and
//! the one mapping between each pair.
//!
//! nic-config is the configuration file's schema and may not depend on the
//! dataplane; the dataplane does not depend on the configuration. A concept
//! both need is therefore defined on each side, and this crate (which sees
//! both) is the only place they meet. Which side owns what:
//!
//! | concept | nic-config | dataplane (owner of the behaviour) |
//! |---|---|---|
//! | service protocol | `Protocol` (tcp, udp: what a file may name) | `flow::Proto` (adds icmp) |
//! | listener kind | `ListenerKind` (its names in files and reports) | `snapshot::ListenerKind` |
//! | endpoint condition | `EndpointCondition` (its names) | `snapshot::EndpointCondition` |
//! | backend gone | `BackendGone` | `snapshot::BackendGonePolicy` |
//! | SYN proxy | `SynProxyPlan` (validated; its names) | `snapshot::SynProxyMode` |
//! | idle policy | `IdlePolicy` | `worker::IdlePolicy` |
//! | XDP attach mode | `XdpModeSetting` | `driver::afxdp::XdpMode` |
//! | AF_XDP zero copy | `ZeroCopySetting` | `driver::afxdp::ZeroCopy` |
//! | af_packet RX ring | `AfpacketRxRing` | `driver::afpacket::RxMode` |
//! | af_packet TX path | `AfpacketTxPath` | `driver::afpacket::TxPath` |
//! | af_packet RX path | `AfpacketRxPath` | `driver::afpacket::RxPath` |
//! | MAC address | `MacAddr` (parses and checks the file's text) | `wire::ethernet::MacAddr` (both wrap `[u8; 6]`; the specs take the bytes) |
//! | limits (batch, Maglev, table sizes) | `validate::limits`, restated | the constants named there |
//!
//! The names (Display, serde) belong to nic-config; reports that show a
//! dataplane value map it back with [`ToConfig`]. The orphan rule forbids
//! `From` between two foreign types, so the mapping is the [`ToDataplane`]
//! and [`ToConfig`] traits, implemented here once per pair with exhaustive
//! matches over one variant list (a variant added on either side does not
//! compile until it is listed). The tests below assert that every limit
//! nic-config restates equals the dataplane's.

use dataplane::driver::afpacket::{RxMode, RxPath, TxPath};
use dataplane::driver::afxdp::{MultiBuffer, XdpMode, ZeroCopy};
use dataplane::flow::Proto;
use dataplane::snapshot::{BackendGonePolicy, EndpointCondition, ListenerKind, SynProxyMode};
use dataplane::worker::IdlePolicy;

/// A nic-config value as the dataplane's type.
pub trait ToDataplane {
    type Dataplane;
    fn to_dataplane(self) -> Self::Dataplane;
}

/// A dataplane value as nic-config's type (for its name).
pub trait ToConfig {
    type Config;
    fn to_config(self) -> Self::Config;
}

/// `config => dataplane { variants }`: [`ToDataplane`]; `both config =>
/// dataplane { variants }`: also [`ToConfig`]. Both types have exactly the
/// listed variants.
macro_rules! mirror {
    ($config:ty => $dataplane:ty { $($variant:ident),+ $(,)? }) => {
        impl ToDataplane for $config {
            type Dataplane = $dataplane;
            fn to_dataplane(self) -> $dataplane {
                type To = $dataplane;
                match self {
                    $(Self::$variant => To::$variant,)+
                }
            }
        }
    };
    (both $config:ty => $dataplane:ty { $($variant:ident),+ $(,)? }) => {
        mirror!($config => $dataplane { $($variant),+ });
        impl ToConfig for $dataplane {
            type Config = $config;
            fn to_config(self) -> $config {
                type To = $config;
                match self {
                    $(Self::$variant => To::$variant,)+
                }
            }
        }
    };
}

mirror!(nic_config::Protocol => Proto { Tcp, Udp });
mirror!(both nic_config::ListenerKind => ListenerKind { Vip, ExternalIp, NodePort });
mirror!(both nic_config::EndpointCondition => EndpointCondition {
    Ready,
    ServingTerminating,
    Draining,
});
mirror!(nic_config::BackendGone => BackendGonePolicy { Drop, Reset });
mirror!(nic_config::XdpModeSetting => XdpMode { Native, Generic, Auto });
mirror!(nic_config::ZeroCopySetting => ZeroCopy { Auto, On, Off });
mirror!(nic_config::MultiBufferSetting => MultiBuffer { Auto, On, Off });
mirror!(nic_config::AfpacketRxRing => RxMode { Frames, Blocks });
mirror!(nic_config::AfpacketTxPath => TxPath { Auto, Ring, Sendmsg });
mirror!(nic_config::AfpacketRxPath => RxPath { Auto, Ring, Recvmsg });

/// By hand: `Adaptive` carries its spin budget, the plan's
/// `idle_spin_polls` (the second of the pair).
impl ToDataplane for (nic_config::IdlePolicy, u32) {
    type Dataplane = IdlePolicy;
    fn to_dataplane(self) -> IdlePolicy {
        match self {
            (nic_config::IdlePolicy::Spin, _) => IdlePolicy::Spin,
            (nic_config::IdlePolicy::Adaptive, spin_polls) => IdlePolicy::Adaptive { spin_polls },
        }
    }
}

/// By hand: `Auto` carries its threshold.
impl ToDataplane for nic_config::SynProxyPlan {
    type Dataplane = SynProxyMode;
    fn to_dataplane(self) -> SynProxyMode {
        match self {
            Self::Off => SynProxyMode::Off,
            Self::On => SynProxyMode::On,
            Self::Auto {
                half_open_threshold,
            } => SynProxyMode::Auto {
                half_open_threshold,
            },
        }
    }
}

impl ToConfig for SynProxyMode {
    type Config = nic_config::SynProxyPlan;
    fn to_config(self) -> nic_config::SynProxyPlan {
        match self {
            Self::Off => nic_config::SynProxyPlan::Off,
            Self::On => nic_config::SynProxyPlan::On,
            Self::Auto {
                half_open_threshold,
            } => nic_config::SynProxyPlan::Auto {
                half_open_threshold,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nic_config::validate::limits;

    #[test]
    fn validated_limits_equal_the_dataplanes() {
        assert_eq!(
            limits::MAX_BATCH_SIZE,
            dataplane::stage::MAX_BATCH as u64,
            "dataplane.batch_size"
        );
        assert_eq!(
            limits::MAX_MAGLEV_TABLE_SIZE,
            u64::from(dataplane::maglev::MAX_TABLE_SIZE),
            "dataplane.maglev_table_size"
        );
        assert_eq!(
            limits::MAX_BACKENDS,
            dataplane::maglev::MAX_BACKENDS,
            "backends per service"
        );
        assert_eq!(
            limits::MAX_TABLE_CAPACITY,
            u64::from(dataplane::conntrack::MAX_CAPACITY),
            "dataplane.conntrack.capacity, dataplane.affinity.capacity"
        );
        assert_eq!(
            limits::MAX_SYN_PROXY_FLOWS,
            u64::from(dataplane::conntrack::MAX_SYN_PROXY_FLOWS),
            "dataplane.conntrack.syn_proxy_flows"
        );
        assert_eq!(
            limits::DEFAULT_SYN_PROXY_SHARE,
            u64::from(dataplane::conntrack::DEFAULT_SYN_PROXY_SHARE),
            "dataplane.conntrack.syn_proxy_flows's default"
        );
        assert_eq!(
            limits::XDP_HEADROOM_BYTES,
            u64::from(dataplane::driver::afxdp::XDP_HEADROOM),
            "AF_XDP headroom (dataplane.afxdp.multi_buffer, port mtu)"
        );
        assert_eq!(
            limits::XDP_L2_OVERHEAD_BYTES,
            u64::from(dataplane::driver::afxdp::L2_OVERHEAD),
            "AF_XDP frame overhead over the MTU"
        );
    }

    #[test]
    fn file_defaults_equal_the_dataplanes() {
        let plan = nic_config::parse(
            r#"
            [[port]]
            name = "lan"
            driver = "afpacket"
            interface = "eth0"
            role = "both"
            node_addresses = ["192.0.2.1/24"]
            snat_addresses = ["192.0.2.2/24"]
        "#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let d = &plan.dataplane;
        assert_eq!(d.batch_size, dataplane::stage::MAX_BATCH);
        assert_eq!(d.maglev_table_size, dataplane::maglev::DEFAULT_TABLE_SIZE);
        assert_eq!(
            d.conntrack.expiry_scan_per_poll,
            dataplane::conntrack::DEFAULT_EXPIRY_SCAN_PER_POLL
        );
        assert_eq!(
            d.conntrack.early_drop_scan,
            dataplane::conntrack::DEFAULT_EARLY_DROP_SCAN
        );
        assert_eq!(
            d.conntrack.syn_proxy_flows,
            dataplane::conntrack::default_syn_proxy_flows(d.conntrack.capacity)
        );
        for capacity in [1, 7, 8, 9, 1 << 20, 1 << 30] {
            assert_eq!(
                nic_config::default_syn_proxy_flows(u64::from(capacity)),
                u64::from(dataplane::conntrack::default_syn_proxy_flows(capacity)),
                "capacity {capacity}"
            );
        }
        assert_eq!(d.snat.quarantine_ms, dataplane::snat::DEFAULT_QUARANTINE_MS);
        assert_eq!(d.snat.port_range, dataplane::snat::DEFAULT_PORT_RANGE);
        assert_eq!(
            (d.idle, d.idle_spin_polls).to_dataplane(),
            IdlePolicy::default()
        );
    }

    #[test]
    fn round_trips_keep_the_value() {
        for kind in [
            nic_config::ListenerKind::Vip,
            nic_config::ListenerKind::ExternalIp,
            nic_config::ListenerKind::NodePort,
        ] {
            assert_eq!(kind.to_dataplane().to_config(), kind);
        }
        for condition in [
            nic_config::EndpointCondition::Ready,
            nic_config::EndpointCondition::ServingTerminating,
            nic_config::EndpointCondition::Draining,
        ] {
            assert_eq!(condition.to_dataplane().to_config(), condition);
        }
        assert_eq!(nic_config::Protocol::Udp.to_dataplane(), Proto::Udp);
        assert_eq!(
            (nic_config::IdlePolicy::Adaptive, 7).to_dataplane(),
            IdlePolicy::Adaptive { spin_polls: 7 }
        );
        assert_eq!(
            (nic_config::IdlePolicy::Spin, 7).to_dataplane(),
            IdlePolicy::Spin
        );
        assert_eq!(
            nic_config::BackendGone::Reset.to_dataplane(),
            BackendGonePolicy::Reset
        );
        for mode in [
            nic_config::SynProxyPlan::Off,
            nic_config::SynProxyPlan::On,
            nic_config::SynProxyPlan::Auto {
                half_open_threshold: 77,
            },
        ] {
            assert_eq!(mode.to_dataplane().to_config(), mode);
        }
    }
}
