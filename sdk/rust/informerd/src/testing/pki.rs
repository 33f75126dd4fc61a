//! Certificate authorities and the certificates they sign, for tests of authentication: made
//! with the `openssl` CLI, as files (the twin of the Python SDK's `informerd.testing.pki`).
//!
//! ```no_run
//! # async fn f() -> informerd::testing::Result<()> {
//! use informerd::testing::{Daemon, Pki};
//! let dir = tempfile::tempdir().unwrap();
//! let pki = Pki::new(dir.path())?;
//! let ca = pki.ca("ca")?;
//! let server = pki.server_cert("server", &ca, &["127.0.0.1"], &["localhost"])?;
//! let alice = pki.client_cert("alice", &ca, "alice", &["team-a"])?; // CN=alice, O=team-a
//! # let kubeconfig = std::path::Path::new("/k");
//! let daemon = Daemon::start_with(kubeconfig, &[
//!     &format!("--tls-cert={}", server.cert.display()),
//!     &format!("--tls-key={}", server.key.display()),
//!     &format!("--tls-client-ca={}", ca.cert.display()),
//! ]).await?;
//! # Ok(()) }
//! ```
//!
//! Keys are ECDSA P-256 (fast to make); certificates are valid for two days.
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Error, Result, io};

/// A certificate and its private key (PEM files).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPair {
    /// The certificate.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

/// Makes certificates in one directory.
#[derive(Debug)]
pub struct Pki {
    dir: PathBuf,
}

const KEY: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

/// `value` escaped for an `openssl -subj` attribute.
fn rdn(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | '/' | '+') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl Pki {
    /// Certificates in `dir` (created if missing).
    pub fn new(dir: impl Into<PathBuf>) -> Result<Pki> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(io(format!("mkdir {}", dir.display())))?;
        Ok(Pki { dir })
    }

    /// The directory the files are in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn openssl(&self, args: &[&str]) -> Result<()> {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(&self.dir)
            .output()
            .map_err(io("run openssl"))?;
        if out.status.success() {
            return Ok(());
        }
        Err(Error::Start {
            what: format!("openssl {}", args.join(" ")),
            problem: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    fn pair(&self, name: &str) -> KeyPair {
        KeyPair {
            cert: self.dir.join(format!("{name}.crt")),
            key: self.dir.join(format!("{name}.key")),
        }
    }

    /// A self-signed CA `CN=<name>` (`<name>.crt`, `<name>.key`).
    pub fn ca(&self, name: &str) -> Result<KeyPair> {
        let (subject, key, cert) = (
            format!("/CN={}", rdn(name)),
            format!("{name}.key"),
            format!("{name}.crt"),
        );
        let mut args = vec!["req", "-x509"];
        args.extend(KEY);
        args.extend([
            "-days", "2", "-subj", &subject, "-keyout", &key, "-out", &cert,
        ]);
        args.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
        args.extend([
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        ]);
        self.openssl(&args)?;
        Ok(self.pair(name))
    }

    fn leaf(&self, name: &str, ca: &KeyPair, subject: &str, extensions: &str) -> Result<KeyPair> {
        let (key, csr, ext, cert) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.ext"),
            format!("{name}.crt"),
        );
        let mut args = vec!["req"];
        args.extend(KEY);
        args.extend(["-subj", subject, "-keyout", &key, "-out", &csr]);
        self.openssl(&args)?;
        std::fs::write(self.dir.join(&ext), extensions).map_err(io(format!("write {ext}")))?;
        let serial = (rand::random::<u64>() >> 1).max(1).to_string();
        let (ca_cert, ca_key) = (ca.cert.display().to_string(), ca.key.display().to_string());
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_cert,
            "-CAkey",
            &ca_key,
            "-set_serial",
            &serial,
            "-days",
            "2",
            "-extfile",
            &ext,
            "-out",
            &cert,
        ])?;
        Ok(self.pair(name))
    }

    /// A serving certificate signed by `ca` for these IP addresses and DNS names.
    pub fn server_cert(
        &self,
        name: &str,
        ca: &KeyPair,
        ips: &[&str],
        dns: &[&str],
    ) -> Result<KeyPair> {
        let sans: Vec<String> = ips
            .iter()
            .map(|ip| format!("IP:{ip}"))
            .chain(dns.iter().map(|d| format!("DNS:{d}")))
            .collect();
        self.leaf(
            name,
            ca,
            &format!("/CN={}", rdn(name)),
            &format!(
                "subjectAltName={}\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n",
                sans.join(",")
            ),
        )
    }

    /// A client certificate signed by `ca` for `user` (CN) in `groups` (one O each), as
    /// Kubernetes reads client certificates.
    pub fn client_cert(
        &self,
        name: &str,
        ca: &KeyPair,
        user: &str,
        groups: &[&str],
    ) -> Result<KeyPair> {
        let subject: String = std::iter::once(format!("/CN={}", rdn(user)))
            .chain(groups.iter().map(|g| format!("/O={}", rdn(g))))
            .collect();
        self.leaf(
            name,
            ca,
            &subject,
            "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_attribute_is_escaped() {
        assert_eq!(rdn("a/b+c\\d"), "a\\/b\\+c\\\\d");
    }

    #[test]
    fn the_certificates_verify_against_their_ca() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::new(dir.path()).unwrap();
        let ca = pki.ca("ca").unwrap();
        let server = pki
            .server_cert("server", &ca, &["127.0.0.1"], &["localhost"])
            .unwrap();
        let alice = pki.client_cert("alice", &ca, "alice", &["team-a"]).unwrap();
        for cert in [&server.cert, &alice.cert] {
            let out = Command::new("openssl")
                .args(["verify", "-CAfile"])
                .arg(&ca.cert)
                .arg(cert)
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
        }
        let subject = Command::new("openssl")
            .args(["x509", "-noout", "-subject", "-in"])
            .arg(&alice.cert)
            .output()
            .unwrap();
        let subject = String::from_utf8_lossy(&subject.stdout);
        assert!(
            subject.contains("CN = alice") && subject.contains("O = team-a"),
            "{subject}"
        );
    }
}
