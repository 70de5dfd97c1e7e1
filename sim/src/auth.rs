//! Authentication and authorization the way kube-apiserver does them, for the tests that must meet
//! what a real apiserver answers.
//!
//! Authenticators run as a union, in kube-apiserver's order: request header (front-proxy), x509
//! client certificate, bearer token. The first that succeeds wins. A client certificate that does
//! not verify against an authenticator's CA is an error of that authenticator, not a miss; when none
//! succeeds and any failed, the answer is 401 and anonymous is not consulted. With anonymous auth
//! on, a request that no authenticator recognised at all is `system:anonymous` in
//! `system:unauthenticated`. Authenticated users get `system:authenticated`.
//!
//! The authorizer is a small stand-in for kube-apiserver's default RBAC: health and `/version` for
//! everyone, discovery and reads for authenticated users, `kube-public/cluster-info` for anonymous,
//! `selfsubjectreviews` for authenticated users, writes for `system:masters` and the users and
//! groups a test names.

use std::collections::HashMap;
use std::sync::Arc;

use http::{HeaderMap, HeaderName, Method};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use x509_parser::prelude::{FromDer, X509Certificate};

/// Who a request is, as the apiserver's authenticators found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserInfo {
    /// The user name.
    pub name: String,
    /// The groups, `system:authenticated` or `system:unauthenticated` included.
    pub groups: Vec<String>,
    /// Extra attributes from `X-Remote-Extra-*` headers (lower-case key, value).
    pub extra: Vec<(String, String)>,
}

impl UserInfo {
    fn new(name: &str, groups: &[String]) -> UserInfo {
        UserInfo {
            name: name.to_owned(),
            groups: groups.to_vec(),
            extra: Vec::new(),
        }
    }

    fn anonymous() -> UserInfo {
        UserInfo::new("system:anonymous", &["system:unauthenticated".to_owned()])
    }

    /// Adds `system:authenticated`, as kube-apiserver's group adder does for every authenticated
    /// user.
    fn authenticated(mut self) -> UserInfo {
        if !self.groups.iter().any(|g| g == "system:authenticated") {
            self.groups.push("system:authenticated".to_owned());
        }
        self
    }

    fn is_anonymous(&self) -> bool {
        self.name == "system:anonymous"
    }

    fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

/// Request-header (front-proxy) authentication: `--requestheader-client-ca-file`,
/// `--requestheader-allowed-names` and the header names.
struct RequestHeader {
    verifier: Arc<dyn ClientCertVerifier>,
    allowed_names: Vec<String>,
    username_headers: Vec<HeaderName>,
    group_headers: Vec<HeaderName>,
    extra_prefixes: Vec<String>,
}

/// How one simulated apiserver authenticates and authorizes.
pub struct SimAuth {
    client_ca: Option<Arc<dyn ClientCertVerifier>>,
    requestheader: Option<RequestHeader>,
    tokens: HashMap<String, UserInfo>,
    anonymous: bool,
    writers: Vec<String>,
    status_writers: Vec<String>,
}

impl std::fmt::Debug for SimAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimAuth")
            .field("client_ca", &self.client_ca.is_some())
            .field("requestheader", &self.requestheader.is_some())
            .field("tokens", &self.tokens.len())
            .field("anonymous", &self.anonymous)
            .field("writers", &self.writers)
            .field("status_writers", &self.status_writers)
            .finish()
    }
}

impl Default for SimAuth {
    fn default() -> Self {
        SimAuth::new()
    }
}

fn verifier(ca_pem: &str) -> Result<Arc<dyn ClientCertVerifier>, String> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        let cert = cert.map_err(|e| format!("CA PEM: {e}"))?;
        roots.add(cert).map_err(|e| format!("CA: {e}"))?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|e| format!("CA: {e}"))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl SimAuth {
    /// No authenticator yet, anonymous auth on (kube-apiserver's default), writes for
    /// `system:masters` only.
    pub fn new() -> SimAuth {
        SimAuth {
            client_ca: None,
            requestheader: None,
            tokens: HashMap::new(),
            anonymous: true,
            writers: Vec::new(),
            status_writers: Vec::new(),
        }
    }

    /// `--client-ca-file`: client certificates signed by this CA authenticate as CN, groups O.
    pub fn client_ca(mut self, ca_pem: &str) -> Result<SimAuth, String> {
        self.client_ca = Some(verifier(ca_pem)?);
        Ok(self)
    }

    /// `--requestheader-client-ca-file` and `--requestheader-allowed-names`, with kubeadm's header
    /// names (`X-Remote-User`, `X-Remote-Group`, `X-Remote-Extra-`).
    pub fn requestheader(
        mut self,
        ca_pem: &str,
        allowed_names: &[&str],
    ) -> Result<SimAuth, String> {
        self.requestheader = Some(RequestHeader {
            verifier: verifier(ca_pem)?,
            allowed_names: allowed_names.iter().map(|n| n.to_string()).collect(),
            username_headers: vec![HeaderName::from_static("x-remote-user")],
            group_headers: vec![HeaderName::from_static("x-remote-group")],
            extra_prefixes: vec!["x-remote-extra-".to_owned()],
        });
        Ok(self)
    }

    /// Header names other than kubeadm's (`--requestheader-username-headers` and friends); call after
    /// `requestheader`.
    pub fn requestheader_names(mut self, user: &str, group: &str, extra_prefix: &str) -> SimAuth {
        if let Some(rh) = &mut self.requestheader {
            let name = |n: &str| HeaderName::from_bytes(n.to_ascii_lowercase().as_bytes()).ok();
            rh.username_headers = name(user).into_iter().collect();
            rh.group_headers = name(group).into_iter().collect();
            rh.extra_prefixes = vec![extra_prefix.to_ascii_lowercase()];
        }
        self
    }

    /// `--token-auth-file`: lines of `token,user,uid,"group1,group2"`.
    pub fn token_file(mut self, csv: &str) -> Result<SimAuth, String> {
        for (n, line) in csv.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (token, rest) = line
                .split_once(',')
                .ok_or_else(|| format!("token file line {}: want token,user,uid", n + 1))?;
            let mut fields = rest.splitn(3, ',');
            let user = fields.next().unwrap_or_default();
            let _uid = fields.next();
            let groups: Vec<String> = fields
                .next()
                .map(|g| g.trim_matches('"'))
                .filter(|g| !g.is_empty())
                .map(|g| g.split(',').map(str::to_owned).collect())
                .unwrap_or_default();
            if token.is_empty() || user.is_empty() {
                return Err(format!("token file line {}: empty token or user", n + 1));
            }
            self.tokens
                .insert(token.to_owned(), UserInfo::new(user, &groups));
        }
        Ok(self)
    }

    /// `--anonymous-auth`.
    pub fn anonymous(mut self, on: bool) -> SimAuth {
        self.anonymous = on;
        self
    }

    /// Users or groups that may write, besides `system:masters`.
    pub fn writers(mut self, names: &[&str]) -> SimAuth {
        self.writers = names.iter().map(|n| n.to_string()).collect();
        self
    }

    /// Users or groups that may update a `status` subresource but not get it, as RBAC grants a
    /// controller (kube-controller-manager's replicaset-controller: `update` on
    /// `replicasets/status`, no `get`; found with the real one through skewgate's guard).
    pub fn status_writers(mut self, names: &[&str]) -> SimAuth {
        self.status_writers = names.iter().map(|n| n.to_string()).collect();
        self
    }

    /// A serving configuration that asks every client for a certificate and takes any, as
    /// kube-apiserver's TLS listener does (`tls.RequestClientCert`): the authenticators verify it
    /// per request, so that a certificate from an unknown CA is an authentication error (401), not a
    /// failed handshake. The client still proves it holds the certificate's key.
    pub fn tls_config(cert_pem: &str, key_pem: &str) -> Result<Arc<ServerConfig>, String> {
        let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("certificate: {e}"))?;
        let key =
            PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| format!("key: {e}"))?;
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(Arc::new(RequestAnyCert {
                algorithms: provider().signature_verification_algorithms,
            }))
            .with_single_cert(certs, key)
            .map_err(|e| e.to_string())?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// What the connection's certificate (if any) proves, computed once at the handshake.
    pub(crate) fn connection(&self, chain: Option<&[CertificateDer<'static>]>) -> ConnAuth {
        let Some((leaf, intermediates)) = chain.and_then(|c| c.split_first()) else {
            return ConnAuth::default();
        };
        let now = UnixTime::now();
        let verify = |v: &Arc<dyn ClientCertVerifier>| {
            v.verify_client_cert(leaf, intermediates, now)
                .map(|_| ())
                .map_err(|e| format!("x509: certificate signed by unknown authority: {e}"))
        };
        let subject = subject(leaf);
        let front_proxy = self.requestheader.as_ref().map(|rh| {
            verify(&rh.verifier)?;
            let cn = subject.as_ref().map_or("", |(cn, _)| cn.as_str());
            if rh.allowed_names.is_empty() || rh.allowed_names.iter().any(|n| n == cn) {
                Ok(())
            } else {
                Err(format!(
                    "x509: subject with cn={cn} is not in the allowed list"
                ))
            }
        });
        let x509 = self.client_ca.as_ref().map(|v| {
            verify(v)?;
            Ok(subject
                .as_ref()
                .filter(|(cn, _)| !cn.is_empty())
                .map(|(cn, orgs)| UserInfo::new(cn, orgs)))
        });
        ConnAuth { front_proxy, x509 }
    }

    /// The union of authenticators for one request: the user, or the reason for a 401.
    pub(crate) fn authenticate(
        &self,
        conn: &ConnAuth,
        headers: &HeaderMap,
    ) -> Result<UserInfo, String> {
        let mut errors = Vec::new();
        if let (Some(rh), Some(verified)) = (&self.requestheader, &conn.front_proxy) {
            match verified {
                Err(e) => errors.push(e.clone()),
                Ok(()) => {
                    if let Some(user) = from_headers(rh, headers) {
                        return Ok(user.authenticated());
                    }
                }
            }
        }
        match &conn.x509 {
            Some(Err(e)) => errors.push(e.clone()),
            Some(Ok(Some(user))) => return Ok(user.clone().authenticated()),
            _ => {}
        }
        if let Some(token) = bearer(headers) {
            match self.tokens.get(token) {
                Some(user) => return Ok(user.clone().authenticated()),
                None => errors.push("invalid bearer token".to_owned()),
            }
        }
        if !errors.is_empty() {
            return Err(errors.join("; "));
        }
        if self.anonymous {
            return Ok(UserInfo::anonymous());
        }
        Err("no credentials and anonymous auth is off".to_owned())
    }

    fn may_only_write_status(&self, user: &UserInfo) -> bool {
        self.status_writers
            .iter()
            .any(|w| *w == user.name || user.in_group(w))
    }

    /// Whether `user` may do this request; the 403 message when not.
    pub(crate) fn authorize(
        &self,
        user: &UserInfo,
        method: &Method,
        path: &str,
    ) -> Result<(), String> {
        if user.in_group("system:masters") {
            return Ok(());
        }
        let public = matches!(path, "/healthz" | "/livez" | "/readyz" | "/version" | "/version/")
            || ["/healthz/", "/livez/", "/readyz/"].iter().any(|p| path.starts_with(p))
            // A fixture of the simulator, not an apiserver path.
            || path == "/debug/headers";
        if public {
            return Ok(());
        }
        let resource = resource_of(path);
        let reading = *method == Method::GET || *method == Method::HEAD;
        let allowed = match &resource {
            None => !user.is_anonymous() && is_discovery(path) && reading,
            Some(r) if user.is_anonymous() => {
                reading
                    && r.namespace == "kube-public"
                    && r.resource == "configmaps"
                    && r.name == "cluster-info"
            }
            Some(r)
                if r.resource == "selfsubjectreviews" || r.resource == "subjectaccessreviews" =>
            {
                *method == Method::POST
            }
            Some(r) if r.subresource == "status" && self.may_only_write_status(user) => !reading,
            Some(_) if reading => true,
            Some(_) => self
                .writers
                .iter()
                .any(|w| *w == user.name || user.in_group(w)),
        };
        if allowed {
            return Ok(());
        }
        Err(match resource {
            None => format!(
                "forbidden: User \"{}\" cannot {} path \"{path}\"",
                user.name,
                method.as_str().to_ascii_lowercase()
            ),
            Some(r) => {
                let verb = match *method {
                    Method::GET | Method::HEAD => "get",
                    Method::POST => "create",
                    Method::PUT => "update",
                    Method::PATCH => "patch",
                    Method::DELETE => "delete",
                    _ => "use",
                };
                let scope = if r.namespace.is_empty() {
                    "at the cluster scope".to_owned()
                } else {
                    format!("in the namespace \"{}\"", r.namespace)
                };
                let dotted = if r.group.is_empty() {
                    r.resource.to_owned()
                } else {
                    format!("{}.{}", r.resource, r.group)
                };
                format!(
                    "{dotted} is forbidden: User \"{}\" cannot {verb} resource \"{}\" in API group \"{}\" {scope}",
                    user.name, r.resource, r.group
                )
            }
        })
    }
}

/// What a connection's client certificate proves to each certificate authenticator.
#[derive(Debug, Default)]
pub(crate) struct ConnAuth {
    /// The request-header authenticator's verdict on the certificate (CA and allowed names).
    front_proxy: Option<Result<(), String>>,
    /// The x509 authenticator's: the user, none for a certificate without a CN, or its error.
    x509: Option<Result<Option<UserInfo>, String>>,
}

fn subject(leaf: &CertificateDer<'_>) -> Option<(String, Vec<String>)> {
    let (_, cert) = X509Certificate::from_der(leaf.as_ref()).ok()?;
    let s = cert.subject();
    let cn = s
        .iter_common_name()
        .next()
        .and_then(|c| c.as_str().ok())
        .unwrap_or("")
        .to_owned();
    let orgs = s
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .map(str::to_owned)
        .collect();
    Some((cn, orgs))
}

fn from_headers(rh: &RequestHeader, headers: &HeaderMap) -> Option<UserInfo> {
    let name = rh
        .username_headers
        .iter()
        .find_map(|h| headers.get(h).and_then(|v| v.to_str().ok()))
        .filter(|n| !n.is_empty())?;
    let groups: Vec<String> = rh
        .group_headers
        .iter()
        .flat_map(|h| headers.get_all(h).iter())
        .filter_map(|v| v.to_str().ok())
        .map(str::to_owned)
        .collect();
    let mut user = UserInfo::new(name, &groups);
    for (k, v) in headers {
        if let Some(p) = rh
            .extra_prefixes
            .iter()
            .find(|p| k.as_str().starts_with(p.as_str()))
            && let Ok(v) = v.to_str()
        {
            user.extra
                .push((k.as_str()[p.len()..].to_owned(), v.to_owned()));
        }
    }
    Some(user)
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers
        .get(http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .trim();
    let (scheme, token) = value.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token.trim())
}

/// The discovery and OpenAPI paths that `system:discovery` grants.
fn is_discovery(path: &str) -> bool {
    ["/api", "/apis", "/openapi"]
        .iter()
        .any(|p| path == *p || path.starts_with(&format!("{p}/")))
}

struct ResourcePath<'a> {
    group: &'a str,
    namespace: &'a str,
    resource: &'a str,
    name: &'a str,
    subresource: &'a str,
}

/// The group, namespace, resource and name of a resource path; `None` for discovery and others.
fn resource_of(path: &str) -> Option<ResourcePath<'_>> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match segments.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (*ns, rest),
        _ => ("", rest),
    };
    let resource = rest.first()?;
    Some(ResourcePath {
        group,
        namespace,
        resource,
        name: rest.get(1).copied().unwrap_or(""),
        subresource: rest.get(2).copied().unwrap_or(""),
    })
}

/// Asks for a client certificate and accepts any: verification is the authenticators' job.
#[derive(Debug)]
struct RequestAnyCert {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for RequestAnyCert {
    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Why the apiserver refuses a request: 401 (no authenticator succeeded) or 403 (not authorized).
#[derive(Debug)]
pub(crate) struct Denied {
    /// 401 or 403.
    pub code: u16,
    /// `Unauthorized` or `Forbidden`.
    pub reason: &'static str,
    /// The Status message.
    pub message: String,
}

/// The user a request is served as, or why the apiserver refuses it. Without `auth`, everyone is
/// `system:unsecured` in `system:masters`.
pub(crate) fn admit<B>(
    auth: Option<&SimAuth>,
    conn: Option<&ConnAuth>,
    req: &http::Request<B>,
) -> Result<Arc<UserInfo>, Denied> {
    let Some(auth) = auth else {
        return Ok(Arc::new(UserInfo::new(
            "system:unsecured",
            &[
                "system:masters".to_owned(),
                "system:authenticated".to_owned(),
            ],
        )));
    };
    let empty = ConnAuth::default();
    let user = auth
        .authenticate(conn.unwrap_or(&empty), req.headers())
        .map_err(|why| {
            tracing::debug!(%why, path = req.uri().path(), "simulated apiserver: 401");
            Denied {
                code: 401,
                reason: "Unauthorized",
                message: "Unauthorized".to_owned(),
            }
        })?;
    auth.authorize(&user, req.method(), req.uri().path())
        .map_err(|message| Denied {
            code: 403,
            reason: "Forbidden",
            message,
        })?;
    Ok(Arc::new(user))
}

#[cfg(test)]
mod tests {
    use http::Method;

    use super::{SimAuth, UserInfo};

    #[test]
    fn a_status_writer_updates_status_but_cannot_get_it() {
        let auth = SimAuth::new()
            .writers(&["controllers"])
            .status_writers(&["controllers"]);
        let rs =
            UserInfo::new("replicaset-controller", &["controllers".to_owned()]).authenticated();
        let status = "/apis/apps/v1/namespaces/a/replicasets/web/status";
        let object = "/apis/apps/v1/namespaces/a/replicasets/web";
        assert!(auth.authorize(&rs, &Method::PUT, status).is_ok());
        let refused = auth.authorize(&rs, &Method::GET, status).expect_err("403");
        assert!(refused.contains("cannot get"), "{refused}");
        assert!(auth.authorize(&rs, &Method::GET, object).is_ok());
        // Everyone else reads a status as before.
        let other = UserInfo::new("alice", &[]).authenticated();
        assert!(auth.authorize(&other, &Method::GET, status).is_ok());
    }
}
