//! The HTTP call: one request to the configured endpoint, its answer read within the
//! total timeout. The client is hyper's (the one the AWS SDK links) over rustls with
//! the system's roots: no OpenSSL. `https://` is required, `http://` only on a
//! loopback host (tests, the local stack). Redirects are not followed.

use crate::classify::{HttpAnswer, Transport};
use crate::secret::Secret;
use domain::Request;
use http::header::{CONTENT_TYPE, HOST};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

/// The placeholder a path may hold.
pub const TRANSACTION_ID: &str = "{transaction_id}";

/// At most this many bytes of an answer's body are read (enough for a body rule and
/// a reason; the rest is not waited for).
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// What a call needs to know beyond the request: the parts of the configuration the
/// bridge checked at start-up.
#[derive(Debug, Clone)]
pub struct Target {
    pub method: Method,
    /// The endpoint, `{transaction_id}` still in it.
    pub endpoint: String,
    pub headers: HeaderMap,
    pub idempotency_header: HeaderName,
    pub auth_header: HeaderName,
}

/// A target that cannot be called: the setting at fault (`field`), its value and why.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{field}={value:?} is invalid: {reason}")]
pub struct TargetError {
    pub field: &'static str,
    pub value: String,
    pub reason: String,
}

impl Target {
    /// Checks an endpoint: a URL once `{transaction_id}` is filled in, `https://`
    /// or `http://` on a loopback host.
    pub fn check_endpoint(field: &'static str, endpoint: &str) -> Result<(), TargetError> {
        let refuse = |reason: String| TargetError {
            field,
            value: endpoint.to_owned(),
            reason,
        };
        let uri: Uri = endpoint
            .replace(TRANSACTION_ID, "TX-1")
            .parse()
            .map_err(|e: http::uri::InvalidUri| refuse(e.to_string()))?;
        let host = uri.host().unwrap_or("");
        if host.is_empty() {
            return Err(refuse("has no host".into()));
        }
        match uri.scheme_str() {
            Some("https") => Ok(()),
            Some("http") if is_loopback(host) => Ok(()),
            Some("http") => Err(refuse(
                "must be https:// (http:// only to a loopback host)".into(),
            )),
            _ => Err(refuse("must be an https:// URL".into())),
        }
    }

    /// The URL for a transaction: its id percent-encoded into the path.
    pub fn url(&self, request: &Request) -> Result<Uri, String> {
        self.endpoint
            .replace(
                TRANSACTION_ID,
                &percent_encode(request.transaction_id.as_str()),
            )
            .parse()
            .map_err(|e: http::uri::InvalidUri| format!("URL for this transaction id: {e}"))
    }
}

fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Every byte but the URL's unreserved characters as `%XX`.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// An answer as received (at most [`MAX_ANSWER_BYTES`] of its body).
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn answer(&self) -> HttpAnswer<'_> {
        HttpAnswer {
            status: self.status,
            headers: &self.headers,
            body: &self.body,
        }
    }
}

/// Why a request could not even be built (not a call failure).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Unsendable {
    /// The request as it is can never go out (its id makes no URL or header).
    #[error("the request cannot be sent over HTTP: {0}")]
    Request(String),
    /// The auth secret's value is not a header value: every request waits for it.
    #[error("the auth secret's value cannot be sent in header {0}")]
    Secret(String),
}

/// The HTTP client with its target and timeouts, built once per process.
#[derive(Debug, Clone)]
pub struct Caller {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    target: Target,
    timeout: Duration,
}

impl Caller {
    /// A client that connects within `connect_timeout` and answers within `timeout`.
    pub fn new(
        target: Target,
        connect_timeout: Duration,
        timeout: Duration,
    ) -> Result<Self, std::io::Error> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(connect_timeout));
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(provider)?
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new()).build(https);
        Ok(Self {
            client,
            target,
            timeout,
        })
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The HTTP request for `request`: the payload's bytes unchanged, the key, the
    /// static headers, the auth header.
    pub fn build(
        &self,
        request: &Request,
        auth: Option<&Secret>,
    ) -> Result<http::Request<Full<Bytes>>, Unsendable> {
        let t = &self.target;
        let uri = t.url(request).map_err(Unsendable::Request)?;
        let key = HeaderValue::from_bytes(request.idempotency_key.as_str().as_bytes())
            .map_err(|e| Unsendable::Request(format!("{}: {e}", t.idempotency_header)))?;
        let mut builder = http::Request::builder().method(t.method.clone()).uri(uri);
        let headers = builder
            .headers_mut()
            .ok_or_else(|| Unsendable::Request("request".into()))?;
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        for (name, value) in &t.headers {
            headers.insert(name.clone(), value.clone());
        }
        headers.insert(t.idempotency_header.clone(), key);
        if let Some(secret) = auth {
            let mut value = HeaderValue::from_str(secret.expose())
                .map_err(|_| Unsendable::Secret(t.auth_header.to_string()))?;
            value.set_sensitive(true);
            headers.insert(t.auth_header.clone(), value);
        }
        headers.remove(HOST);
        let body = Full::new(Bytes::copy_from_slice(request.payload.as_json().as_bytes()));
        builder
            .body(body)
            .map_err(|e| Unsendable::Request(e.to_string()))
    }

    /// Sends `http` and reads its answer, all within the total timeout.
    pub async fn send(&self, http: http::Request<Full<Bytes>>) -> Result<Reply, Transport> {
        match tokio::time::timeout(self.timeout, self.exchange(http)).await {
            Ok(result) => result,
            Err(_) => Err(Transport::Timeout),
        }
    }

    async fn exchange(&self, http: http::Request<Full<Bytes>>) -> Result<Reply, Transport> {
        let response = self.client.request(http).await.map_err(|e| {
            let detail = chain(&e);
            // A TLS failure counts as one only while connecting (the handshake,
            // before the request is sent); after it, the request may have gone.
            match (e.is_connect(), has_tls_error(&e)) {
                (true, true) => Transport::Tls(detail),
                (true, false) => Transport::Connect(detail),
                (false, _) => Transport::Other(detail),
            }
        })?;
        let (parts, mut body) = response.into_parts();
        let mut bytes = Vec::new();
        while bytes.len() < MAX_ANSWER_BYTES {
            match body.frame().await {
                None => break,
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        let room = MAX_ANSWER_BYTES - bytes.len();
                        bytes.extend_from_slice(&data[..data.len().min(room)]);
                    }
                }
                Some(Err(e)) => return Err(Transport::Other(format!("answer body: {e}"))),
            }
        }
        Ok(Reply {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: Bytes::from(bytes),
        })
    }
}

/// An error and its sources, `: `-separated.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn has_tls_error(e: &hyper_util::client::legacy::Error) -> bool {
    let mut source = e.source();
    while let Some(s) = source {
        if s.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if io
                .get_ref()
                .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some())
            {
                return true;
            }
        }
        source = s.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_must_be_https_except_on_loopback() {
        let ok = |e: &str| Target::check_endpoint("HTTP_ENDPOINT", e);
        assert!(ok("https://api.example.com/v1/payments").is_ok());
        assert!(ok("https://api.example.com/v1/payments/{transaction_id}/capture").is_ok());
        assert!(ok("http://127.0.0.1:8080/pay").is_ok());
        assert!(ok("http://localhost/pay").is_ok());
        assert!(ok("http://[::1]:9/pay").is_ok());
        let e = ok("http://api.example.com/pay").unwrap_err();
        assert_eq!(e.field, "HTTP_ENDPOINT");
        assert_eq!(e.value, "http://api.example.com/pay");
        assert!(e.reason.contains("https"), "{e}");
        assert!(e
            .to_string()
            .starts_with("HTTP_ENDPOINT=\"http://api.example.com/pay\""));
        assert!(ok("ftp://127.0.0.1/x").is_err());
        assert!(ok("/relative/path").is_err());
        assert!(ok("https://exa mple.com/").is_err());
        assert!(ok("").is_err());
    }

    #[test]
    fn ids_are_percent_encoded_into_the_path() {
        assert_eq!(percent_encode("TX-1_a.b~c"), "TX-1_a.b~c");
        assert_eq!(percent_encode("a/b c#?é"), "a%2Fb%20c%23%3F%C3%A9");
    }
}
