//! Membership of the tier and the per-VIP L2 election (issue 13 §3).
//!
//! Every instance holds its own `coordination.k8s.io/v1` Lease,
//! `<lease_name>-member.<identity>` in the election's namespace, labelled
//! [`LABEL_MEMBER_OF`]` = <lease_name>` (the tier), renewed every
//! `retry_period`. Each round it also lists the tier's Leases: a member is
//! *live* while its Lease record keeps changing, judged on this instance's
//! own clock as client-go's leader election does (a record first seen, or
//! changed, counts from the moment it was seen; one unchanged for its
//! `leaseDurationSeconds` has expired), so no two hosts' clocks are ever
//! compared. A clean stop releases the Lease (clears its holder): the
//! member is gone at the others' next list.
//!
//! The owner of each VIP is the rendezvous hash of the VIP over the live
//! members ([`elect`]): instances that see the same members agree without
//! talking. The view goes to the snapshot builder as an
//! [`AnnounceFilter`]; the dataplane answers ARP and sends gratuitous ARP
//! only for the VIPs this instance owns, and keeps forwarding the others.
//!
//! Invariants:
//! * this instance counts itself live only until `renew_deadline` after the
//!   start of its last successful renewal; after that (API server
//!   unreachable, a partition) it announces no VIP at all — unless it was
//!   the only live member: then nobody could take its VIPs over, and it
//!   keeps announcing them (a single instance rides out an API server
//!   outage on its last tables, as it does for forwarding). Others drop it
//!   only `lease_duration` after its record stopped changing, and
//!   `renew_deadline < lease_duration` (validated), so two instances never
//!   both announce a VIP because of a silent member — the VIP is briefly
//!   unannounced instead (forwarding goes on; upstream caches keep the
//!   last MAC until they expire);
//! * until the first round completed the view is not `known` and no VIP is
//!   announced; a member that (re)joins claims its VIPs only
//!   [`JOIN_ROUNDS`] retry periods after its first renewal, when the others
//!   have listed it and fallen silent for them (no two announcers while a
//!   member joins, at worst a silence of one retry period);
//! * the cost of a view change is one filter call per owned VIP in the
//!   builder; nothing on the packet path changes.
//!
//! Failover after an instance dies without a clean stop therefore takes
//! `lease_duration` (plus up to one `retry_period` until the next list) on
//! the survivors; a clean stop takes at most one `retry_period`.

pub mod elect;

use dataplane::snapshot::AnnounceFilter;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tracing::{info, warn};

/// Retry periods a (re)joining member waits after its first renewal before
/// it announces VIPs: the others list the tier once per retry period, so by
/// then they count it and are silent for the VIPs it wins.
pub const JOIN_ROUNDS: u32 = 2;

/// Label of a member Lease: the tier (the election's `lease_name`).
pub const LABEL_MEMBER_OF: &str = "portico.dev/member-of";

/// Settings of the membership (from `[kubernetes]`, shared with the
/// leader election).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberConfig {
    pub namespace: String,
    /// The tier: the leader election's Lease name.
    pub tier: String,
    /// This instance's name (the `--instance` name, else the election's
    /// identity).
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl MemberConfig {
    /// Name of this instance's Lease: `<tier>-member.<identity>`, made a
    /// valid object name (a DNS subdomain: each label lower case, other
    /// characters than `[a-z0-9-]` turned into `-`, at most 63 bytes, not
    /// starting or ending with `-`; at most 253 bytes in all).
    pub fn lease_name(&self) -> String {
        let raw = format!("{}-member.{}", self.tier, self.identity).to_lowercase();
        let mut name = String::new();
        for label in raw.split('.') {
            let clean: String = label
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                .take(63)
                .collect();
            let clean = clean.trim_matches('-');
            if clean.is_empty() || name.len() + 1 + clean.len() > 253 {
                continue;
            }
            if !name.is_empty() {
                name.push('.');
            }
            name.push_str(clean);
        }
        name
    }
}

/// Why one round failed.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    #[error("member lease {namespace}/{name}: {source}")]
    Api {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("member lease {namespace}/{name}: no answer within {timeout_ms} ms")]
    Timeout {
        namespace: String,
        name: String,
        timeout_ms: u64,
    },
}

/// What this instance knows of the tier.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberView {
    /// This instance's name.
    pub me: String,
    /// Whether a round has completed (before: nothing is announced).
    pub known: bool,
    /// This instance may announce: it renewed its Lease less than
    /// `renew_deadline` ago and has been a member for [`JOIN_ROUNDS`] retry
    /// periods (or it is the only member and cannot renew).
    pub me_live: bool,
    /// The live members, sorted (this instance among them once it renewed,
    /// so the owners it computes are those the others compute).
    pub live: Vec<String>,
}

impl MemberView {
    /// Whether this instance announces `vip`.
    pub fn announces(&self, vip: impl Into<IpAddr>) -> bool {
        self.known
            && self.me_live
            && elect::owner(self.live.iter().map(String::as_str), vip) == Some(self.me.as_str())
    }

    /// The owner of `vip` in this view.
    pub fn owner(&self, vip: impl Into<IpAddr>) -> Option<&str> {
        elect::owner(self.live.iter().map(String::as_str), vip)
    }

    /// The builder's filter for this view.
    pub fn filter(&self) -> AnnounceFilter {
        if !self.known || !self.me_live {
            return AnnounceFilter::none();
        }
        let view = Arc::new(self.clone());
        AnnounceFilter::only_ip(move |vip| view.announces(vip))
    }
}

/// The membership loop of one instance.
#[derive(Debug)]
pub struct Membership {
    api: Api<Lease>,
    config: MemberConfig,
    lease_name: String,
    /// Per member Lease: its holder, the record last seen, when (on this
    /// clock) it last changed, and its duration.
    observed: HashMap<String, (LeaseSpec, Instant)>,
    /// This instance counts itself live until then.
    live_until: Option<Instant>,
    /// Since when this instance has renewed without a lapse (it claims
    /// VIPs only [`JOIN_ROUNDS`] retry periods later).
    member_since: Option<Instant>,
    view: watch::Sender<MemberView>,
}

impl Membership {
    pub fn new(client: Client, config: MemberConfig) -> (Self, watch::Receiver<MemberView>) {
        let (tx, rx) = watch::channel(MemberView {
            me: config.identity.clone(),
            ..MemberView::default()
        });
        let members = Membership {
            api: Api::namespaced(client, &config.namespace),
            lease_name: config.lease_name(),
            config,
            observed: HashMap::new(),
            live_until: None,
            member_since: None,
            view: tx,
        };
        (members, rx)
    }

    /// Run until `stop` turns true (or its sender is dropped), then delete
    /// this instance's Lease so the others take its VIPs at once.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        info!(tier = %self.config.tier, lease = %self.lease_name,
            identity = %self.config.identity, "tier membership started");
        loop {
            if *stop.borrow() {
                break;
            }
            self.round().await;
            tokio::select! {
                _ = tokio::time::sleep(self.config.retry_period) => {}
                changed = stop.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
            }
        }
        self.leave().await;
    }

    fn timeout_error(&self, timeout: Duration) -> MemberError {
        MemberError::Timeout {
            namespace: self.config.namespace.clone(),
            name: self.lease_name.clone(),
            timeout_ms: timeout.as_millis() as u64,
        }
    }

    fn api_error(&self, source: kube::Error) -> MemberError {
        MemberError::Api {
            namespace: self.config.namespace.clone(),
            name: self.lease_name.clone(),
            source,
        }
    }

    /// Renew this instance's Lease, list the tier's, publish the view.
    async fn round(&mut self) {
        let started = Instant::now();
        let timeout = self.config.retry_period.max(Duration::from_millis(500));
        let renewed = match tokio::time::timeout(timeout, self.renew()).await {
            Ok(r) => r,
            Err(_) => Err(self.timeout_error(timeout)),
        };
        match renewed {
            Ok(()) => self.live_until = Some(started + self.config.renew_deadline),
            Err(e) => warn!(error = %e, "renewing this instance's member lease failed"),
        }
        let listed = match tokio::time::timeout(timeout, self.list()).await {
            Ok(r) => r,
            Err(_) => Err(self.timeout_error(timeout)),
        };
        match listed {
            Ok(leases) => {
                self.observe(leases);
                self.publish(true);
            }
            Err(e) => {
                warn!(error = %e, "listing the tier's member leases failed");
                // Observations age out on their own; this instance's own
                // liveness is judged from its renewals.
                let known = self.view.borrow().known;
                self.publish(known);
            }
        }
    }

    async fn renew(&self) -> Result<(), MemberError> {
        let now = MicroTime(Timestamp::now());
        let duration_s =
            i32::try_from(self.config.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
        let spec = LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(duration_s),
            renew_time: Some(now),
            ..LeaseSpec::default()
        };
        let existing = self
            .api
            .get_opt(&self.lease_name)
            .await
            .map_err(|e| self.api_error(e))?;
        let result = match existing {
            Some(mut lease) => {
                lease.spec = Some(LeaseSpec {
                    acquire_time: lease.spec.as_ref().and_then(|s| s.acquire_time.clone()),
                    ..spec
                });
                self.api
                    .replace(&self.lease_name, &PostParams::default(), &lease)
                    .await
            }
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.lease_name.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        labels: Some(BTreeMap::from([(
                            LABEL_MEMBER_OF.to_owned(),
                            self.config.tier.clone(),
                        )])),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        acquire_time: spec.renew_time.clone(),
                        ..spec
                    }),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
        };
        result.map(|_| ()).map_err(|e| self.api_error(e))
    }

    async fn list(&self) -> Result<Vec<Lease>, MemberError> {
        let params =
            ListParams::default().labels(&format!("{LABEL_MEMBER_OF}={}", self.config.tier));
        let list = self
            .api
            .list(&params)
            .await
            .map_err(|e| self.api_error(e))?;
        Ok(list.items)
    }

    /// Remember every listed record, restarting a member's expiry clock
    /// when its record changed; forget Leases no longer listed.
    fn observe(&mut self, leases: Vec<Lease>) {
        let now = Instant::now();
        let mut seen = HashMap::with_capacity(leases.len());
        for lease in leases {
            let Some(name) = lease.metadata.name else {
                continue;
            };
            if name == self.lease_name {
                continue; // this instance's liveness is its own renewals
            }
            let record = lease.spec.unwrap_or_default();
            let at = match self.observed.remove(&name) {
                Some((old, at)) if old == record => at,
                _ => now,
            };
            seen.insert(name, (record, at));
        }
        self.observed = seen;
    }

    /// The view as of now; sent when it changed.
    fn publish(&mut self, known: bool) {
        let now = Instant::now();
        let renewed = self.live_until.is_some_and(|t| now < t);
        // Alone in the last view, nobody could take the VIPs over: an
        // instance that cannot reach the API server keeps announcing them
        // (the single-instance case: the last tables stay in force).
        let alone = {
            let last = self.view.borrow();
            last.me_live && last.live.len() == 1
        };
        if !renewed {
            self.member_since = None;
        } else if self.member_since.is_none() {
            self.member_since = Some(now);
        }
        // A member that (re)joins is counted by everyone at once, but claims
        // its VIPs only once the others have had time to see it and fall
        // silent for them: never two announcers while a member joins.
        let settled = self.member_since.is_some_and(|t| {
            now.saturating_duration_since(t) >= self.config.retry_period * JOIN_ROUNDS
        });
        let me_live = (renewed && settled) || (alone && known && self.live_until.is_some());
        let mut live: Vec<String> = self
            .observed
            .values()
            .filter_map(|(record, at)| {
                let holder = record
                    .holder_identity
                    .as_deref()
                    .filter(|h| !h.is_empty())?;
                let duration = record
                    .lease_duration_seconds
                    .and_then(|s| u64::try_from(s).ok())
                    .map_or(self.config.lease_duration, Duration::from_secs);
                (now.saturating_duration_since(*at) < duration).then(|| holder.to_owned())
            })
            .filter(|h| *h != self.config.identity)
            .collect();
        if renewed || me_live {
            live.push(self.config.identity.clone());
        }
        live.sort();
        live.dedup();
        let view = MemberView {
            me: self.config.identity.clone(),
            known,
            me_live,
            live,
        };
        self.view.send_if_modified(|old| {
            if *old == view {
                return false;
            }
            info!(members = ?view.live, me_live = view.me_live, known = view.known,
                "tier membership changed");
            *old = view;
            true
        });
    }

    /// A clean stop: announce nothing, then release the Lease (clear its
    /// holder: the others drop this member at their next list; no delete
    /// permission needed, and the object is reused at the next start).
    async fn leave(&mut self) {
        self.live_until = None;
        self.publish(false);
        let timeout = self.config.retry_period.max(Duration::from_millis(500));
        match tokio::time::timeout(timeout, self.release()).await {
            Ok(Ok(())) => info!(lease = %self.lease_name, "member lease released"),
            Ok(Err(e)) => warn!(error = %e, "releasing the member lease failed"),
            Err(_) => warn!(lease = %self.lease_name, "releasing the member lease timed out"),
        }
    }

    async fn release(&self) -> Result<(), MemberError> {
        let Some(mut lease) = self
            .api
            .get_opt(&self.lease_name)
            .await
            .map_err(|e| self.api_error(e))?
        else {
            return Ok(());
        };
        lease.spec = Some(LeaseSpec {
            holder_identity: None,
            renew_time: Some(MicroTime(Timestamp::now())),
            ..lease.spec.unwrap_or_default()
        });
        self.api
            .replace(&self.lease_name, &PostParams::default(), &lease)
            .await
            .map(|_| ())
            .map_err(|e| self.api_error(e))
    }
}

impl From<&MemberView> for crate::admin::MembersReport {
    fn from(view: &MemberView) -> Self {
        crate::admin::MembersReport {
            me: view.me.clone(),
            known: view.known,
            me_live: view.me_live,
            live: view.live.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn view(me: &str, known: bool, me_live: bool, live: &[&str]) -> MemberView {
        MemberView {
            me: me.into(),
            known,
            me_live,
            live: live.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn every_member_announces_exactly_the_vips_it_owns() {
        let members = ["gw-a", "gw-b", "gw-c"];
        let views: Vec<MemberView> = members
            .iter()
            .map(|m| view(m, true, true, &members))
            .collect();
        let base6 = u128::from("2001:db8:5::".parse::<std::net::Ipv6Addr>().expect("ip"));
        let vips = (0..600u32)
            .map(|i| IpAddr::from(Ipv4Addr::from(0xc000_0200 + i)))
            .chain((0..600u128).map(|i| IpAddr::from(std::net::Ipv6Addr::from(base6 + i))));
        for vip in vips {
            let announcers: Vec<&str> = views
                .iter()
                .filter(|v| v.filter().covers_ip(vip))
                .map(|v| v.me.as_str())
                .collect();
            assert_eq!(announcers.len(), 1, "{vip}: {announcers:?}");
            assert_eq!(Some(announcers[0]), views[0].owner(vip));
        }
    }

    #[test]
    fn an_instance_unsure_of_its_membership_announces_nothing() {
        let vip = Ipv4Addr::new(192, 0, 2, 20);
        for v in [
            view("gw-a", false, true, &["gw-a"]),
            view("gw-a", true, false, &["gw-b"]),
        ] {
            assert!(!v.announces(vip), "{v:?}");
            assert!(!v.filter().covers(vip), "{v:?}");
        }
        assert!(view("gw-a", true, true, &["gw-a"]).filter().covers(vip));
    }

    #[test]
    fn member_lease_names_are_valid_object_names() {
        let config = |identity: &str| MemberConfig {
            namespace: "portico-system".into(),
            tier: "portico".into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        };
        assert_eq!(config("gw-a").lease_name(), "portico-member.gw-a");
        assert_eq!(
            config("Node_7.Example").lease_name(),
            "portico-member.node-7.example"
        );
        let long = format!("{}.{}", "n".repeat(70), "m.".repeat(150));
        let name = config(&long).lease_name();
        assert!(name.len() <= 253 && nic_config::validate::is_dns_subdomain(&name));
    }
}
