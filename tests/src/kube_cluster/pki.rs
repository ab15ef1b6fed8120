//! The cluster's PKI, made with the openssl CLI: a CA, the API server's
//! serving certificate and the service account key pair.

use super::KubeClusterError;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Stdio};

/// CA, API server certificate (127.0.0.1, `bind_address`, localhost) and
/// the service account key pair in `dir`, all ECDSA P-256. Returns the CA
/// in DER.
pub(super) fn make_pki(dir: &Path, bind_address: Ipv4Addr) -> Result<Vec<u8>, KubeClusterError> {
    let p = |name: &str| dir.join(name).display().to_string();
    let ext = dir.join("apiserver.ext");
    std::fs::write(
        &ext,
        format!(
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n\
             extendedKeyUsage=serverAuth\n\
             subjectAltName=IP:127.0.0.1,IP:{bind_address},DNS:localhost,DNS:kubernetes.default.svc\n"
        ),
    )
    .map_err(KubeClusterError::io("write apiserver.ext"))?;
    // An ECDSA P-256 private key written to `out`.
    let ec_key = |out: String| -> Vec<String> {
        [
            "ecparam",
            "-genkey",
            "-name",
            "prime256v1",
            "-noout",
            "-out",
        ]
        .into_iter()
        .map(String::from)
        .chain([out])
        .collect()
    };
    let steps: [(&str, Vec<String>); 7] = [
        ("CA key", ec_key(p("ca.key"))),
        (
            "CA certificate",
            vec![
                "req".into(),
                "-x509".into(),
                "-new".into(),
                "-key".into(),
                p("ca.key"),
                "-subj".into(),
                "/CN=portico-test-ca".into(),
                "-days".into(),
                "2".into(),
                "-addext".into(),
                "basicConstraints=critical,CA:TRUE".into(),
                "-addext".into(),
                "keyUsage=critical,keyCertSign,cRLSign".into(),
                "-out".into(),
                p("ca.crt"),
            ],
        ),
        ("API server key", ec_key(p("apiserver.key"))),
        (
            "API server CSR",
            vec![
                "req".into(),
                "-new".into(),
                "-key".into(),
                p("apiserver.key"),
                "-subj".into(),
                "/CN=kube-apiserver".into(),
                "-out".into(),
                p("apiserver.csr"),
            ],
        ),
        (
            "API server certificate",
            vec![
                "x509".into(),
                "-req".into(),
                "-in".into(),
                p("apiserver.csr"),
                "-CA".into(),
                p("ca.crt"),
                "-CAkey".into(),
                p("ca.key"),
                "-CAcreateserial".into(),
                "-days".into(),
                "2".into(),
                "-extfile".into(),
                p("apiserver.ext"),
                "-out".into(),
                p("apiserver.crt"),
            ],
        ),
        ("service account key", ec_key(p("sa.key"))),
        (
            "service account public key",
            vec![
                "ec".into(),
                "-in".into(),
                p("sa.key"),
                "-pubout".into(),
                "-out".into(),
                p("sa.pub"),
            ],
        ),
    ];
    for (what, args) in steps {
        openssl(what, &args)?;
    }
    openssl(
        "CA certificate in DER",
        &[
            "x509".into(),
            "-in".into(),
            p("ca.crt"),
            "-outform".into(),
            "DER".into(),
            "-out".into(),
            p("ca.der"),
        ],
    )?;
    std::fs::read(dir.join("ca.der")).map_err(KubeClusterError::io("read ca.der"))
}

/// Run `openssl args`; its stderr in the error.
fn openssl(what: &str, args: &[String]) -> Result<(), KubeClusterError> {
    let out = Command::new("openssl")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(KubeClusterError::io(format!("openssl ({what})")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(KubeClusterError::Command {
            what: format!("openssl ({what})"),
            detail: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}
