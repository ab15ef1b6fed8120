//! What the watches have told so far: Services by namespace/name and
//! EndpointSlices joined to their Service by the `kubernetes.io/service-name`
//! label (a slice without the label belongs to no Service).
//!
//! Every change reports the Services it touched, so that the caller rebuilds
//! only those. A complete list ([`Update::Listed`]) replaces a kind's store
//! and touches exactly the objects that were added, removed or changed
//! (by resourceVersion): after a relist nothing is lost and nothing that
//! stayed the same is rebuilt.

use super::watch::Update;
use crate::build::LABEL_SERVICE_NAME;
use crate::ipam::ServiceKey;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// An EndpointSlice's identity: (namespace, name).
pub type SliceKey = (String, String);

fn slice_key(slice: &EndpointSlice) -> SliceKey {
    (
        slice
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned()),
        slice.metadata.name.clone().unwrap_or_default(),
    )
}

/// The Service an EndpointSlice belongs to, by its label.
pub fn slice_service(slice: &EndpointSlice) -> Option<ServiceKey> {
    let name = slice.metadata.labels.as_ref()?.get(LABEL_SERVICE_NAME)?;
    Some(ServiceKey::new(
        slice.metadata.namespace.as_deref().unwrap_or("default"),
        name.as_str(),
    ))
}

fn same_version<K: kube::Resource>(a: &K, b: &K) -> bool {
    let (va, vb) = (&a.meta().resource_version, &b.meta().resource_version);
    va.is_some() && va == vb
}

/// Services and EndpointSlices as last seen.
#[derive(Debug, Default)]
pub struct ClusterState {
    services: BTreeMap<ServiceKey, Arc<Service>>,
    slices: HashMap<SliceKey, Arc<EndpointSlice>>,
    /// Service → names of its slices.
    slices_by_service: HashMap<ServiceKey, BTreeSet<SliceKey>>,
    services_listed: bool,
    slices_listed: bool,
}

impl ClusterState {
    /// Both kinds have been listed completely at least once.
    pub fn synced(&self) -> bool {
        self.services_listed && self.slices_listed
    }

    pub fn service(&self, key: &ServiceKey) -> Option<&Arc<Service>> {
        self.services.get(key)
    }

    pub fn services(&self) -> impl Iterator<Item = (&ServiceKey, &Arc<Service>)> {
        self.services.iter()
    }

    /// The slices labelled with `service`, in name order.
    pub fn slices_of(&self, service: &ServiceKey) -> Vec<&EndpointSlice> {
        self.slices_by_service
            .get(service)
            .into_iter()
            .flatten()
            .filter_map(|k| self.slices.get(k).map(Arc::as_ref))
            .collect()
    }

    /// Apply a Service update; returns the Services it touched.
    pub fn apply_services(&mut self, update: Update<Service>) -> BTreeSet<ServiceKey> {
        let mut touched = BTreeSet::new();
        match update {
            Update::Applied(svc) => {
                let key = ServiceKey::of(&svc);
                let changed = self
                    .services
                    .get(&key)
                    .is_none_or(|old| !same_version(old.as_ref(), &svc));
                if changed {
                    self.services.insert(key.clone(), Arc::new(svc));
                    touched.insert(key);
                }
            }
            Update::Deleted(svc) => {
                let key = ServiceKey::of(&svc);
                if self.services.remove(&key).is_some() {
                    touched.insert(key);
                }
            }
            Update::Listed(list) => {
                let mut new = BTreeMap::new();
                for svc in list {
                    new.insert(ServiceKey::of(&svc), Arc::new(svc));
                }
                for (key, old) in &self.services {
                    if new
                        .get(key)
                        .is_none_or(|n| !same_version(old.as_ref(), n.as_ref()))
                    {
                        touched.insert(key.clone());
                    }
                }
                for key in new.keys() {
                    if !self.services.contains_key(key) {
                        touched.insert(key.clone());
                    }
                }
                self.services = new;
                self.services_listed = true;
            }
            Update::Failed(_) | Update::Resumed => {}
        }
        touched
    }

    /// Apply an EndpointSlice update; returns the Services it touched.
    pub fn apply_slices(&mut self, update: Update<EndpointSlice>) -> BTreeSet<ServiceKey> {
        let mut touched = BTreeSet::new();
        match update {
            Update::Applied(slice) => {
                let key = slice_key(&slice);
                if self
                    .slices
                    .get(&key)
                    .is_none_or(|old| !same_version(old.as_ref(), &slice))
                {
                    self.insert_slice(key, slice, &mut touched);
                }
            }
            Update::Deleted(slice) => {
                let key = slice_key(&slice);
                self.remove_slice(&key, &mut touched);
            }
            Update::Listed(list) => {
                let mut new: HashMap<SliceKey, EndpointSlice> =
                    list.into_iter().map(|s| (slice_key(&s), s)).collect();
                let gone: Vec<SliceKey> = self
                    .slices
                    .keys()
                    .filter(|k| !new.contains_key(*k))
                    .cloned()
                    .collect();
                for key in gone {
                    self.remove_slice(&key, &mut touched);
                }
                for (key, slice) in new.drain() {
                    if self
                        .slices
                        .get(&key)
                        .is_none_or(|old| !same_version(old.as_ref(), &slice))
                    {
                        self.insert_slice(key, slice, &mut touched);
                    }
                }
                self.slices_listed = true;
            }
            Update::Failed(_) | Update::Resumed => {}
        }
        touched
    }

    fn insert_slice(
        &mut self,
        key: SliceKey,
        slice: EndpointSlice,
        touched: &mut BTreeSet<ServiceKey>,
    ) {
        // The label may have changed: the old Service loses the slice.
        self.remove_slice(&key, touched);
        if let Some(service) = slice_service(&slice) {
            self.slices_by_service
                .entry(service.clone())
                .or_default()
                .insert(key.clone());
            touched.insert(service);
        }
        self.slices.insert(key, Arc::new(slice));
    }

    fn remove_slice(&mut self, key: &SliceKey, touched: &mut BTreeSet<ServiceKey>) {
        let Some(old) = self.slices.remove(key) else {
            return;
        };
        if let Some(service) = slice_service(&old) {
            if let Some(set) = self.slices_by_service.get_mut(&service) {
                set.remove(key);
                if set.is_empty() {
                    self.slices_by_service.remove(&service);
                }
            }
            touched.insert(service);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn svc(ns: &str, name: &str, rv: &str) -> Service {
        Service {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                ..ObjectMeta::default()
            },
            ..Service::default()
        }
    }

    fn slice(ns: &str, name: &str, service: Option<&str>, rv: &str) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                labels: service.map(|s| [(LABEL_SERVICE_NAME.to_owned(), s.to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..EndpointSlice::default()
        }
    }

    fn keys(names: &[(&str, &str)]) -> BTreeSet<ServiceKey> {
        names.iter().map(|(n, s)| ServiceKey::new(*n, *s)).collect()
    }

    #[test]
    fn slices_join_their_service_by_label_and_follow_relabels() {
        let mut state = ClusterState::default();
        let t = state.apply_slices(Update::Applied(slice("a", "web-1", Some("web"), "1")));
        assert_eq!(t, keys(&[("a", "web")]));
        state.apply_slices(Update::Applied(slice("a", "web-2", Some("web"), "2")));
        state.apply_slices(Update::Applied(slice("b", "web-1", Some("web"), "3")));
        state.apply_slices(Update::Applied(slice("a", "orphan", None, "4")));
        let names = |state: &ClusterState, ns: &str| -> Vec<String> {
            state
                .slices_of(&ServiceKey::new(ns, "web"))
                .iter()
                .filter_map(|s| s.metadata.name.clone())
                .collect()
        };
        assert_eq!(names(&state, "a"), ["web-1", "web-2"]);
        assert_eq!(names(&state, "b"), ["web-1"]);
        // Relabelled: both the old and the new Service are touched.
        let t = state.apply_slices(Update::Applied(slice("a", "web-2", Some("api"), "5")));
        assert_eq!(t, keys(&[("a", "web"), ("a", "api")]));
        assert_eq!(names(&state, "a"), ["web-1"]);
        // The same version again touches nothing.
        let t = state.apply_slices(Update::Applied(slice("a", "web-2", Some("api"), "5")));
        assert!(t.is_empty());
        let t = state.apply_slices(Update::Deleted(slice("a", "web-1", Some("web"), "6")));
        assert_eq!(t, keys(&[("a", "web")]));
        assert!(names(&state, "a").is_empty());
    }

    #[test]
    fn a_relist_touches_only_what_changed_and_keeps_the_rest() {
        let mut state = ClusterState::default();
        assert!(!state.synced());
        let t = state.apply_services(Update::Listed(vec![
            svc("a", "same", "1"),
            svc("a", "changed", "2"),
            svc("a", "gone", "3"),
        ]));
        assert_eq!(t, keys(&[("a", "same"), ("a", "changed"), ("a", "gone")]));
        state.apply_slices(Update::Listed(vec![
            slice("a", "same-1", Some("same"), "10"),
            slice("a", "gone-1", Some("gone"), "11"),
        ]));
        assert!(state.synced());
        // A failed watch changes nothing.
        assert!(
            state
                .apply_services(Update::Failed("gone".into()))
                .is_empty()
        );
        assert!(state.service(&ServiceKey::new("a", "gone")).is_some());

        let t = state.apply_services(Update::Listed(vec![
            svc("a", "same", "1"),
            svc("a", "changed", "7"),
            svc("a", "new", "8"),
        ]));
        assert_eq!(t, keys(&[("a", "changed"), ("a", "gone"), ("a", "new")]));
        let t = state.apply_slices(Update::Listed(vec![
            slice("a", "same-1", Some("same"), "10"),
            slice("a", "new-1", Some("new"), "12"),
        ]));
        assert_eq!(t, keys(&[("a", "gone"), ("a", "new")]));
        assert_eq!(state.slices_of(&ServiceKey::new("a", "same")).len(), 1);
        assert!(state.slices_of(&ServiceKey::new("a", "gone")).is_empty());
        let names: Vec<String> = state.services().map(|(k, _)| k.to_string()).collect();
        assert_eq!(names, ["a/changed", "a/new", "a/same"]);
    }
}
