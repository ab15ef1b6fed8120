//! The last specs of every Service, so that a rebuild touches only the
//! Services whose specs changed.
//!
//! Specs from [`service_specs`](super::service_specs) are canonical (sorted
//! listeners and endpoints, stable names), so plain equality tells whether
//! anything changed.

use crate::ipam::ServiceKey;
use dataplane::snapshot::ServiceSpec;
use std::collections::BTreeMap;

/// Whether a Service's specs differ (in any field, order included).
pub fn specs_changed(previous: &[ServiceSpec], new: &[ServiceSpec]) -> bool {
    previous != new
}

/// What [`SpecCache::set`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecChange {
    /// The Service had no specs before.
    Added,
    /// Its specs differ from the previous ones.
    Changed,
    /// Same specs as before: nothing to rebuild.
    Unchanged,
    /// It had specs and now has none.
    Removed,
}

/// Specs by Service, in key order.
#[derive(Clone, Debug, Default)]
pub struct SpecCache {
    by_service: BTreeMap<ServiceKey, Vec<ServiceSpec>>,
}

impl SpecCache {
    pub fn new() -> Self {
        SpecCache::default()
    }

    /// Record a Service's specs (an empty list removes it).
    pub fn set(&mut self, key: &ServiceKey, specs: Vec<ServiceSpec>) -> SpecChange {
        if specs.is_empty() {
            return if self.remove(key) {
                SpecChange::Removed
            } else {
                SpecChange::Unchanged
            };
        }
        match self.by_service.get_mut(key) {
            Some(old) if !specs_changed(old, &specs) => SpecChange::Unchanged,
            Some(old) => {
                *old = specs;
                SpecChange::Changed
            }
            None => {
                self.by_service.insert(key.clone(), specs);
                SpecChange::Added
            }
        }
    }

    /// Forget a Service; whether it had specs.
    pub fn remove(&mut self, key: &ServiceKey) -> bool {
        self.by_service.remove(key).is_some()
    }

    /// The specs of a Service.
    pub fn get(&self, key: &ServiceKey) -> Option<&[ServiceSpec]> {
        self.by_service.get(key).map(Vec::as_slice)
    }

    /// The Service a spec (by its name) belongs to.
    pub fn owner(&self, spec_name: &str) -> Option<&ServiceKey> {
        self.by_service
            .iter()
            .find(|(_, specs)| specs.iter().any(|s| s.name == spec_name))
            .map(|(key, _)| key)
    }

    /// Every spec, Service by Service in key order.
    pub fn specs(&self) -> impl Iterator<Item = &ServiceSpec> + '_ {
        self.by_service.values().flatten()
    }

    /// Services with specs.
    pub fn len(&self) -> usize {
        self.by_service.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_service.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::flow::Proto;
    use std::net::{Ipv4Addr, SocketAddrV4};

    fn spec(name: &str, backend: u8) -> ServiceSpec {
        ServiceSpec::new(name, Proto::Tcp, Ipv4Addr::new(192, 0, 2, 1), 80)
            .endpoint(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, backend), 8080))
    }

    #[test]
    fn set_reports_what_changed() {
        let mut c = SpecCache::new();
        let a = ServiceKey::new("ns", "a");
        let b = ServiceKey::new("ns", "b");
        assert_eq!(c.set(&b, vec![spec("ns/b:80/tcp", 1)]), SpecChange::Added);
        assert_eq!(c.set(&a, vec![spec("ns/a:80/tcp", 1)]), SpecChange::Added);
        assert_eq!(
            c.set(&a, vec![spec("ns/a:80/tcp", 1)]),
            SpecChange::Unchanged
        );
        assert_eq!(c.set(&a, vec![spec("ns/a:80/tcp", 2)]), SpecChange::Changed);
        assert_eq!(
            c.get(&a).map(|s| s[0].endpoints[0].addr.ip()),
            Some(std::net::Ipv4Addr::new(10, 0, 0, 2).into())
        );
        // Key order, whatever the insertion order.
        let names: Vec<&str> = c.specs().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["ns/a:80/tcp", "ns/b:80/tcp"]);
        assert_eq!(c.set(&a, Vec::new()), SpecChange::Removed);
        assert_eq!(c.set(&a, Vec::new()), SpecChange::Unchanged);
        assert_eq!(c.len(), 1);
        assert!(c.remove(&b) && c.is_empty());
    }

    #[test]
    fn any_field_counts_as_a_change() {
        let base = vec![spec("x", 1)];
        assert!(!specs_changed(&base, &base.clone()));
        let mut snat = base.clone();
        snat[0].snat = false;
        let mut affinity = base.clone();
        affinity[0].affinity_timeout_ms = Some(1000);
        let mut cond = base.clone();
        cond[0].endpoints[0].condition = dataplane::snapshot::EndpointCondition::Draining;
        for other in [snat, affinity, cond, Vec::new()] {
            assert!(specs_changed(&base, &other));
        }
    }
}
