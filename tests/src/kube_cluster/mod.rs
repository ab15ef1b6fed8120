//! A real Kubernetes API server for the tests: etcd and kube-apiserver on
//! 127.0.0.1 (the API server on another local address with
//! [`KubeClusterOptions::bind_address`]), started and owned by
//! [`KubeCluster`]. Never a mock of the HTTP
//! API: what Portico's Kubernetes source sees in the tests is what a cluster
//! serves.
//!
//! What runs:
//! - etcd (Debian's `etcd-server`, 3.4) on loopback with `--unsafe-no-fsync`
//!   and a throw-away data directory;
//! - kube-apiserver v1.20.2, built by `tests/k8s/build-kube-apiserver.sh` and
//!   cached at [`DEFAULT_KUBE_APISERVER`] (or `$PORTICO_KUBE_APISERVER`), with
//!   a CA and serving certificate made here (openssl CLI) for 127.0.0.1, a
//!   static token file whose one user is in `system:masters`,
//!   `--authorization-mode=RBAC`, `--endpoint-reconciler-type=none`,
//!   `--enable-priority-and-fairness=false`,
//!   `--runtime-config=discovery.k8s.io/v1beta1=false` and dual-stack
//!   Service CIDRs ([`SERVICE_CIDRS`], IPv4 first, with the 1.20 alpha gate
//!   [`DUAL_STACK_GATE`]), so `ipFamilyPolicy` and `ipFamilies` are the API
//!   server's own;
//! - a test-only CustomResourceDefinition `endpointslices.discovery.k8s.io`
//!   serving `discovery.k8s.io/v1` (1.20 has EndpointSlice only as v1beta1;
//!   see `tests/k8s/endpointslice-v1-crd.yaml`), installed and Established
//!   before [`KubeCluster::start`] returns.
//!
//! Invariants:
//! - [`KubeCluster::start`] returns only when `/readyz` answers `ok` and the
//!   v1 EndpointSlice list is served; [`KubeCluster::start_apiserver`] the same
//!   after a restart (same port, same etcd, same certificates and tokens).
//! - Every process is stopped by PID (SIGKILL, then reaped) and the temporary
//!   directory removed when the [`KubeCluster`] is dropped, also when a test
//!   panics. Ports are picked free on 127.0.0.1; a start that loses a port
//!   race is retried with new ports.
//! - Without the built binary (or etcd, or openssl) the start fails with
//!   [`KubeClusterError::is_skip`] true; [`KubeCluster::start_or_skip`] then
//!   prints a loud SKIP and returns `None`, unless
//!   `PORTICO_REQUIRE_KUBE_APISERVER=1` (set by `tests/run.sh` after it built
//!   the binary), where a missing prerequisite fails the test instead.
//!
//! Kubernetes 1.20 specifics the tests must live with: no
//! `spec.loadBalancerClass` on Services (1.21+), EndpointSlice v1 only through
//! the CRD above, and a watch from a compacted resourceVersion gets `410 Gone`
//! only with `watch_cache: false` (the watch cache serves old versions from
//! its window otherwise): see [`KubeCluster::compact_etcd`].
//!
//! Files: this one (options, the cluster, its start and stop), `error.rs`
//! (KubeClusterError), `daemon.rs` (the process guard), `pki.rs` (openssl
//! certificates), `etcd.rs` (etcd's HTTP gateway).

mod daemon;
mod error;
mod etcd;
mod pki;

pub use error::KubeClusterError;

use daemon::{Daemon, log_tail};
use etcd::{etcd_post, wait_etcd_healthy};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use kube::config::AuthInfo;
use pki::make_pki;
use portico_netns::{TempDir, unique_name};
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The Kubernetes version the harness runs.
pub const KUBE_APISERVER_VERSION: &str = "v1.20.2";
/// Where `tests/k8s/build-kube-apiserver.sh` caches the binary.
pub const DEFAULT_KUBE_APISERVER: &str = "/var/cache/portico/kube-apiserver-v1.20.2/kube-apiserver";
/// The test-only v1 EndpointSlice CRD (see the file's comments).
pub const ENDPOINTSLICE_V1_CRD_YAML: &str = include_str!("../../k8s/endpointslice-v1-crd.yaml");
/// The user of the admin token (member of `system:masters`).
pub const ADMIN_USER: &str = "portico-test-admin";

/// How long etcd and kube-apiserver may take to become ready (the machine
/// is shared; the API server alone needs ~4 s idle).
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// Attempts of a whole start when a picked port was taken meanwhile.
const PORT_RACE_ATTEMPTS: u32 = 3;

/// Options of a test cluster.
#[derive(Debug, Clone)]
pub struct KubeClusterOptions {
    /// `false` starts the API server with `--watch-cache=false`: watches and
    /// lists go to etcd, so a watch from a compacted version gets 410 Gone.
    pub watch_cache: bool,
    /// The address kube-apiserver binds to and advertises (also in its
    /// serving certificate's SANs and in every kubeconfig and client the
    /// harness makes); `None` for 127.0.0.1. It must be a local address of
    /// the host namespace before [`KubeCluster::start`] (e.g. the host end
    /// of a veth into a test namespace, so a process there reaches the API
    /// server). etcd stays on 127.0.0.1.
    pub bind_address: Option<Ipv4Addr>,
    /// `--service-node-port-range` (`first-last`, inclusive); `None` for the
    /// API server's default 30000-32767, which holds 2,768 NodePorts: fewer
    /// than the LoadBalancer Services of a scale benchmark need.
    pub node_port_range: Option<(u16, u16)>,
    /// `--feature-gates` entries (`Name=true`), e.g.
    /// [`LB_NODE_PORT_OPT_OUT_GATE`] for `spec.allocateLoadBalancerNodePorts`.
    pub feature_gates: Vec<String>,
}

/// The 1.20 feature gate (alpha) that lets a LoadBalancer Service opt out
/// of node ports with `spec.allocateLoadBalancerNodePorts: false`; without
/// it the API server drops the field and allocates them anyway.
pub const LB_NODE_PORT_OPT_OUT_GATE: &str = "ServiceLBNodePortControl=true";

/// The API server's Service CIDRs: IPv4 first, then IPv6 (a dual-stack
/// cluster, KEP-563).
pub const SERVICE_CIDRS: &str = "10.96.0.0/16,fd00:96::/112";

/// The 1.20 feature gate (alpha) of dual-stack Services (`ipFamilies`,
/// `ipFamilyPolicy`, a second Service CIDR); always on here.
pub const DUAL_STACK_GATE: &str = "IPv6DualStack=true";

impl Default for KubeClusterOptions {
    fn default() -> Self {
        KubeClusterOptions {
            watch_cache: true,
            bind_address: None,
            node_port_range: None,
            feature_gates: Vec::new(),
        }
    }
}

impl KubeClusterOptions {
    /// The API server flags these options add to the fixed ones.
    pub fn apiserver_flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        if !self.watch_cache {
            flags.push("--watch-cache=false".into());
        }
        if let Some((first, last)) = self.node_port_range {
            flags.push(format!("--service-node-port-range={first}-{last}"));
        }
        let mut gates = vec![DUAL_STACK_GATE.to_owned()];
        gates.extend(self.feature_gates.iter().cloned());
        flags.push(format!("--feature-gates={}", gates.join(",")));
        flags
    }
}

/// The kube-apiserver binary the harness runs: `$PORTICO_KUBE_APISERVER` or
/// [`DEFAULT_KUBE_APISERVER`].
pub fn kube_apiserver_binary() -> PathBuf {
    std::env::var_os("PORTICO_KUBE_APISERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_KUBE_APISERVER))
}

/// etcd + kube-apiserver on 127.0.0.1; everything stopped and removed on drop.
pub struct KubeCluster {
    options: KubeClusterOptions,
    binary: PathBuf,
    // Field order is drop order: the API server goes before etcd, both
    // before the directory.
    apiserver: Option<Daemon>,
    etcd: Daemon,
    dir: TempDir,
    etcd_client_port: u16,
    apiserver_port: u16,
    admin_token: String,
    ca_der: Vec<u8>,
    kubeconfig: PathBuf,
    apiserver_starts: u32,
}

impl std::fmt::Debug for KubeCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeCluster")
            .field("server", &self.server_url())
            .field("etcd_client_port", &self.etcd_client_port)
            .field("dir", &self.dir.path)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl KubeCluster {
    /// Start etcd and kube-apiserver, wait until the API server is ready,
    /// install the v1 EndpointSlice CRD and wait until it is served, write
    /// the admin kubeconfig.
    pub async fn start(options: KubeClusterOptions) -> Result<KubeCluster, KubeClusterError> {
        let binary = kube_apiserver_binary();
        if !binary.is_file() {
            return Err(KubeClusterError::ApiServerNotBuilt { path: binary });
        }
        for (tool, package) in [("etcd", "etcd-server"), ("openssl", "openssl")] {
            if !crate::have(tool) {
                return Err(KubeClusterError::ToolMissing { tool, package });
            }
        }
        let mut attempt = 1;
        loop {
            match Self::start_once(&options, &binary).await {
                Err(e) if attempt < PORT_RACE_ATTEMPTS && lost_port_race(&e) => {
                    eprintln!("kube_cluster: port taken meanwhile, retrying: {e}");
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    /// [`Self::start`] for a test: `None` after a loud SKIP line when a
    /// prerequisite is missing (unless `PORTICO_REQUIRE_KUBE_APISERVER=1`);
    /// panics on any other failure.
    pub async fn start_or_skip(test: &str, options: KubeClusterOptions) -> Option<KubeCluster> {
        match Self::start(options).await {
            Ok(cluster) => Some(cluster),
            Err(e) if e.is_skip() && !kube_apiserver_required() => {
                eprintln!("\n*** SKIP {test}: {e} (CI builds it, so there this test runs) ***\n");
                None
            }
            Err(e) => panic!("{test}: test Kubernetes cluster did not start: {e}"),
        }
    }

    async fn start_once(
        options: &KubeClusterOptions,
        binary: &Path,
    ) -> Result<KubeCluster, KubeClusterError> {
        let dir = TempDir::new("portico-kube-").map_err(KubeClusterError::io("temp dir"))?;
        let [etcd_client_port, etcd_peer_port, apiserver_port] = free_ports()?;
        let ca_der = make_pki(
            &dir.path,
            options.bind_address.unwrap_or(Ipv4Addr::LOCALHOST),
        )?;
        let admin_token = format!("admin-{}", unique_name("t"));
        std::fs::write(
            dir.path.join("tokens.csv"),
            format!("{admin_token},{ADMIN_USER},{ADMIN_USER},\"system:masters\"\n"),
        )
        .map_err(KubeClusterError::io("write tokens.csv"))?;

        let etcd_url = format!("http://127.0.0.1:{etcd_client_port}");
        let peer_url = format!("http://127.0.0.1:{etcd_peer_port}");
        let etcd_args: Vec<String> = vec![
            "--name=portico-test".into(),
            format!("--data-dir={}", dir.path.join("etcd").display()),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=portico-test={peer_url}"),
            "--unsafe-no-fsync".into(),
            "--log-level=warn".into(),
            "--logger=zap".into(),
        ];
        let mut etcd = Daemon::spawn(Path::new("etcd"), &etcd_args, &dir.path.join("etcd.log"))?;
        wait_etcd_healthy(&mut etcd, etcd_client_port).await?;

        let mut cluster = KubeCluster {
            options: options.clone(),
            binary: binary.to_path_buf(),
            apiserver: None,
            etcd,
            kubeconfig: dir.path.join("kubeconfig"),
            dir,
            etcd_client_port,
            apiserver_port,
            admin_token,
            ca_der,
            apiserver_starts: 0,
        };
        cluster.write_kubeconfig_file(&cluster.kubeconfig, &cluster.admin_token)?;
        cluster.start_apiserver_process()?;
        cluster.wait_apiserver_ready().await?;
        cluster.install_endpointslice_crd().await?;
        cluster.wait_endpointslices_served().await?;
        Ok(cluster)
    }

    /// `https://{bind address}:{port}` (127.0.0.1 unless
    /// [`KubeClusterOptions::bind_address`]).
    pub fn server_url(&self) -> String {
        format!("https://{}:{}", self.bind_address(), self.apiserver_port)
    }

    /// The address the API server listens on.
    pub fn bind_address(&self) -> Ipv4Addr {
        self.options.bind_address.unwrap_or(Ipv4Addr::LOCALHOST)
    }

    /// The admin kubeconfig (cluster, CA file, admin token; YAML).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The PEM file of the CA that signed the API server's certificate.
    pub fn ca_cert_path(&self) -> PathBuf {
        self.dir.path.join("ca.crt")
    }

    /// The bearer token of [`ADMIN_USER`] (`system:masters`).
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The temporary directory of this cluster (logs, certificates,
    /// kubeconfigs); removed on drop.
    pub fn dir(&self) -> &Path {
        &self.dir.path
    }

    /// The last lines of the API server's log, for failure messages.
    pub fn apiserver_log_tail(&self) -> String {
        log_tail(&self.apiserver_log_path())
    }

    /// PID of the running API server, `None` while stopped.
    pub fn apiserver_pid(&self) -> Option<u32> {
        self.apiserver.as_ref().map(Daemon::pid)
    }

    /// PID of etcd.
    pub fn etcd_pid(&self) -> u32 {
        self.etcd.pid()
    }

    /// A client authenticated as [`ADMIN_USER`] (`system:masters`).
    ///
    /// Must be called inside a Tokio runtime (kube's client spawns its
    /// request buffer there).
    pub fn client(&self) -> kube::Client {
        self.client_with_auth(serde_json::json!({ "token": self.admin_token }))
    }

    /// A client sending `token` as its bearer token (e.g. from
    /// [`Self::service_account_token`]); what it may do is up to RBAC.
    pub fn client_with_token(&self, token: &str) -> kube::Client {
        self.client_with_auth(serde_json::json!({ "token": token }))
    }

    /// A client acting as `user` in `groups` (admin token + impersonation
    /// headers): for RBAC checks without creating credentials.
    pub fn client_impersonating(&self, user: &str, groups: &[&str]) -> kube::Client {
        self.client_with_auth(serde_json::json!({
            "token": self.admin_token,
            "as": user,
            "as-groups": groups,
        }))
    }

    fn client_with_auth(&self, auth_info: serde_json::Value) -> kube::Client {
        let mut config = kube::Config::new(
            self.server_url()
                .parse()
                .expect("https://ipv4:port is a valid URI"),
        );
        config.root_cert = Some(vec![self.ca_der.clone()]);
        config.auth_info = serde_json::from_value::<AuthInfo>(auth_info)
            .expect("token/as/as-groups are kubeconfig AuthInfo fields");
        // Bounded: a request to a stopped API server fails instead of hanging.
        config.connect_timeout = Some(Duration::from_secs(5));
        kube::Client::try_from(config).expect("kube client from the harness's own config")
    }

    /// A bound token (TokenRequest API) for the ServiceAccount
    /// `namespace/name`, valid for an hour; the ServiceAccount must exist.
    pub async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<String, KubeClusterError> {
        let api: Api<ServiceAccount> = Api::namespaced(self.client(), namespace);
        let request: TokenRequest = serde_json::from_value(serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": { "expirationSeconds": 3600 }
        }))
        .map_err(|e| KubeClusterError::Manifest {
            what: "TokenRequest".into(),
            detail: e.to_string(),
        })?;
        let response = api
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .map_err(KubeClusterError::kube(format!(
                "token request for serviceaccount {namespace}/{name}"
            )))?;
        response
            .status
            .and_then(|s| s.token)
            .ok_or_else(|| KubeClusterError::Command {
                what: format!("token request for serviceaccount {namespace}/{name}"),
                detail: "no token in the response status".into(),
            })
    }

    /// Write a kubeconfig for this cluster with `token` as the user's
    /// credential to `<dir>/kubeconfig-<name>` and return its path (for a
    /// `portico` process running as some ServiceAccount).
    pub fn write_kubeconfig_for_token(
        &self,
        name: &str,
        token: &str,
    ) -> Result<PathBuf, KubeClusterError> {
        let path = self.dir.path.join(format!("kubeconfig-{name}"));
        self.write_kubeconfig_file(&path, token)?;
        Ok(path)
    }

    fn write_kubeconfig_file(&self, path: &Path, token: &str) -> Result<(), KubeClusterError> {
        let text = format!(
            "apiVersion: v1\nkind: Config\n\
             clusters:\n- name: portico-test\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\n\
             users:\n- name: portico-test\n  user:\n    token: {token}\n\
             contexts:\n- name: portico-test\n  context:\n    cluster: portico-test\n    user: portico-test\n    namespace: default\n\
             current-context: portico-test\n",
            server = self.server_url(),
            ca = self.ca_cert_path().display(),
        );
        std::fs::write(path, text).map_err(KubeClusterError::io(format!(
            "write kubeconfig {}",
            path.display()
        )))
    }

    /// Kill the API server (SIGKILL by PID, as a crash or a node loss):
    /// clients get connection errors until [`Self::start_apiserver`]. etcd
    /// and its data stay. No-op when already stopped.
    pub fn stop_apiserver(&mut self) {
        self.apiserver = None;
    }

    /// Start the API server again on the same port, etcd, certificates and
    /// tokens, and wait until it is ready and serves the v1 EndpointSlices
    /// again (the CRD is in etcd). No-op when running.
    pub async fn start_apiserver(&mut self) -> Result<(), KubeClusterError> {
        if self.apiserver.is_some() {
            return Ok(());
        }
        self.start_apiserver_process()?;
        self.wait_apiserver_ready().await?;
        self.wait_endpointslices_served().await
    }

    /// Compact etcd's history at its current revision (physically): every
    /// resourceVersion older than now becomes unavailable, so a watch from one
    /// gets `410 Gone` when the API server runs with `watch_cache: false`.
    /// Returns the revision compacted at. Calling it again without writes in
    /// between is fine (the history is already compacted there).
    pub async fn compact_etcd(&self) -> Result<i64, KubeClusterError> {
        // etcd's v3 JSON gateway; int64 fields are JSON strings there.
        let range = etcd_post(self.etcd_client_port, "/v3/kv/range", r#"{"key":"AA=="}"#).await?;
        let revision: i64 = range
            .get("header")
            .and_then(|h| h.get("revision"))
            .and_then(|r| {
                r.as_str()
                    .and_then(|s| s.parse().ok())
                    .or_else(|| r.as_i64())
            })
            .ok_or_else(|| KubeClusterError::Etcd {
                what: "range",
                detail: format!("no header.revision in {range}"),
            })?;
        let body = format!(r#"{{"revision":"{revision}","physical":true}}"#);
        match etcd_post(self.etcd_client_port, "/v3/kv/compaction", &body).await {
            // Nothing written since the last compaction: already done.
            Err(KubeClusterError::Etcd { detail, .. })
                if detail.contains("required revision has been compacted") =>
            {
                Ok(revision)
            }
            Err(e) => Err(e),
            Ok(_) => Ok(revision),
        }
    }

    fn apiserver_log_path(&self) -> PathBuf {
        self.dir.path.join("kube-apiserver.log")
    }

    fn start_apiserver_process(&mut self) -> Result<(), KubeClusterError> {
        let d = &self.dir.path;
        let p = |name: &str| d.join(name).display().to_string();
        let mut args: Vec<String> = vec![
            format!("--etcd-servers=http://127.0.0.1:{}", self.etcd_client_port),
            format!("--bind-address={}", self.bind_address()),
            format!("--advertise-address={}", self.bind_address()),
            format!("--secure-port={}", self.apiserver_port),
            // 1.20 still opens an unauthenticated port 8080 by default.
            "--insecure-port=0".into(),
            format!("--cert-dir={}", p("cert-dir")),
            format!("--tls-cert-file={}", p("apiserver.crt")),
            format!("--tls-private-key-file={}", p("apiserver.key")),
            format!("--client-ca-file={}", p("ca.crt")),
            format!("--token-auth-file={}", p("tokens.csv")),
            "--authorization-mode=RBAC".into(),
            // Required since 1.20 (bound service account tokens).
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", p("sa.pub")),
            format!("--service-account-signing-key-file={}", p("sa.key")),
            "--api-audiences=https://kubernetes.default.svc.cluster.local".into(),
            // Dual-stack (IPv4 first, so a Service without ipFamilies is
            // IPv4 as in a single-stack cluster): Services may ask for
            // `ipFamilyPolicy: PreferDualStack`/`RequireDualStack`.
            format!("--service-cluster-ip-range={SERVICE_CIDRS}"),
            // No controller manager or kubelets here: nothing to reconcile
            // the `kubernetes` Service's endpoints, no flow control queues.
            "--endpoint-reconciler-type=none".into(),
            "--enable-priority-and-fairness=false".into(),
            // Frees discovery.k8s.io for the v1 EndpointSlice CRD.
            "--runtime-config=discovery.k8s.io/v1beta1=false".into(),
            "--profiling=false".into(),
            "--logtostderr=true".into(),
            "--v=1".into(),
        ];
        args.extend(self.options.apiserver_flags());
        self.apiserver_starts += 1;
        let log = self.apiserver_log_path();
        if self.apiserver_starts > 1 {
            let _ = std::fs::OpenOptions::new()
                .append(true)
                .open(&log)
                .and_then(|mut f| {
                    io::Write::write_all(
                        &mut f,
                        format!("\n=== restart {} ===\n", self.apiserver_starts).as_bytes(),
                    )
                });
        }
        self.apiserver = Some(Daemon::spawn(&self.binary, &args, &log)?);
        Ok(())
    }

    /// Poll `/readyz` (all post-start hooks, including the RBAC bootstrap
    /// roles) until it answers `ok`.
    async fn wait_apiserver_ready(&mut self) -> Result<(), KubeClusterError> {
        let client = self.client();
        let started = Instant::now();
        let mut last_error = String::from("not polled yet");
        while started.elapsed() < READY_TIMEOUT {
            if let Some(exit) = self.apiserver.as_mut().and_then(Daemon::exited) {
                return Err(self.not_ready("kube-apiserver", started, exit));
            }
            let request = http::Request::get("/readyz")
                .body(Vec::new())
                .expect("static request");
            match client.request_text(request).await {
                Ok(body) if body.trim() == "ok" => return Ok(()),
                Ok(body) => last_error = body,
                Err(e) => last_error = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(self.not_ready("kube-apiserver", started, last_error))
    }

    fn not_ready(
        &self,
        what: &'static str,
        started: Instant,
        last_error: String,
    ) -> KubeClusterError {
        KubeClusterError::NotReady {
            what,
            waited_ms: started.elapsed().as_millis(),
            last_error,
            log_tail: self.apiserver_log_tail(),
        }
    }

    async fn install_endpointslice_crd(&self) -> Result<(), KubeClusterError> {
        let crd: CustomResourceDefinition = serde_saphyr::from_str(ENDPOINTSLICE_V1_CRD_YAML)
            .map_err(|e| KubeClusterError::Manifest {
                what: "tests/k8s/endpointslice-v1-crd.yaml".into(),
                detail: e.to_string(),
            })?;
        let api: Api<CustomResourceDefinition> = Api::all(self.client());
        api.create(&PostParams::default(), &crd)
            .await
            .map_err(KubeClusterError::kube("create the v1 EndpointSlice CRD"))?;
        Ok(())
    }

    /// Wait until the CRD is Established and a v1 EndpointSlice list
    /// succeeds (discovery and the CRD handler caught up).
    async fn wait_endpointslices_served(&mut self) -> Result<(), KubeClusterError> {
        use k8s_openapi::api::discovery::v1::EndpointSlice;
        let client = self.client();
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let slices: Api<EndpointSlice> = Api::all(client);
        let started = Instant::now();
        let mut last_error = String::from("not polled yet");
        while started.elapsed() < READY_TIMEOUT {
            if let Some(exit) = self.apiserver.as_mut().and_then(Daemon::exited) {
                return Err(self.not_ready("v1 EndpointSlice CRD", started, exit));
            }
            let established = match crds.get("endpointslices.discovery.k8s.io").await {
                Ok(crd) => crd
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True"),
                Err(e) => {
                    last_error = e.to_string();
                    false
                }
            };
            if established {
                match slices.list(&ListParams::default().limit(1)).await {
                    Ok(_) => return Ok(()),
                    Err(e) => last_error = format!("established, list fails: {e}"),
                }
            } else if last_error == "not polled yet" {
                last_error = "CRD not Established".into();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(self.not_ready("v1 EndpointSlice CRD", started, last_error))
    }
}

/// True when `PORTICO_REQUIRE_KUBE_APISERVER=1`: a missing binary fails.
fn kube_apiserver_required() -> bool {
    std::env::var("PORTICO_REQUIRE_KUBE_APISERVER").is_ok_and(|v| v == "1")
}

fn lost_port_race(e: &KubeClusterError) -> bool {
    match e {
        KubeClusterError::NotReady {
            last_error,
            log_tail,
            ..
        } => {
            let text = format!("{last_error}\n{log_tail}");
            text.contains("address already in use") || text.contains("bind: ")
        }
        _ => false,
    }
}

/// Three distinct free ports on 127.0.0.1 (all listeners held until the
/// three are picked, then released for the daemons).
fn free_ports() -> Result<[u16; 3], KubeClusterError> {
    let bind = || {
        TcpListener::bind("127.0.0.1:0")
            .and_then(|l| Ok((l.local_addr()?.port(), l)))
            .map_err(KubeClusterError::io("pick a free port"))
    };
    let (a, _la) = bind()?;
    let (b, _lb) = bind()?;
    let (c, _lc) = bind()?;
    Ok([a, b, c])
}
