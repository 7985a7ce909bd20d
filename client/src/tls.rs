//! libpq's `sslmode` and `sslrootcert` for every connection this crate (and
//! the CLI and the REST server, through it) makes, with rustls.
//!
//! tokio-postgres knows `sslmode` = disable, prefer and require only, and
//! never checks a certificate; libpq's two verifying modes are read here,
//! taken out of the connection string before tokio-postgres parses it, and
//! enforced by the certificate verifier:
//!
//! | sslmode | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `allow`, `prefer` (the default) | when the server offers it | not checked (as libpq) |
//! | `require` | always | not checked, unless a root certificate is given (`sslrootcert`, or `~/.postgresql/root.crt` exists): then as `verify-ca` (as libpq) |
//! | `verify-ca` | always | signed by a root of `sslrootcert` |
//! | `verify-full` | always | as `verify-ca`, and issued for the host connected to |
//!
//! `sslrootcert` (or `PGSSLROOTCERT`) names a PEM file of root
//! certificates, `system` the operating system's store; by default
//! `~/.postgresql/root.crt`. `PGSSLMODE` applies when the string sets no
//! `sslmode`. A root file that cannot be read fails the connection, saying
//! why, when it is made.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::sync::Arc;
use tokio_postgres::config::SslMode;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres_rustls::MakeRustlsConnect;

/// The TLS connector every connection uses: rustls, with the checks
/// `sslmode` asks for. A Unix-socket connection (which tokio-postgres
/// names with an empty host) never negotiates TLS; its name is a
/// placeholder.
#[derive(Clone)]
pub struct Connector(MakeRustlsConnect);

impl<S> MakeTlsConnect<S> for Connector
where
    MakeRustlsConnect: MakeTlsConnect<S>,
{
    type Stream = <MakeRustlsConnect as MakeTlsConnect<S>>::Stream;
    type TlsConnect = <MakeRustlsConnect as MakeTlsConnect<S>>::TlsConnect;
    type Error = <MakeRustlsConnect as MakeTlsConnect<S>>::Error;

    fn make_tls_connect(&mut self, hostname: &str) -> Result<Self::TlsConnect, Self::Error> {
        let name = if hostname.is_empty() {
            "localhost"
        } else {
            hostname
        };
        self.0.make_tls_connect(name)
    }
}

/// libpq's `sslmode` values, from the least to the most protective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl Mode {
    fn parse(text: &str) -> Option<Mode> {
        Some(match text {
            "disable" => Mode::Disable,
            "allow" => Mode::Allow,
            "prefer" => Mode::Prefer,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            _ => return None,
        })
    }
}

/// What a connection string asks of TLS, and the string without it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub mode: Mode,
    pub root_cert: Option<String>,
    /// The connection string with `sslmode` and `sslrootcert` removed.
    pub rest: String,
    /// Why no connection may be made with these settings (checked when
    /// one is attempted, failing closed: TLS is required and refused).
    pub problem: Option<String>,
}

/// Splits `sslmode`/`sslrootcert` out of a libpq connection string
/// (`key=value` pairs, values optionally single-quoted, or a
/// `postgres://` URL's query), falling back to `PGSSLMODE`/`PGSSLROOTCERT`.
pub fn settings(dsn: &str) -> Result<Settings, String> {
    let (mut mode, mut root_cert, rest) =
        if dsn.starts_with("postgres://") || dsn.starts_with("postgresql://") {
            split_url(dsn)
        } else {
            split_pairs(dsn)?
        };
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    if mode.is_none() {
        mode = var("PGSSLMODE");
    }
    if root_cert.is_none() {
        root_cert = var("PGSSLROOTCERT");
    }
    let explicit = mode.is_some();
    let mut mode = match mode {
        None => Mode::Prefer,
        Some(text) => Mode::parse(&text).ok_or_else(|| {
            format!("invalid sslmode \"{text}\": disable, allow, prefer, require, verify-ca or verify-full")
        })?,
    };
    let mut problem = None;
    // As libpq 16: the system's roots are the public web's, so only a
    // check of the host name means anything with them. Without an
    // sslmode they mean verify-full; with a weaker one the connection is
    // refused (never made without the check).
    if root_cert.as_deref() == Some("system") && mode != Mode::VerifyFull {
        if explicit {
            problem = Some(format!(
                "weak sslmode \"{}\" may not be used with sslrootcert=system (use verify-full)",
                mode_name(mode)
            ));
        }
        mode = Mode::VerifyFull;
    }
    Ok(Settings {
        mode,
        root_cert,
        rest,
        problem,
    })
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Disable => "disable",
        Mode::Allow => "allow",
        Mode::Prefer => "prefer",
        Mode::Require => "require",
        Mode::VerifyCa => "verify-ca",
        Mode::VerifyFull => "verify-full",
    }
}

fn split_pairs(dsn: &str) -> Result<(Option<String>, Option<String>, String), String> {
    let (mut mode, mut root) = (None, None);
    let mut rest = String::new();
    let mut chars = dsn.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.next() != Some('=') {
            return Err(format!("invalid connection string: \"{key}\" has no value"));
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        // The value as written (kept for the rest) and as meant.
        let mut raw = String::new();
        let mut value = String::new();
        if chars.peek() == Some(&'\'') {
            raw.push(chars.next().expect("quote"));
            let mut closed = false;
            while let Some(c) = chars.next() {
                raw.push(c);
                match c {
                    '\\' => {
                        if let Some(n) = chars.next() {
                            raw.push(n);
                            value.push(n);
                        }
                    }
                    '\'' => {
                        closed = true;
                        break;
                    }
                    c => value.push(c),
                }
            }
            if !closed {
                return Err("invalid connection string: unterminated quoted value".into());
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                chars.next();
                raw.push(c);
                if c == '\\' {
                    if let Some(n) = chars.next() {
                        raw.push(n);
                        value.push(n);
                    }
                } else {
                    value.push(c);
                }
            }
        }
        match key.as_str() {
            "sslmode" => mode = Some(value),
            "sslrootcert" => root = Some(value),
            _ => {
                if !rest.is_empty() {
                    rest.push(' ');
                }
                rest.push_str(&key);
                rest.push('=');
                rest.push_str(&raw);
            }
        }
    }
    Ok((mode, root, rest))
}

fn split_url(dsn: &str) -> (Option<String>, Option<String>, String) {
    // The query starts at the first '?' after the user information (a
    // password may hold a '?').
    let after_userinfo = dsn.rfind('@').map(|i| i + 1).unwrap_or(0);
    let Some(q) = dsn[after_userinfo..].find('?').map(|i| after_userinfo + i) else {
        return (None, None, dsn.to_string());
    };
    let (base, query) = (&dsn[..q], &dsn[q + 1..]);
    let (mut mode, mut root) = (None, None);
    let mut kept = Vec::new();
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match percent_decoded(key).as_str() {
            "sslmode" => mode = Some(percent_decoded(value)),
            "sslrootcert" => root = Some(percent_decoded(value)),
            _ => kept.push(pair),
        }
    }
    let rest = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (mode, root, rest)
}

fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            if let (Some(h), Some(l)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            ) {
                out.push(h * 16 + l);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The tokio-postgres `sslmode` a libpq mode needs.
pub fn ssl_mode(mode: Mode) -> SslMode {
    match mode {
        Mode::Disable => SslMode::Disable,
        Mode::Allow | Mode::Prefer => SslMode::Prefer,
        Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
    }
}

/// How the server's certificate is checked.
#[derive(Debug)]
enum Check {
    Nothing,
    /// Signed by one of these roots; with `hostname`, issued for the host.
    Chain {
        verifier: Arc<WebPkiServerVerifier>,
        hostname: bool,
    },
    /// The roots could not be loaded: every handshake fails, saying why.
    Unusable(String),
}

#[derive(Debug)]
struct Verifier {
    check: Check,
    schemes: Vec<SignatureScheme>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match &self.check {
            Check::Nothing => Ok(ServerCertVerified::assertion()),
            Check::Unusable(why) => Err(rustls::Error::General(why.clone())),
            Check::Chain { verifier, hostname } => {
                match verifier.verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
                {
                    // verify-ca: a certificate for another name is fine.
                    Err(rustls::Error::InvalidCertificate(
                        rustls::CertificateError::NotValidForName,
                    ))
                    | Err(rustls::Error::InvalidCertificate(
                        rustls::CertificateError::NotValidForNameContext { .. },
                    )) if !hostname => Ok(ServerCertVerified::assertion()),
                    other => other,
                }
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &rustls::crypto::ring::default_provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &rustls::crypto::ring::default_provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes.clone()
    }
}

fn default_root_file() -> Option<std::path::PathBuf> {
    std::env::var_os("HOME").map(|home| std::path::Path::new(&home).join(".postgresql/root.crt"))
}

fn roots(root_cert: Option<&str>) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    if root_cert == Some("system") {
        let found = rustls_native_certs::load_native_certs();
        for cert in found.certs {
            let _ = store.add(cert);
        }
        if store.is_empty() {
            return Err("sslrootcert=system: the system has no root certificates".into());
        }
        return Ok(store);
    }
    let path = match root_cert {
        Some(p) => std::path::PathBuf::from(p),
        None => default_root_file()
            .ok_or("no sslrootcert and no home directory for ~/.postgresql/root.crt")?,
    };
    let pem = std::fs::read(&path).map_err(|e| {
        format!(
            "root certificate file \"{}\" cannot be read: {e} (set sslrootcert, or use sslmode=require or prefer)",
            path.display()
        )
    })?;
    use rustls::pki_types::pem::PemObject;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert =
            cert.map_err(|e| format!("root certificate file \"{}\": {e}", path.display()))?;
        store
            .add(cert)
            .map_err(|e| format!("root certificate file \"{}\": {e}", path.display()))?;
    }
    if store.is_empty() {
        return Err(format!(
            "root certificate file \"{}\" holds no certificate",
            path.display()
        ));
    }
    Ok(store)
}

/// The rustls connector for `settings`.
pub fn connector(settings: &Settings) -> Connector {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let schemes = provider
        .signature_verification_algorithms
        .supported_schemes();
    // require with a root file given (or present at the default place)
    // verifies the chain, as libpq does.
    let verify_chain = match settings.mode {
        Mode::VerifyCa | Mode::VerifyFull => true,
        Mode::Require => {
            settings.root_cert.is_some() || default_root_file().is_some_and(|p| p.exists())
        }
        _ => false,
    };
    let check = if let Some(problem) = &settings.problem {
        Check::Unusable(problem.clone())
    } else if !verify_chain {
        Check::Nothing
    } else {
        match roots(settings.root_cert.as_deref()).and_then(|store| {
            WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone())
                .build()
                .map_err(|e| format!("cannot verify with the root certificates: {e}"))
        }) {
            Ok(verifier) => Check::Chain {
                verifier,
                hostname: settings.mode == Mode::VerifyFull,
            },
            Err(why) => Check::Unusable(why),
        }
    };
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Verifier { check, schemes }))
        .with_no_client_auth();
    Connector(MakeRustlsConnect::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssl_settings_are_taken_out_of_the_string() {
        let s = settings("host=db.example port=5432 sslmode=verify-full sslrootcert='/etc/ca dir/root.crt' dbname=x").unwrap();
        assert_eq!(s.mode, Mode::VerifyFull);
        assert_eq!(s.root_cert.as_deref(), Some("/etc/ca dir/root.crt"));
        assert_eq!(s.rest, "host=db.example port=5432 dbname=x");
        let s = settings("postgresql://u@db:5432/x?sslmode=verify-ca&application_name=a&sslrootcert=%2Ftmp%2Fca.pem").unwrap();
        assert_eq!(s.mode, Mode::VerifyCa);
        assert_eq!(s.root_cert.as_deref(), Some("/tmp/ca.pem"));
        assert_eq!(s.rest, "postgresql://u@db:5432/x?application_name=a");
        let s = settings("host=/tmp password='a b\\'c' user=me").unwrap();
        assert_eq!(s.rest, "host=/tmp password='a b\\'c' user=me");
        assert!(settings("sslmode=sometimes")
            .unwrap_err()
            .contains("invalid sslmode \"sometimes\""));
        assert!(settings("host").is_err());
    }
    #[test]
    fn sslrootcert_system_means_verify_full_and_refuses_a_weaker_mode() {
        // No sslmode: as libpq 16, system roots imply verify-full.
        let s = settings("host=db sslrootcert=system").unwrap();
        assert_eq!((s.mode, s.problem.as_deref()), (Mode::VerifyFull, None));
        // An explicit weaker mode is a problem, and the connection fails
        // closed: verify-full with a check that always refuses, naming why.
        for weak in ["disable", "allow", "prefer", "require", "verify-ca"] {
            let s = settings(&format!("host=db sslmode={weak} sslrootcert=system")).unwrap();
            assert_eq!(s.mode, Mode::VerifyFull, "{weak}");
            let problem = s.problem.unwrap();
            assert!(
                problem.contains(&format!("weak sslmode \"{weak}\"")),
                "{problem}"
            );
        }
        let s = settings("host=db sslmode=verify-full sslrootcert=system").unwrap();
        assert_eq!((s.mode, s.problem), (Mode::VerifyFull, None));
    }

    #[test]
    fn modes_map_to_what_the_driver_negotiates() {
        assert_eq!(ssl_mode(Mode::Disable), SslMode::Disable);
        assert_eq!(ssl_mode(Mode::Allow), SslMode::Prefer);
        assert_eq!(ssl_mode(Mode::Prefer), SslMode::Prefer);
        for m in [Mode::Require, Mode::VerifyCa, Mode::VerifyFull] {
            assert_eq!(ssl_mode(m), SslMode::Require);
        }
        // No sslmode anywhere: prefer, as libpq.
        if std::env::var_os("PGSSLMODE").is_none() {
            assert_eq!(settings("host=db").unwrap().mode, Mode::Prefer);
        }
    }

    #[test]
    fn unusable_root_files_are_named_and_fail_closed() {
        let dir = std::env::temp_dir().join(format!("mmv-tls-roots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.crt");
        let err = roots(Some(missing.to_str().unwrap())).unwrap_err();
        assert!(
            err.contains("cannot be read") && err.contains("missing.crt"),
            "{err}"
        );
        let empty = dir.join("empty.crt");
        std::fs::write(&empty, "").unwrap();
        let err = roots(Some(empty.to_str().unwrap())).unwrap_err();
        assert!(err.contains("holds no certificate"), "{err}");
        let garbage = dir.join("garbage.crt");
        std::fs::write(
            &garbage,
            "-----BEGIN CERTIFICATE-----\nnot base64 !\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let err = roots(Some(garbage.to_str().unwrap())).unwrap_err();
        assert!(err.contains("garbage.crt"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
