//! The manifests in images/k8s/ are applied (server-side apply, in the
//! kustomization's order) to the real test API server, and the
//! ServiceAccount may do exactly what Portico needs: SubjectAccessReviews for
//! every verb it uses and for a set it must not have, plus real calls with
//! the ServiceAccount's own token.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::Scope;
use portico_tests::kube_cluster::{KubeCluster, KubeClusterOptions};
use std::path::{Path, PathBuf};
use std::time::Duration;

const NAMESPACE: &str = "portico-system";
const SERVICE_ACCOUNT: &str = "portico";

/// A request Portico makes or must not make: (verb, API group, resource,
/// subresource, namespace; `None` = cluster-wide).
type Access = (
    &'static str,
    &'static str,
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
);

fn manifests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../images/k8s")
}

/// The documents of every file the kustomization lists, in its order.
fn manifests() -> Vec<serde_json::Value> {
    let dir = manifests_dir();
    let kustomization: serde_json::Value = serde_saphyr::from_str(
        &std::fs::read_to_string(dir.join("kustomization.yaml")).expect("kustomization.yaml"),
    )
    .expect("kustomization.yaml parses");
    let files = kustomization["resources"]
        .as_array()
        .expect("kustomization lists resources");
    let mut documents = Vec::new();
    for file in files {
        let file = file.as_str().expect("resource is a file name");
        let text =
            std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        documents.extend(docs.into_iter().filter(|d| !d.is_null()));
    }
    documents
}

async fn apply_all(client: &kube::Client) -> Vec<String> {
    let mut applied = Vec::new();
    for doc in manifests() {
        let (group, version) = match doc["apiVersion"].as_str().expect("apiVersion") {
            api_version if api_version.contains('/') => {
                let (g, v) = api_version.split_once('/').expect("group/version");
                (g.to_string(), v.to_string())
            }
            v => (String::new(), v.to_string()),
        };
        let kind = doc["kind"].as_str().expect("kind").to_string();
        let name = doc["metadata"]["name"].as_str().expect("name").to_string();
        let gvk = GroupVersionKind::gvk(&group, &version, &kind);
        let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk)
            .await
            .unwrap_or_else(|e| panic!("{kind} is served: {e}"));
        let api: Api<DynamicObject> = match capabilities.scope {
            Scope::Namespaced => {
                let ns = doc["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{kind} {name} names its namespace"));
                Api::namespaced_with(client.clone(), ns, &resource)
            }
            Scope::Cluster => Api::all_with(client.clone(), &resource),
        };
        let object: DynamicObject = serde_json::from_value(doc).expect("object");
        api.patch(
            &name,
            &PatchParams::apply("portico-tests").force(),
            &Patch::Apply(&object),
        )
        .await
        .unwrap_or_else(|e| panic!("apply {kind} {name}: {e}"));
        applied.push(format!("{kind}/{name}"));
    }
    applied
}

/// Whether the ServiceAccount may `verb` on `group`/`resource`(/`subresource`)
/// in `namespace` (`None`: cluster-wide), asked as the API server's
/// authorizer sees the ServiceAccount's requests.
async fn allowed(
    client: &kube::Client,
    verb: &str,
    group: &str,
    resource: &str,
    subresource: Option<&str>,
    namespace: Option<&str>,
) -> bool {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!(
                "system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
            )),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{NAMESPACE}"),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                subresource: subresource.map(Into::into),
                namespace: namespace.map(Into::into),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("SubjectAccessReview");
    answer.status.expect("review status").allowed
}

#[tokio::test]
async fn manifests_apply_and_grant_exactly_what_portico_needs() {
    let test = "k8s_manifests::manifests_apply_and_grant_exactly_what_portico_needs";
    let Some(cluster) = KubeCluster::start_or_skip(test, KubeClusterOptions::default()).await
    else {
        return;
    };
    let client = cluster.client();
    let applied = tokio::time::timeout(Duration::from_secs(120), apply_all(&client))
        .await
        .expect("applying the manifests is bounded");
    for expected in [
        "Namespace/portico-system",
        "ServiceAccount/portico",
        "ClusterRole/portico",
        "ClusterRoleBinding/portico",
        "Role/portico-leader-election",
        "RoleBinding/portico-leader-election",
        "ConfigMap/portico-config",
        "Deployment/portico",
    ] {
        assert!(
            applied.iter().any(|a| a == expected),
            "{expected} in {applied:?}"
        );
    }

    // What Portico does: (verb, group, resource, subresource, namespace).
    let granted: &[Access] = &[
        ("get", "", "services", None, None),
        ("list", "", "services", None, None),
        ("watch", "", "services", None, None),
        ("get", "", "services", None, Some("shop")),
        ("update", "", "services", Some("status"), Some("shop")),
        ("patch", "", "services", Some("status"), Some("shop")),
        ("get", "discovery.k8s.io", "endpointslices", None, None),
        ("list", "discovery.k8s.io", "endpointslices", None, None),
        ("watch", "discovery.k8s.io", "endpointslices", None, None),
        ("create", "", "events", None, Some("shop")),
        ("patch", "", "events", None, Some("shop")),
        ("create", "events.k8s.io", "events", None, Some("shop")),
        ("patch", "events.k8s.io", "events", None, Some("shop")),
        (
            "get",
            "coordination.k8s.io",
            "leases",
            None,
            Some(NAMESPACE),
        ),
        (
            "create",
            "coordination.k8s.io",
            "leases",
            None,
            Some(NAMESPACE),
        ),
        (
            "update",
            "coordination.k8s.io",
            "leases",
            None,
            Some(NAMESPACE),
        ),
        // The tier's member Leases (the per-VIP ARP election).
        (
            "list",
            "coordination.k8s.io",
            "leases",
            None,
            Some(NAMESPACE),
        ),
    ];
    // What it must not do.
    let denied: &[Access] = &[
        ("delete", "", "services", None, Some("shop")),
        ("create", "", "services", None, Some("shop")),
        ("update", "", "services", None, Some("shop")),
        ("patch", "", "services", None, Some("shop")),
        (
            "create",
            "discovery.k8s.io",
            "endpointslices",
            None,
            Some("shop"),
        ),
        (
            "delete",
            "discovery.k8s.io",
            "endpointslices",
            None,
            Some("shop"),
        ),
        ("delete", "", "events", None, Some("shop")),
        (
            "delete",
            "coordination.k8s.io",
            "leases",
            None,
            Some(NAMESPACE),
        ),
        (
            "update",
            "coordination.k8s.io",
            "leases",
            None,
            Some("kube-system"),
        ),
        (
            "list",
            "coordination.k8s.io",
            "leases",
            None,
            Some("kube-system"),
        ),
        (
            "create",
            "coordination.k8s.io",
            "leases",
            None,
            Some("kube-system"),
        ),
        ("get", "", "secrets", None, Some(NAMESPACE)),
        ("list", "", "pods", None, None),
        ("list", "", "nodes", None, None),
        ("update", "", "configmaps", None, Some(NAMESPACE)),
    ];
    let mut wrong = Vec::new();
    for &(verb, group, resource, sub, ns) in granted {
        if !allowed(&client, verb, group, resource, sub, ns).await {
            wrong.push(format!(
                "denied but needed: {verb} {group}/{resource} {sub:?} in {ns:?}"
            ));
        }
    }
    for &(verb, group, resource, sub, ns) in denied {
        if allowed(&client, verb, group, resource, sub, ns).await {
            wrong.push(format!(
                "allowed but not needed: {verb} {group}/{resource} {sub:?} in {ns:?}"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "RBAC of images/k8s:\n{}",
        wrong.join("\n")
    );

    // The same through real requests with the ServiceAccount's own token.
    let token = cluster
        .service_account_token(NAMESPACE, SERVICE_ACCOUNT)
        .await
        .expect("token for the ServiceAccount");
    let as_portico = cluster.client_with_token(&token);
    let services: Api<Service> = Api::all(as_portico.clone());
    services
        .list(&ListParams::default())
        .await
        .expect("portico lists services");
    Api::<EndpointSlice>::all(as_portico.clone())
        .list(&ListParams::default())
        .await
        .expect("portico lists v1 endpointslices");
    let err = Api::<Service>::namespaced(as_portico, "default")
        .delete("kubernetes", &Default::default())
        .await
        .expect_err("portico may not delete services");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "{err}"
    );

    // The Deployment as stored: host network, the config from the ConfigMap.
    let deployment = Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .get("portico")
        .await
        .expect("deployment stored");
    let pod = deployment.spec.template.spec.expect("pod template");
    assert_eq!(pod.host_network, Some(true));
    assert_eq!(pod.service_account_name.as_deref(), Some(SERVICE_ACCOUNT));
    let container = &pod.containers[0];
    let command = container.command.clone().unwrap_or_default();
    let config_arg = command
        .windows(2)
        .find(|w| w[0] == "--config")
        .map(|w| w[1].clone())
        .expect("portico run --config FILE");
    assert_eq!(&command[..2], ["portico", "run"]);
    let mount = container
        .volume_mounts
        .as_ref()
        .and_then(|mounts| {
            mounts
                .iter()
                .find(|m| config_arg.starts_with(&m.mount_path))
        })
        .expect("the config file lies in a mounted volume");
    let volume = pod
        .volumes
        .as_ref()
        .and_then(|v| v.iter().find(|v| v.name == mount.name))
        .expect("the mount's volume");
    let config_map_name = volume
        .config_map
        .as_ref()
        .map(|c| c.name.clone())
        .expect("the config volume is a ConfigMap");
    let key = Path::new(&config_arg)
        .file_name()
        .and_then(|f| f.to_str())
        .expect("file name");
    let config_map = Api::<ConfigMap>::namespaced(client, NAMESPACE)
        .get(&config_map_name)
        .await
        .expect("the ConfigMap the Deployment mounts");
    let toml_text = config_map
        .data
        .and_then(|d| d.get(key).cloned())
        .unwrap_or_else(|| panic!("ConfigMap {config_map_name} has {key}"));
    // The Lease the config names is the one the Role grants.
    let config: toml::Value = toml::from_str(&toml_text).expect("portico.toml is TOML");
    let kubernetes = config.get("kubernetes").expect("[kubernetes] section");
    assert_eq!(
        kubernetes.get("lease_namespace").and_then(|v| v.as_str()),
        Some(NAMESPACE)
    );
    // Each pod is the [[instance]] named after its node: the file is valid
    // for every instance, and the pod's name for it comes from its node.
    let plan = nic_config::parse_instance(&toml_text, nic_config::InstanceChoice::Every)
        .unwrap_or_else(|e| panic!("the ConfigMap's portico.toml:\n{e}"));
    assert!(plan.instance.is_some(), "the ConfigMap declares instances");
    let instance_env = container
        .env
        .as_ref()
        .and_then(|env| env.iter().find(|e| e.name == "PORTICO_INSTANCE"))
        .and_then(|e| e.value_from.as_ref())
        .and_then(|v| v.field_ref.as_ref())
        .map(|f| f.field_path.clone());
    assert_eq!(instance_env.as_deref(), Some("spec.nodeName"));
    let caps = container
        .security_context
        .as_ref()
        .and_then(|s| s.capabilities.as_ref())
        .and_then(|c| c.add.clone())
        .unwrap_or_default();
    for needed in ["NET_ADMIN", "NET_RAW"] {
        assert!(caps.iter().any(|c| c == needed), "{needed} in {caps:?}");
    }
}
