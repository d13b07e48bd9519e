//! What the [`crate::proxy::Proxy`] injects: faults at the AWS API boundary, per call,
//! seeded and reproducible. Each call is matched to its rates by `service:Operation`
//! (`dynamodb:UpdateItem`), else by its service (`sqs`); a call matching neither passes
//! untouched. For each call the injector draws the same six numbers from a generator of
//! its own operation (seeded with the run's seed and the operation's name), so one seed
//! gives one sequence of decisions per operation, however operations interleave. Faults
//! ([`FaultKind`]): **throttle** or **5xx** (500, 503) before applying; **lost
//! response**: applied, then the connection closed without an answer, at once or (a
//! [`Faults::stall_share`]) after holding it for [`Faults::stall`], past the client's
//! attempt timeout; **latency** up to [`Faults::latency`], on top of any of these. See
//! `docs/verification.md#chaos-at-the-aws-api-boundary`.

use domain::policy::SplitMix64;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;
use strum::{IntoStaticStr, VariantArray};

/// `[("name", s.name), …]`: the probabilities of a rates struct by name, each written once.
macro_rules! named {
    ($s:ident: $($f:ident),+) => {
        [$((stringify!($f), $s.$f)),+]
    };
}

/// The probabilities of one operation (or of every operation of a service).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Rates {
    pub throttle: f64,
    pub server_error: f64,
    pub lost_response: f64,
    pub latency: f64,
    /// At most this many faults (latency aside) for the operation, then none: a
    /// deterministic test faults exactly its first call with probability 1 and
    /// `limit: 1`. `None`: no limit.
    pub limit: Option<u64>,
}

impl Rates {
    fn fields(&self) -> [(&'static str, f64); 4] {
        named!(self: throttle, server_error, lost_response, latency)
    }
}

/// Faults of the local stack's processes, what AWS runs around the functions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProcessRates {
    /// An invocation killed mid-batch, as a Lambda timeout or out-of-memory kills it:
    /// no batch response, every record of the batch back after the visibility timeout.
    pub kill_invocation: f64,
    /// A schedule delivered late, by up to `late_ms`.
    pub fire_late: f64,
    /// A schedule delivered twice.
    pub fire_twice: f64,
    /// A schedule never delivered (the reconciler rescues its transaction).
    pub never_fire: f64,
    pub late_ms: u64,
}

impl ProcessRates {
    fn fields(&self) -> [(&'static str, f64); 4] {
        named!(self: kill_invocation, fire_late, fire_twice, never_fire)
    }
}

/// A kind of injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
#[derive(IntoStaticStr, VariantArray)]
#[strum(serialize_all = "kebab-case")]
pub enum FaultKind {
    Throttle,
    #[strum(serialize = "5xx")]
    ServerError,
    LostResponse,
    Latency,
}

impl FaultKind {
    /// Every variant, in declaration order.
    pub const ALL: &'static [FaultKind] = <Self as VariantArray>::VARIANTS;

    pub fn label(self) -> &'static str {
        self.into()
    }
}

/// What the proxy injects, and with which seed (the run's, never a file's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Faults {
    #[serde(skip)]
    pub seed: u64,
    /// `service:Operation` or `service` → its rates.
    #[serde(default)]
    pub rates: BTreeMap<String, Rates>,
    /// The most latency added to a call (drawn uniformly up to it).
    #[serde(with = "millis", rename = "latency_ms", default)]
    pub latency: Duration,
    /// How long a stalled lost response holds the connection before closing it.
    /// Longer than a client's attempt timeout, the client times out first.
    #[serde(with = "millis", rename = "stall_ms", default)]
    pub stall: Duration,
    /// The share of lost responses that stall (the others close at once).
    #[serde(default)]
    pub stall_share: f64,
    /// Faults of the local stack's processes (the proxy ignores them).
    #[serde(default)]
    pub process: ProcessRates,
}

mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

/// The services whose errors the proxy can speak.
pub const SERVICES: [&str; 3] = ["dynamodb", "sqs", "scheduler"];

/// The operations that change something, whose answer can be lost after they applied.
pub const MUTATING: [&str; 5] = [
    "dynamodb:UpdateItem",
    "dynamodb:TransactWriteItems",
    "scheduler:CreateSchedule",
    "scheduler:DeleteSchedule",
    "sqs:SendMessage",
];

/// An invalid [`Faults`]: the field, its value and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field} = {value}: {why}")]
pub struct FaultsError {
    pub field: String,
    pub value: String,
    pub why: String,
}

/// The named profiles of [`Faults::profile`].
pub const PROFILES: [&str; 2] = ["light", "heavy"];

impl Faults {
    /// No fault at all (the proxy records only).
    pub fn none(seed: u64) -> Self {
        Self {
            seed,
            rates: BTreeMap::new(),
            latency: Duration::ZERO,
            stall: Duration::ZERO,
            stall_share: 0.0,
            process: ProcessRates::default(),
        }
    }

    /// A named profile: `light` (a few percent of calls faulted) or `heavy` (about one
    /// mutating call in five faulted, a tenth of lost answers stalled past the client's
    /// attempt timeout); every read faulted less, never lost.
    pub fn profile(name: &str, seed: u64) -> Option<Self> {
        let (p, latency, stall_share, kill) = match name {
            "light" => (0.02, Duration::from_millis(100), 0.0, 0.02),
            "heavy" => (0.06, Duration::from_millis(250), 0.1, 0.1),
            _ => return None,
        };
        let reads = Rates {
            throttle: p / 2.0,
            server_error: p / 2.0,
            lost_response: 0.0,
            latency: 2.0 * p,
            limit: None,
        };
        let writes = Rates {
            throttle: p,
            server_error: p,
            lost_response: p,
            latency: 2.0 * p,
            limit: None,
        };
        let mut faults = Self::none(seed);
        for service in SERVICES {
            faults = faults.with(service, reads);
        }
        for op in MUTATING {
            faults = faults.with(op, writes);
        }
        // Operator resolves are rare: their deletes are faulted more often.
        let rare = Rates {
            throttle: 4.0 * p,
            server_error: 4.0 * p,
            lost_response: 4.0 * p,
            ..writes
        };
        faults = faults.with("scheduler:DeleteSchedule", rare);
        faults.latency = latency;
        // Past every client's attempt timeout (5 s at most).
        faults.stall = Duration::from_millis(5_500);
        faults.stall_share = stall_share;
        faults.process = ProcessRates {
            kill_invocation: kill,
            fire_late: p,
            fire_twice: p,
            never_fire: p / 2.0,
            late_ms: 3_000,
        };
        Some(faults)
    }

    /// Faults from a JSON document (the fields of [`Faults`] but the seed), validated.
    pub fn from_json(text: &str, seed: u64) -> Result<Self, FaultsError> {
        let mut faults: Faults = serde_json::from_str(text).map_err(|e| FaultsError {
            field: "document".into(),
            value: format!("line {} column {}", e.line(), e.column()),
            why: e.to_string(),
        })?;
        faults.seed = seed;
        faults.validate()?;
        Ok(faults)
    }

    /// Faults from a TOML document, the same fields as [`Faults::from_json`]:
    ///
    /// ```toml
    /// latency_ms = 200
    /// [rates."dynamodb:UpdateItem"]
    /// lost_response = 0.1
    /// [process]
    /// never_fire = 0.05
    /// ```
    pub fn from_toml(text: &str, seed: u64) -> Result<Self, FaultsError> {
        let doc: toml_edit::Document<String> =
            text.parse()
                .map_err(|e: toml_edit::TomlError| FaultsError {
                    field: "document".into(),
                    value: e
                        .span()
                        .map_or_else(String::new, |s| format!("bytes {}..{}", s.start, s.end)),
                    why: e.message().to_owned(),
                })?;
        let json = toml_table(doc.as_table().iter());
        Self::from_json(&json.to_string(), seed).map_err(|mut e| {
            if e.field == "document" {
                // The position is in the JSON twin: meaningless in the TOML.
                e.value = "the TOML document".into();
            }
            e
        })
    }

    /// The same faults with `rates` for `key` (`service` or `service:Operation`).
    pub fn with(mut self, key: &str, rates: Rates) -> Self {
        self.rates.insert(key.to_owned(), rates);
        self
    }

    /// Checks every key and probability; the error names the field and its value.
    pub fn validate(&self) -> Result<(), FaultsError> {
        probability("stall_share".into(), self.stall_share)?;
        for (name, p) in self.process.fields() {
            probability(format!("process.{name}"), p)?;
        }
        for (key, rates) in &self.rates {
            let service = key.split(':').next().unwrap_or_default();
            if !SERVICES.contains(&service) || key.ends_with(':') {
                return Err(FaultsError {
                    field: "rates".into(),
                    value: format!("{key:?}"),
                    why: "keys are `service` or `service:Operation`, service one of dynamodb, sqs, scheduler".into(),
                });
            }
            for (name, p) in rates.fields() {
                probability(format!("rates.{key:?}.{name}"), p)?;
            }
        }
        Ok(())
    }

    /// The rates of a call: its operation's, else its service's.
    pub fn rates_for(&self, service: &str, operation: &str) -> Option<&Rates> {
        self.rates
            .get(&format!("{service}:{operation}"))
            .or_else(|| self.rates.get(service))
    }
}

/// `p` a probability, else the error naming `field` and its value.
fn probability(field: String, p: f64) -> Result<(), FaultsError> {
    if p.is_finite() && (0.0..=1.0).contains(&p) {
        Ok(())
    } else {
        Err(FaultsError {
            field,
            value: p.to_string(),
            why: "must be a probability between 0 and 1".into(),
        })
    }
}

/// What to do with one call before and after forwarding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answer a throttling error without forwarding; `alternate` picks the second
    /// code where a service has two (DynamoDB's `ThrottlingException`).
    Throttle { alternate: bool },
    /// Answer this 5xx status without forwarding.
    ServerError { status: u16 },
    /// Forward, then close the connection without an answer; `stall`: only after
    /// holding it for [`Faults::stall`].
    LoseResponse { stall: bool },
}

/// The decision for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Decision {
    pub fault: Option<Fault>,
    pub delay: Duration,
}

/// Faults, one generator per operation, and the tally of what was injected.
#[derive(Debug)]
pub struct Injector {
    faults: Faults,
    streams: Mutex<HashMap<String, SplitMix64>>,
    tally: Mutex<BTreeMap<(String, FaultKind), u64>>,
}

/// FNV-1a of an operation's key: its generator's seed, mixed with the run's.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl Injector {
    pub fn new(faults: Faults) -> Self {
        Self {
            faults,
            streams: Mutex::default(),
            tally: Mutex::default(),
        }
    }

    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Decides for the next call of `service:operation`, and counts what it injects.
    pub fn decide(&self, service: &str, operation: &str) -> Decision {
        let Some(rates) = self.faults.rates_for(service, operation).copied() else {
            return Decision::default();
        };
        let key = format!("{service}:{operation}");
        let draws: [f64; 6] = {
            let Ok(mut streams) = self.streams.lock() else {
                return Decision::default();
            };
            let g = streams
                .entry(key.clone())
                .or_insert_with(|| SplitMix64::new(self.faults.seed ^ fnv1a(&key)));
            std::array::from_fn(|_| unit(g))
        };
        let [throttle, error, lost, latency, variant, amount] = draws;
        let injected = |t: &BTreeMap<(String, FaultKind), u64>| -> u64 {
            [
                FaultKind::Throttle,
                FaultKind::ServerError,
                FaultKind::LostResponse,
            ]
            .iter()
            .filter_map(|k| t.get(&(key.clone(), *k)))
            .sum()
        };
        let spent = rates
            .limit
            .is_some_and(|limit| self.tally.lock().map(|t| injected(&t)).unwrap_or(0) >= limit);
        let fault = if spent {
            None
        } else if throttle < rates.throttle {
            Some(Fault::Throttle {
                alternate: variant < 0.5,
            })
        } else if error < rates.server_error {
            Some(Fault::ServerError {
                status: if variant < 0.5 { 500 } else { 503 },
            })
        } else if lost < rates.lost_response {
            Some(Fault::LoseResponse {
                stall: !self.faults.stall.is_zero() && variant < self.faults.stall_share,
            })
        } else {
            None
        };
        let delay = if latency < rates.latency {
            self.faults.latency.mul_f64(amount)
        } else {
            Duration::ZERO
        };
        let decision = Decision { fault, delay };
        let kinds = fault
            .map(|f| match f {
                Fault::Throttle { .. } => FaultKind::Throttle,
                Fault::ServerError { .. } => FaultKind::ServerError,
                Fault::LoseResponse { .. } => FaultKind::LostResponse,
            })
            .into_iter()
            .chain((latency < rates.latency).then_some(FaultKind::Latency));
        if let Ok(mut t) = self.tally.lock() {
            for kind in kinds {
                *t.entry((key.clone(), kind)).or_insert(0) += 1;
            }
        }
        decision
    }

    /// What was injected so far: (`service:Operation`, kind) → count.
    pub fn tally(&self) -> BTreeMap<(String, FaultKind), u64> {
        self.tally.lock().map(|t| t.clone()).unwrap_or_default()
    }
}

/// A TOML table as JSON (dates as their text).
fn toml_table<'a>(
    entries: impl Iterator<Item = (&'a str, &'a toml_edit::Item)>,
) -> serde_json::Value {
    serde_json::Value::Object(entries.map(|(k, v)| (k.to_owned(), toml_item(v))).collect())
}

fn toml_item(item: &toml_edit::Item) -> serde_json::Value {
    use toml_edit::Item;
    match item {
        Item::None => serde_json::Value::Null,
        Item::Value(v) => toml_value(v),
        Item::Table(t) => toml_table(t.iter()),
        Item::ArrayOfTables(a) => a.iter().map(|t| toml_table(t.iter())).collect(),
    }
}

fn toml_value(v: &toml_edit::Value) -> serde_json::Value {
    use serde_json::Value as J;
    use toml_edit::Value as T;
    match v {
        T::String(s) => J::from(s.value().clone()),
        T::Integer(i) => J::from(*i.value()),
        T::Float(f) => J::from(*f.value()),
        T::Boolean(b) => J::from(*b.value()),
        T::Datetime(d) => J::from(d.value().to_string()),
        T::Array(a) => a.iter().map(toml_value).collect(),
        T::InlineTable(t) => J::Object(
            t.iter()
                .map(|(k, v)| (k.to_owned(), toml_value(v)))
                .collect(),
        ),
    }
}

fn unit(g: &mut SplitMix64) -> f64 {
    (g.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// The raw HTTP answer a service gives for an injected error, as its SDK parses it:
/// DynamoDB and SQS speak JSON 1.0 (`__type`; SQS adds its query-compatible code in
/// `x-amzn-query-error`), EventBridge Scheduler REST JSON (`x-amzn-errortype`).
pub fn error_response(service: &str, fault: Fault) -> Vec<u8> {
    let (status, code, reason) = match (service, fault) {
        ("dynamodb", Fault::Throttle { alternate: false }) => {
            (400, "ProvisionedThroughputExceededException", "Bad Request")
        }
        ("dynamodb", Fault::Throttle { alternate: true }) => {
            (400, "ThrottlingException", "Bad Request")
        }
        ("sqs", Fault::Throttle { .. }) => (400, "RequestThrottled", "Bad Request"),
        (_, Fault::Throttle { .. }) => (429, "ThrottlingException", "Too Many Requests"),
        ("dynamodb", Fault::ServerError { status: 500 }) => {
            (500, "InternalServerError", "Internal Server Error")
        }
        ("sqs", Fault::ServerError { status: 500 }) => {
            (500, "InternalError", "Internal Server Error")
        }
        (_, Fault::ServerError { status: 500 }) => {
            (500, "InternalServerException", "Internal Server Error")
        }
        (_, Fault::ServerError { .. } | Fault::LoseResponse { .. }) => {
            (503, "ServiceUnavailable", "Service Unavailable")
        }
    };
    let message = "injected by the fault proxy";
    let (content_type, extra, body) = match service {
        "dynamodb" => (
            "application/x-amz-json-1.0",
            String::new(),
            format!(
                r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{code}","message":"{message}"}}"#
            ),
        ),
        "sqs" => (
            "application/x-amz-json-1.0",
            format!("x-amzn-query-error: {code};Sender\r\n"),
            format!(r#"{{"__type":"com.amazonaws.sqs#{code}","message":"{message}"}}"#),
        ),
        _ => (
            "application/json",
            format!("x-amzn-errortype: {code}\r\n"),
            format!(r#"{{"Message":"{message}"}}"#),
        ),
    };
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nx-amzn-RequestId: fault-proxy\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every(p: f64) -> Rates {
        Rates {
            throttle: p,
            server_error: p,
            lost_response: p,
            latency: p,
            limit: None,
        }
    }

    #[test]
    fn one_seed_gives_one_sequence_per_operation_whatever_the_interleaving() {
        let faults = Faults::none(42).with("dynamodb", every(0.3));
        let (a, b) = (Injector::new(faults.clone()), Injector::new(faults));
        let alone: Vec<Decision> = (0..50)
            .map(|_| a.decide("dynamodb", "UpdateItem"))
            .collect();
        let mixed: Vec<Decision> = (0..50)
            .map(|_| {
                b.decide("dynamodb", "GetItem");
                b.decide("dynamodb", "UpdateItem")
            })
            .collect();
        assert_eq!(alone, mixed);
        assert!(alone.iter().any(|d| d.fault.is_some()));
        assert!(alone.iter().any(|d| d.fault.is_none()));
        let other = Injector::new(Faults::none(43).with("dynamodb", every(0.3)));
        let reseeded: Vec<Decision> = (0..50)
            .map(|_| other.decide("dynamodb", "UpdateItem"))
            .collect();
        assert_ne!(alone, reseeded, "another seed, another sequence");
    }

    #[test]
    fn the_operation_rates_win_over_the_service_and_the_tally_counts_each_kind() {
        let i = Injector::new(Faults::none(1).with("sqs", Rates::default()).with(
            "sqs:SendMessage",
            Rates {
                lost_response: 1.0,
                latency: 1.0,
                ..Rates::default()
            },
        ));
        for _ in 0..3 {
            assert_eq!(
                i.decide("sqs", "SendMessage").fault,
                Some(Fault::LoseResponse { stall: false })
            );
            assert_eq!(i.decide("sqs", "ReceiveMessage"), Decision::default());
        }
        assert_eq!(i.decide("dynamodb", "UpdateItem"), Decision::default());
        let t = i.tally();
        assert_eq!(
            t.get(&("sqs:SendMessage".into(), FaultKind::LostResponse)),
            Some(&3)
        );
        assert_eq!(
            t.get(&("sqs:SendMessage".into(), FaultKind::Latency)),
            Some(&3)
        );
        assert_eq!(t.len(), 2, "{t:?}");
    }

    #[test]
    fn a_limit_stops_the_faults_of_its_operation_once_reached() {
        let once = Rates {
            server_error: 1.0,
            limit: Some(1),
            ..Rates::default()
        };
        let i = Injector::new(Faults::none(5).with("scheduler:CreateSchedule", once));
        assert!(i.decide("scheduler", "CreateSchedule").fault.is_some());
        for _ in 0..5 {
            assert_eq!(i.decide("scheduler", "CreateSchedule").fault, None);
        }
        assert_eq!(i.tally().values().sum::<u64>(), 1);
    }

    #[test]
    fn the_profiles_fault_every_mutating_operation_and_files_are_checked() {
        for name in PROFILES {
            let f = Faults::profile(name, 9).unwrap();
            assert!(f.validate().is_ok(), "{name}");
            for op in MUTATING {
                let (service, operation) = op.split_once(':').unwrap();
                let r = f.rates_for(service, operation).unwrap();
                assert!(r.throttle > 0.0 && r.server_error > 0.0, "{name} {op}");
                assert!(r.lost_response > 0.0 && r.latency > 0.0, "{name} {op}");
            }
            assert_eq!(
                f.rates_for("dynamodb", "GetItem").unwrap().lost_response,
                0.0
            );
        }
        assert!(Faults::profile("medium", 1).is_none());
        let f = Faults::from_json(
            r#"{"rates":{"sqs":{"throttle":0.5}},"latency_ms":20,"stall_ms":0,"stall_share":0}"#,
            3,
        )
        .unwrap();
        assert_eq!((f.seed, f.latency), (3, Duration::from_millis(20)));
        assert_eq!(f.rates_for("sqs", "SendMessage").unwrap().throttle, 0.5);
        let e = Faults::from_json(r#"{"rates":{"sqs":{"throttel":0.5}}}"#, 3).unwrap_err();
        assert!(e.why.contains("throttel"), "{e}");
        let e = Faults::from_json(r#"{"rates":{"sqs":{"latency":2}}}"#, 3).unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.value.as_str()),
            (r#"rates."sqs".latency"#, "2")
        );
    }

    #[test]
    fn a_toml_file_reads_as_its_json_twin() {
        let toml = r#"
latency_ms = 20
stall_share = 0.5
[rates.sqs]
throttle = 0.5
[rates."dynamodb:UpdateItem"]
lost_response = 0.25
limit = 3
[process]
never_fire = 0.1
late_ms = 1000
"#;
        let json = r#"{"latency_ms":20,"stall_share":0.5,
            "rates":{"sqs":{"throttle":0.5},"dynamodb:UpdateItem":{"lost_response":0.25,"limit":3}},
            "process":{"never_fire":0.1,"late_ms":1000}}"#;
        assert_eq!(
            Faults::from_toml(toml, 4).unwrap(),
            Faults::from_json(json, 4).unwrap()
        );
        let e = Faults::from_toml("[process]\nnever_fire = 2.0\n", 4).unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.value.as_str()),
            ("process.never_fire", "2")
        );
        let e = Faults::from_toml("rates = [", 4).unwrap_err();
        assert_eq!(e.field, "document");
        let e = Faults::from_toml("[rates.sqs]\nthrottel = 0.1\n", 4).unwrap_err();
        assert!(e.why.contains("unknown field `throttel`"), "{e}");
        assert_eq!(e.value, "the TOML document");
    }

    #[test]
    fn validation_names_the_field_and_the_value() {
        let bad = Faults::none(1).with(
            "dynamodb:UpdateItem",
            Rates {
                throttle: 1.5,
                ..Rates::default()
            },
        );
        let e = bad.validate().unwrap_err();
        assert_eq!(e.field, r#"rates."dynamodb:UpdateItem".throttle"#);
        assert_eq!(e.value, "1.5");
        let e = Faults::none(1)
            .with("s3", Rates::default())
            .validate()
            .unwrap_err();
        assert_eq!((e.field.as_str(), e.value.as_str()), ("rates", "\"s3\""));
        assert!(Faults::none(1)
            .with("scheduler:CreateSchedule", every(1.0))
            .validate()
            .is_ok());
    }
}
