//! Why a test cluster could not start or an operation on it failed, and
//! which of those are a missing prerequisite (a skip, not a failure).

use std::io;
use std::path::PathBuf;

/// Why a test cluster could not start or an operation on it failed.
#[derive(Debug, thiserror::Error)]
pub enum KubeClusterError {
    #[error("kube-apiserver not built at {}; run tests/k8s/build-kube-apiserver.sh", path.display())]
    ApiServerNotBuilt { path: PathBuf },
    #[error("{tool} not installed ({package}); run tests/k8s/build-kube-apiserver.sh")]
    ToolMissing {
        tool: &'static str,
        package: &'static str,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("{what} failed: {detail}")]
    Command { what: String, detail: String },
    #[error("{what} not ready after {waited_ms} ms: {last_error}\n--- log tail ---\n{log_tail}")]
    NotReady {
        what: &'static str,
        waited_ms: u128,
        last_error: String,
        log_tail: String,
    },
    #[error("{what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("etcd {what}: {detail}")]
    Etcd { what: &'static str, detail: String },
    #[error("{what}: {detail}")]
    Manifest { what: String, detail: String },
}

impl KubeClusterError {
    /// True when a prerequisite is missing on this machine (not built, not
    /// installed): the test should be skipped loudly, not failed.
    pub fn is_skip(&self) -> bool {
        matches!(
            self,
            KubeClusterError::ApiServerNotBuilt { .. } | KubeClusterError::ToolMissing { .. }
        )
    }

    pub(super) fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> Self {
        let what = what.into();
        move |source| KubeClusterError::Io { what, source }
    }

    pub(super) fn kube(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let what = what.into();
        move |source| KubeClusterError::Kube { what, source }
    }
}
