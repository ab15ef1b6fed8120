//! Writes to the API server: `status.loadBalancer.ingress` of Services
//! (merge patch on the status subresource) and Kubernetes Events
//! (events.k8s.io/v1, through kube-runtime's [`Recorder`], which folds
//! repeats into a series).
//!
//! Invariant: nothing is written unless [`Leadership::may_write`] holds right
//! before the request; a follower (or a holder whose renew deadline passed)
//! only logs.

use super::lease::Leadership;
use super::stats::KubeSourceStats;
use crate::ipam::ServiceKey;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use std::net::IpAddr;
use std::sync::Arc;
use tracing::{debug, info, warn};

/// `reportingController` of Portico's Events.
pub const EVENT_CONTROLLER: &str = "portico.dev/load-balancer";

/// Why a write failed.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("service {service}: patching status.loadBalancer: {source}")]
    Patch {
        service: ServiceKey,
        source: kube::Error,
    },
    #[error("service {service}: sending event {reason}: {source}")]
    Event {
        service: ServiceKey,
        reason: String,
        source: kube::Error,
    },
}

/// What a write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    Written,
    /// Not the leader: nothing sent.
    NotLeader,
}

/// The merge patch that sets (or, with no addresses, clears) the ingress
/// list.
pub fn ingress_patch(addresses: &[IpAddr]) -> serde_json::Value {
    if addresses.is_empty() {
        serde_json::json!({ "status": { "loadBalancer": { "ingress": null } } })
    } else {
        let ingress: Vec<serde_json::Value> = addresses
            .iter()
            .map(|a| serde_json::json!({ "ip": a.to_string() }))
            .collect();
        serde_json::json!({ "status": { "loadBalancer": { "ingress": ingress } } })
    }
}

/// The addresses (either family) of a Service's
/// `status.loadBalancer.ingress`, in order; hostnames and unparsable
/// entries are skipped.
pub fn ingress_addresses(svc: &Service) -> Vec<IpAddr> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|i| i.ip.as_deref()?.parse().ok())
        .collect()
}

/// Sends status patches and Events when this instance leads.
#[derive(Clone)]
pub struct StatusWriter {
    client: Client,
    recorder: Recorder,
    leadership: Leadership,
    stats: Arc<KubeSourceStats>,
}

impl std::fmt::Debug for StatusWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusWriter")
            .field("leadership", &self.leadership)
            .finish_non_exhaustive()
    }
}

impl StatusWriter {
    pub fn new(
        client: Client,
        identity: &str,
        leadership: Leadership,
        stats: Arc<KubeSourceStats>,
    ) -> Self {
        let reporter = Reporter {
            controller: EVENT_CONTROLLER.to_owned(),
            instance: Some(identity.to_owned()),
        };
        StatusWriter {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            leadership,
            stats,
        }
    }

    pub fn leadership(&self) -> &Leadership {
        &self.leadership
    }

    /// Set (or clear, with no addresses) the Service's ingress addresses.
    pub async fn write_ingress(
        &self,
        service: &ServiceKey,
        addresses: &[IpAddr],
    ) -> Result<WriteOutcome, StatusError> {
        if !self.leadership.may_write() {
            debug!(%service, ?addresses, "not the leader: status left to the leader");
            return Ok(WriteOutcome::NotLeader);
        }
        let api: Api<Service> = Api::namespaced(self.client.clone(), &service.namespace);
        let patch = ingress_patch(addresses);
        let result = api
            .patch_status(
                &service.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await;
        self.stats.status_written(result.is_ok());
        match result {
            Ok(_) => {
                info!(%service, ?addresses, "status.loadBalancer.ingress written");
                Ok(WriteOutcome::Written)
            }
            Err(source) => Err(StatusError::Patch {
                service: service.clone(),
                source,
            }),
        }
    }

    /// Report a problem (or a notable action) on the Service as an Event.
    /// Logged in every instance; sent by the leader only.
    pub async fn event(
        &self,
        svc: &Service,
        warning: bool,
        reason: &str,
        note: &str,
    ) -> Result<WriteOutcome, StatusError> {
        let service = ServiceKey::of(svc);
        if warning {
            warn!(%service, reason, note, "service problem");
        } else {
            info!(%service, reason, note, "service event");
        }
        if !self.leadership.may_write() {
            return Ok(WriteOutcome::NotLeader);
        }
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_owned(),
            note: Some(note.chars().take(1000).collect()),
            action: if warning {
                "Allocate".to_owned()
            } else {
                "Announce".to_owned()
            },
            secondary: None,
        };
        let reference = svc.object_ref(&());
        match self.recorder.publish(&event, &reference).await {
            Ok(()) => {
                self.stats.event_sent();
                Ok(WriteOutcome::Written)
            }
            Err(source) => Err(StatusError::Event {
                service,
                reason: reason.to_owned(),
                source,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, ServiceStatus};

    #[test]
    fn the_patch_sets_or_clears_the_ingress_list() {
        let set = ingress_patch(&["192.0.2.10".parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))]);
        assert_eq!(
            set.to_string(),
            r#"{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.10"}]}}}"#
        );
        let dual: Vec<IpAddr> = ["192.0.2.10", "2001:db8::10"]
            .iter()
            .filter_map(|a| a.parse().ok())
            .collect();
        assert_eq!(
            ingress_patch(&dual).to_string(),
            r#"{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.10"},{"ip":"2001:db8::10"}]}}}"#
        );
        assert_eq!(
            ingress_patch(&[]).to_string(),
            r#"{"status":{"loadBalancer":{"ingress":null}}}"#
        );
    }

    #[test]
    fn ingress_addresses_skip_hostnames_and_garbage() {
        let entry = |ip: Option<&str>, host: Option<&str>| LoadBalancerIngress {
            ip: ip.map(str::to_owned),
            hostname: host.map(str::to_owned),
            ..LoadBalancerIngress::default()
        };
        let svc = Service {
            status: Some(ServiceStatus {
                load_balancer: Some(LoadBalancerStatus {
                    ingress: Some(vec![
                        entry(Some("192.0.2.10"), None),
                        entry(None, Some("lb.example")),
                        entry(Some("not-an-ip"), None),
                        entry(Some("192.0.2.11"), None),
                        entry(Some("2001:db8::10"), None),
                    ]),
                }),
                ..ServiceStatus::default()
            }),
            ..Service::default()
        };
        let want: Vec<IpAddr> = ["192.0.2.10", "192.0.2.11", "2001:db8::10"]
            .iter()
            .filter_map(|a| a.parse().ok())
            .collect();
        assert_eq!(ingress_addresses(&svc), want);
        assert!(ingress_addresses(&Service::default()).is_empty());
    }
}
