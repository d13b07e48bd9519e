//! A small offline evaluator of the IAM in `template.yaml`, for the statements the
//! template uses. No well-kept Rust crate evaluates IAM policies offline, so this one is
//! deliberately narrow and fails loudly on anything it does not model (`NotAction`,
//! `NotResource`, `NotPrincipal`, an unknown condition operator, an intrinsic it cannot
//! resolve). Three steps, each documented on its function: reading a template's
//! policies ([`Stack::from_template`], [`Stack::merge`]), the authorizations one API
//! call needs ([`Stack::requests_for`]), and the decision ([`Stack::evaluate`]). What
//! it proves about the deployed roles: `docs/deploy.md#least-privilege-as-deployed`.

use crate::cfn::{get, intrinsic as tag_of, path};
use serde_json::{json, Map, Value as Json};
use serde_yaml::Value;
use std::collections::{BTreeMap, BTreeSet};
use testkit::proxy::Call;

/// The physical names of one stack: what `Ref` and `Fn::GetAtt` return.
#[derive(Debug, Clone, Default)]
pub struct Physical {
    pub account: String,
    pub region: String,
    pub stack_name: String,
    /// Logical id → `Ref` value.
    pub refs: BTreeMap<String, Json>,
    /// `Id.Attr` → `Fn::GetAtt` value.
    pub atts: BTreeMap<String, String>,
    /// Parameter values that differ from the template's defaults.
    pub parameters: BTreeMap<String, String>,
    /// Export name → value, for `Fn::ImportValue`.
    pub imports: BTreeMap<String, String>,
}

impl Physical {
    pub fn new(account: &str, region: &str, stack_name: &str) -> Self {
        Self {
            account: account.to_owned(),
            region: region.to_owned(),
            stack_name: stack_name.to_owned(),
            ..Self::default()
        }
    }

    pub fn set_ref(&mut self, id: &str, value: impl Into<String>) -> &mut Self {
        self.refs.insert(id.to_owned(), Json::String(value.into()));
        self
    }

    pub fn set_att(&mut self, id: &str, attr: &str, value: impl Into<String>) -> &mut Self {
        self.atts.insert(format!("{id}.{attr}"), value.into());
        self
    }

    /// The ARN this evaluator gives the role with logical id `id`: its `Arn`
    /// attribute if the test set one, else `role/<stack>-<id>`.
    pub fn role_arn(&self, id: &str) -> String {
        self.atts
            .get(&format!("{id}.Arn"))
            .cloned()
            .unwrap_or_else(|| {
                format!(
                    "arn:aws:iam::{}:role/{}-{id}",
                    self.account, self.stack_name
                )
            })
    }
}

/// Who makes a request.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Principal {
    /// A role or user of the account.
    Arn(String),
    /// An AWS service (`scheduler.amazonaws.com`).
    Service(String),
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Principal::Arn(a) => f.write_str(a),
            Principal::Service(s) => write!(f, "service {s}"),
        }
    }
}

/// One authorization request.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Request {
    pub principal: Principal,
    pub action: String,
    pub resource: String,
    pub context: BTreeMap<String, Vec<String>>,
}

/// The outcome of [`Stack::evaluate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed; the statements that allowed it.
    Allowed(Vec<String>),
    /// An explicit `Deny` (the statement).
    Denied(String),
    /// No statement allows it.
    NotAllowed,
}

impl Decision {
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allowed(_))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Who {
    Any,
    Account(String),
    Arn(String),
    Service(String),
}

#[derive(Debug, Clone)]
struct Cond {
    op: String,
    key: String,
    values: Vec<String>,
}

/// One policy statement, resolved.
#[derive(Debug, Clone)]
pub struct Statement {
    /// `<LogicalId> <policy> <Sid or #n>`.
    pub label: String,
    /// The logical id of the resource that holds it.
    pub holder: String,
    pub allow: bool,
    principals: Option<Vec<Who>>,
    pub actions: Vec<String>,
    pub resources: Vec<String>,
    conditions: Vec<Cond>,
}

/// A grant of one action on one resource pattern by one statement, to one principal.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    pub principal: Principal,
    pub statement: String,
    pub action: String,
    pub resource: String,
}

/// The template's IAM, resolved.
#[derive(Debug, Clone)]
pub struct Stack {
    pub physical: Physical,
    identity: BTreeMap<String, Vec<Statement>>,
    resource: BTreeMap<String, Vec<Statement>>,
    /// Queue / table ARN → ARN of the customer managed key that encrypts it.
    encrypted: BTreeMap<String, String>,
    /// Function binary → role ARN.
    pub function_roles: BTreeMap<String, String>,
    /// Function binary → log group ARN (`…:log-group:<name>:*`).
    pub function_log_groups: BTreeMap<String, String>,
    /// Role ARN → logical id.
    pub role_ids: BTreeMap<String, String>,
    /// Logical id → actions with a written reason for not being used by any call.
    pub reasons: BTreeMap<String, BTreeMap<String, String>>,
    /// (alarm ARN, topic ARN) of every alarm action.
    pub alarm_actions: Vec<(String, String)>,
    /// Export name → value of the template's `Outputs` (what another stack imports).
    pub exports: BTreeMap<String, String>,
    /// Key ARN → the aliases `AWS::KMS::Alias` resources give it.
    pub aliases: BTreeMap<String, Vec<String>>,
}

// ---------------------------------------------------------------------------------
// Resolution
// ---------------------------------------------------------------------------------

struct Resolver<'a> {
    template: &'a Value,
    physical: &'a Physical,
}

fn scalar_string(v: &Json) -> Option<String> {
    match v {
        Json::String(s) => Some(s.clone()),
        Json::Number(n) => Some(n.to_string()),
        Json::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

impl Resolver<'_> {
    fn parameter(&self, name: &str) -> Result<Json, String> {
        let decl = path(self.template, &["Parameters", name])
            .ok_or_else(|| format!("Ref {name}: no such parameter or resource"))?;
        let raw = match self.physical.parameters.get(name) {
            Some(v) => v.clone(),
            None => match get(decl, "Default") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                Some(Value::Bool(b)) => b.to_string(),
                _ => return Err(format!("parameter {name} has no default and no test value")),
            },
        };
        let ty = get(decl, "Type")
            .and_then(Value::as_str)
            .unwrap_or("String");
        if ty == "CommaDelimitedList" || ty.starts_with("List<") {
            let items: Vec<Json> = if raw.is_empty() {
                vec![Json::String(String::new())]
            } else {
                raw.split(',')
                    .map(|s| Json::String(s.trim().to_owned()))
                    .collect()
            };
            Ok(Json::Array(items))
        } else {
            Ok(Json::String(raw))
        }
    }

    fn reference(&self, name: &str) -> Result<Option<Json>, String> {
        let p = self.physical;
        Ok(Some(match name {
            "AWS::NoValue" => return Ok(None),
            "AWS::AccountId" => json!(p.account),
            "AWS::Region" => json!(p.region),
            "AWS::Partition" => json!("aws"),
            "AWS::StackName" => json!(p.stack_name),
            "AWS::URLSuffix" => json!("amazonaws.com"),
            _ => match p.refs.get(name) {
                Some(v) => v.clone(),
                None if path(self.template, &["Resources", name]).is_some() => {
                    return Err(format!("Ref {name}: the test gave no physical value"))
                }
                None => self.parameter(name)?,
            },
        }))
    }

    fn attribute(&self, id: &str, attr: &str) -> Result<String, String> {
        self.physical
            .atts
            .get(&format!("{id}.{attr}"))
            .cloned()
            .ok_or_else(|| format!("Fn::GetAtt {id}.{attr}: the test gave no physical value"))
    }

    fn condition(&self, name: &str) -> Result<bool, String> {
        let c = path(self.template, &["Conditions", name])
            .ok_or_else(|| format!("no condition {name}"))?;
        self.truth(c)
    }

    fn truth(&self, v: &Value) -> Result<bool, String> {
        let (f, inner) = tag_of(v).ok_or_else(|| format!("not a condition: {v:?}"))?;
        let items = || inner.as_sequence().cloned().unwrap_or_default();
        match f.as_str() {
            "Equals" => {
                let s = items();
                if s.len() != 2 {
                    return Err("Fn::Equals takes two values".to_owned());
                }
                Ok(self.resolve(&s[0])? == self.resolve(&s[1])?)
            }
            "Not" => Ok(!self.truth(items().first().ok_or("Fn::Not takes one condition")?)?),
            "And" => items()
                .iter()
                .try_fold(true, |acc, c| Ok(acc && self.truth(c)?)),
            "Or" => items()
                .iter()
                .try_fold(false, |acc, c| Ok(acc || self.truth(c)?)),
            "Condition" => self.condition(inner.as_str().ok_or("Condition takes a name")?),
            other => Err(format!("unsupported condition function {other}")),
        }
    }

    fn sub(&self, text: &str, vars: &BTreeMap<String, Json>) -> Result<String, String> {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let end = after
                .find('}')
                .ok_or_else(|| format!("Fn::Sub {text:?}: unclosed ${{"))?;
            let name = &after[..end];
            let value = if let Some(literal) = name.strip_prefix('!') {
                format!("${{{literal}}}")
            } else if let Some(v) = vars.get(name) {
                scalar_string(v)
                    .ok_or_else(|| format!("Fn::Sub variable {name} is not a string"))?
            } else if let Some((id, attr)) =
                name.split_once('.').filter(|_| !name.starts_with("AWS::"))
            {
                self.attribute(id, attr)?
            } else {
                self.reference(name)?
                    .as_ref()
                    .and_then(scalar_string)
                    .ok_or_else(|| format!("Fn::Sub ${{{name}}} is not a string"))?
            };
            out.push_str(&value);
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    /// The value with every intrinsic resolved; `None` for `AWS::NoValue`.
    fn resolve(&self, v: &Value) -> Result<Option<Json>, String> {
        if let Some((f, inner)) = tag_of(v) {
            return match f.as_str() {
                "Ref" => self.reference(inner.as_str().ok_or("Ref takes a name")?),
                "GetAtt" => {
                    let (id, attr) = match inner {
                        Value::String(s) => s
                            .split_once('.')
                            .map(|(a, b)| (a.to_owned(), b.to_owned()))
                            .ok_or_else(|| format!("Fn::GetAtt {s}: no attribute"))?,
                        Value::Sequence(s) if s.len() == 2 => (
                            s[0].as_str().unwrap_or_default().to_owned(),
                            s[1].as_str().unwrap_or_default().to_owned(),
                        ),
                        _ => return Err(format!("Fn::GetAtt {inner:?}")),
                    };
                    Ok(Some(Json::String(self.attribute(&id, &attr)?)))
                }
                "Sub" => match inner {
                    Value::String(s) => Ok(Some(Json::String(self.sub(s, &BTreeMap::new())?))),
                    Value::Sequence(s) if s.len() == 2 => {
                        let mut vars = BTreeMap::new();
                        for (k, x) in s[1].as_mapping().into_iter().flatten() {
                            if let (Some(k), Some(x)) = (k.as_str(), self.resolve(x)?) {
                                vars.insert(k.to_owned(), x);
                            }
                        }
                        let text = s[0].as_str().ok_or("Fn::Sub takes a string")?;
                        Ok(Some(Json::String(self.sub(text, &vars)?)))
                    }
                    _ => Err(format!("Fn::Sub {inner:?}")),
                },
                "Join" => {
                    let s = inner.as_sequence().ok_or("Fn::Join takes [sep, list]")?;
                    let sep = s.first().and_then(Value::as_str).unwrap_or_default();
                    let list = match s.get(1).map(|l| self.resolve(l)).transpose()?.flatten() {
                        Some(Json::Array(a)) => a,
                        other => return Err(format!("Fn::Join of {other:?}")),
                    };
                    let parts: Vec<String> = list.iter().filter_map(scalar_string).collect();
                    Ok(Some(Json::String(parts.join(sep))))
                }
                "Split" => {
                    let s = inner.as_sequence().ok_or("Fn::Split takes [sep, string]")?;
                    let sep = s.first().and_then(Value::as_str).unwrap_or(",");
                    let text = s
                        .get(1)
                        .map(|x| self.resolve(x))
                        .transpose()?
                        .flatten()
                        .as_ref()
                        .and_then(scalar_string)
                        .unwrap_or_default();
                    Ok(Some(Json::Array(
                        text.split(sep)
                            .map(|p| Json::String(p.to_owned()))
                            .collect(),
                    )))
                }
                "If" => {
                    let s = inner
                        .as_sequence()
                        .ok_or("Fn::If takes [condition, a, b]")?;
                    let name = s
                        .first()
                        .and_then(Value::as_str)
                        .ok_or("Fn::If condition")?;
                    let branch = if self.condition(name)? {
                        s.get(1)
                    } else {
                        s.get(2)
                    };
                    match branch {
                        Some(b) => self.resolve(b),
                        None => Err("Fn::If needs two branches".to_owned()),
                    }
                }
                "Condition" => Ok(Some(Json::Bool(
                    self.condition(inner.as_str().ok_or("Condition takes a name")?)?,
                ))),
                "ImportValue" => {
                    let name = self
                        .resolve(inner)?
                        .as_ref()
                        .and_then(scalar_string)
                        .ok_or("Fn::ImportValue takes a name")?;
                    self.physical
                        .imports
                        .get(&name)
                        .map(|v| Some(Json::String(v.clone())))
                        .ok_or_else(|| {
                            format!("Fn::ImportValue {name}: no stack of the test exports it")
                        })
                }
                other => Err(format!("unsupported intrinsic function {other}")),
            };
        }
        Ok(Some(match v {
            Value::Null => Json::Null,
            Value::Bool(b) => Json::Bool(*b),
            Value::Number(n) => serde_json::to_value(n).map_err(|e| e.to_string())?,
            Value::String(s) => Json::String(s.clone()),
            Value::Sequence(s) => {
                let mut out = Vec::new();
                for x in s {
                    if let Some(r) = self.resolve(x)? {
                        out.push(r);
                    }
                }
                Json::Array(out)
            }
            Value::Mapping(m) => {
                let mut out = Map::new();
                for (k, x) in m {
                    let k = k.as_str().ok_or("a mapping key is not a string")?;
                    if let Some(r) = self.resolve(x)? {
                        out.insert(k.to_owned(), r);
                    }
                }
                Json::Object(out)
            }
            Value::Tagged(t) => return Err(format!("unsupported tag {}", t.tag)),
        }))
    }
}

fn strings(v: Option<&Json>) -> Vec<String> {
    match v {
        Some(Json::Array(a)) => a.iter().flat_map(|x| strings(Some(x))).collect(),
        Some(x) => scalar_string(x).into_iter().collect(),
        None => vec![],
    }
}

fn parse_statements(
    holder: &str,
    policy: &str,
    doc: &Json,
    account: &str,
) -> Result<Vec<Statement>, String> {
    let list = match doc.get("Statement") {
        Some(Json::Array(a)) => a.clone(),
        Some(one @ Json::Object(_)) => vec![one.clone()],
        _ => return Err(format!("{holder} {policy}: no Statement")),
    };
    let mut out = Vec::new();
    for (i, st) in list.iter().enumerate() {
        for banned in ["NotAction", "NotResource", "NotPrincipal"] {
            if st.get(banned).is_some() {
                return Err(format!("{holder} {policy}: {banned} is not modelled"));
            }
        }
        let sid = st
            .get("Sid")
            .and_then(Json::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| format!("#{i}"));
        let principals = st.get("Principal").map(|p| {
            let mut who = Vec::new();
            match p {
                Json::String(s) if s == "*" => who.push(Who::Any),
                Json::Object(m) => {
                    for (k, v) in m {
                        for s in strings(Some(v)) {
                            who.push(match (k.as_str(), s.as_str()) {
                                (_, "*") => Who::Any,
                                ("Service", _) => Who::Service(s),
                                _ if s == account
                                    || s == format!("arn:aws:iam::{account}:root") =>
                                {
                                    Who::Account(account.to_owned())
                                }
                                _ => Who::Arn(s),
                            });
                        }
                    }
                }
                _ => {}
            }
            who
        });
        let mut conditions = Vec::new();
        if let Some(Json::Object(ops)) = st.get("Condition") {
            for (op, keys) in ops {
                for (key, values) in keys.as_object().into_iter().flatten() {
                    conditions.push(Cond {
                        op: op.clone(),
                        key: key.clone(),
                        values: strings(Some(values)),
                    });
                }
            }
        }
        let effect = st.get("Effect").and_then(Json::as_str).unwrap_or_default();
        out.push(Statement {
            label: format!("{holder} {policy} {sid}"),
            holder: holder.to_owned(),
            allow: match effect {
                "Allow" => true,
                "Deny" => false,
                other => return Err(format!("{holder} {policy} {sid}: Effect {other:?}")),
            },
            principals,
            actions: strings(st.get("Action")),
            resources: {
                let r = strings(st.get("Resource"));
                if r.is_empty() {
                    vec!["*".to_owned()]
                } else {
                    r
                }
            },
            conditions,
        });
    }
    Ok(out)
}

/// `*` and `?` wildcards; `case` false compares ASCII case-insensitively.
pub fn glob(pattern: &str, text: &str, case: bool) -> bool {
    let norm = |s: &str| {
        if case {
            s.chars().collect::<Vec<_>>()
        } else {
            s.to_ascii_lowercase().chars().collect()
        }
    };
    let (p, t) = (norm(pattern), norm(text));
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

fn condition_holds(c: &Cond, context: &BTreeMap<String, Vec<String>>) -> Result<bool, String> {
    // ForAnyValue: any value of the request matching any value of the condition is
    // what the plain operators below already test; ForAllValues is not modelled.
    let op = c.op.strip_prefix("ForAnyValue:").unwrap_or(&c.op);
    let (op, if_exists) = match op.strip_suffix("IfExists") {
        Some(base) => (base, true),
        None => (op, false),
    };
    let negated = op.contains("Not");
    let Some(have) = context.get(&c.key).filter(|v| !v.is_empty()) else {
        return Ok(negated || if_exists);
    };
    let test = |want: &str, got: &str| -> Result<bool, String> {
        Ok(match op {
            "StringEquals" | "StringNotEquals" => want == got,
            "StringLike" | "StringNotLike" | "ArnLike" | "ArnNotLike" | "ArnEquals"
            | "ArnNotEquals" => glob(want, got, true),
            "Bool" => want.eq_ignore_ascii_case(got),
            other => return Err(format!("condition operator {other} is not modelled")),
        })
    };
    let mut any = false;
    for got in have {
        for want in &c.values {
            any |= test(want, got)?;
        }
    }
    Ok(if negated { !any } else { any })
}

impl Statement {
    /// The values of every condition `op` (e.g. `ArnNotEquals`) on `key`.
    pub fn condition_values(&self, op: &str, key: &str) -> Vec<String> {
        self.conditions
            .iter()
            .filter(|c| c.op == op && c.key == key)
            .flat_map(|c| c.values.iter().cloned())
            .collect()
    }

    fn matches_who(&self, principal: &Principal) -> Option<&Who> {
        let who = self.principals.as_ref()?;
        who.iter().find(|w| match (w, principal) {
            (Who::Any, _) => true,
            (Who::Arn(a), Principal::Arn(p)) => a == p,
            (Who::Account(acct), Principal::Arn(p)) => p.split(':').nth(4) == Some(acct.as_str()),
            (Who::Service(s), Principal::Service(p)) => s == p,
            _ => false,
        })
    }

    fn matches(&self, r: &Request) -> Result<bool, String> {
        if !self.actions.iter().any(|a| glob(a, &r.action, false)) {
            return Ok(false);
        }
        if !self.resources.iter().any(|p| glob(p, &r.resource, true)) {
            return Ok(false);
        }
        for c in &self.conditions {
            if !condition_holds(c, &r.context)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

impl Stack {
    /// Resolves `template` with `physical` and collects its policies.
    ///
    /// Resolves the template with a test's physical names ([`Physical`]): `Ref`,
    /// `Fn::GetAtt`, `Fn::Sub` (both forms), `Fn::Join`, `Fn::Split`, `Fn::If` over the
    /// template's `Conditions` (`Fn::Equals`, `Fn::Not`, `Fn::And`, `Fn::Or`, `Condition`),
    /// `Fn::ImportValue` (from [`Physical::imports`], the exporting stack's
    /// [`Stack::exports`]), `AWS::NoValue` and the pseudo parameters; a resource whose
    /// `Condition` is false is left out. A role's ARN is its `Arn` attribute when the test
    /// gives one (a role with a `RoleName`), else derived from the logical id. Two stacks
    /// that work together (the main stack and the staging harness, which imports its
    /// exports) are read one by one and joined with [`Stack::merge`], so a call of one
    /// stack's role on the other's resource meets both policies. It collects:
    /// - identity policies: each `AWS::IAM::Role`'s inline `Policies`, by role ARN;
    /// - resource policies: `AWS::SQS::QueuePolicy` (by queue ARN), `AWS::KMS::Key`'s
    ///   `KeyPolicy` (by key ARN), `AWS::SNS::TopicPolicy` (by topic ARN), and each role's
    ///   trust policy (by role ARN, for `sts:AssumeRole`);
    /// - which queues and tables a KMS key encrypts (`KmsMasterKeyId`,
    ///   `SSESpecification.KMSMasterKeyId`), for the KMS calls AWS makes for the caller;
    /// - the reasons written next to grants no recorded call uses
    ///   (`# iam:unused <action> <reason>` inside the resource's block).
    pub fn from_template(template: &Value, text: &str, physical: Physical) -> Result<Self, String> {
        let r = Resolver {
            template,
            physical: &physical,
        };
        let account = physical.account.clone();
        let mut stack = Stack {
            physical: physical.clone(),
            identity: BTreeMap::new(),
            resource: BTreeMap::new(),
            encrypted: BTreeMap::new(),
            function_roles: BTreeMap::new(),
            function_log_groups: BTreeMap::new(),
            role_ids: BTreeMap::new(),
            reasons: reasons(text),
            alarm_actions: Vec::new(),
            exports: BTreeMap::new(),
            aliases: BTreeMap::new(),
        };
        let resources = path(template, &["Resources"])
            .and_then(Value::as_mapping)
            .ok_or("no Resources")?;
        for (id, res) in resources {
            let id = id.as_str().unwrap_or_default();
            if let Some(c) = get(res, "Condition").and_then(Value::as_str) {
                if !r.condition(c)? {
                    continue;
                }
            }
            let ty = get(res, "Type").and_then(Value::as_str).unwrap_or_default();
            let resolved = |keys: &[&str]| -> Result<Option<Json>, String> {
                match path(res, keys) {
                    Some(v) => r.resolve(v).map_err(|e| format!("{id}: {e}")),
                    None => Ok(None),
                }
            };
            match ty {
                "AWS::IAM::Role" => {
                    let arn = physical.role_arn(id);
                    stack.role_ids.insert(arn.clone(), id.to_owned());
                    if path(res, &["Properties", "ManagedPolicyArns"]).is_some() {
                        return Err(format!("{id}: managed policies are not modelled"));
                    }
                    if let Some(trust) = resolved(&["Properties", "AssumeRolePolicyDocument"])? {
                        let st = parse_statements(id, "trust", &trust, &account)?;
                        stack.resource.entry(arn.clone()).or_default().extend(st);
                    }
                    if let Some(Json::Array(policies)) = resolved(&["Properties", "Policies"])? {
                        for p in policies {
                            let name = p.get("PolicyName").and_then(Json::as_str).unwrap_or("?");
                            let doc = p.get("PolicyDocument").cloned().unwrap_or(Json::Null);
                            let st = parse_statements(id, name, &doc, &account)?;
                            stack.identity.entry(arn.clone()).or_default().extend(st);
                        }
                    }
                }
                "AWS::SQS::QueuePolicy" | "AWS::SNS::TopicPolicy" => {
                    let (list, attr) = if ty == "AWS::SQS::QueuePolicy" {
                        ("Queues", Some("Arn"))
                    } else {
                        ("Topics", None)
                    };
                    let doc = resolved(&["Properties", "PolicyDocument"])?.unwrap_or(Json::Null);
                    let st = parse_statements(id, "policy", &doc, &account)?;
                    for target in path(res, &["Properties", list])
                        .and_then(Value::as_sequence)
                        .into_iter()
                        .flatten()
                    {
                        let (f, inner) = tag_of(target).ok_or(format!("{id}: {list} entry"))?;
                        let target_id = inner.as_str().unwrap_or_default();
                        let arn = match (f.as_str(), attr) {
                            ("Ref", Some(a)) => r.attribute(target_id, a)?,
                            _ => r
                                .resolve(target)?
                                .as_ref()
                                .and_then(scalar_string)
                                .ok_or(format!("{id}: {list} entry"))?,
                        };
                        stack.resource.entry(arn).or_default().extend(st.clone());
                    }
                }
                "AWS::KMS::Key" => {
                    let arn = r.attribute(id, "Arn")?;
                    let doc = resolved(&["Properties", "KeyPolicy"])?.unwrap_or(Json::Null);
                    let st = parse_statements(id, "key-policy", &doc, &account)?;
                    stack.resource.entry(arn).or_default().extend(st);
                }
                "AWS::KMS::Alias" => {
                    let name = resolved(&["Properties", "AliasName"])?
                        .as_ref()
                        .and_then(scalar_string)
                        .ok_or(format!("{id}: AliasName"))?;
                    let target = resolved(&["Properties", "TargetKeyId"])?
                        .as_ref()
                        .and_then(scalar_string)
                        .ok_or(format!("{id}: TargetKeyId"))?;
                    let key = if target.starts_with("arn:") {
                        target
                    } else {
                        format!(
                            "arn:aws:kms:{}:{}:key/{target}",
                            physical.region, physical.account
                        )
                    };
                    stack.aliases.entry(key).or_default().push(name);
                }
                "AWS::SQS::Queue" => {
                    if let Some(key) = resolved(&["Properties", "KmsMasterKeyId"])? {
                        if let Some(k) = scalar_string(&key) {
                            stack.encrypted.insert(r.attribute(id, "Arn")?, k);
                        }
                    }
                }
                "AWS::SNS::Topic" => {
                    if let Some(key) = resolved(&["Properties", "KmsMasterKeyId"])? {
                        if let (Some(k), Some(topic)) = (
                            scalar_string(&key),
                            r.reference(id)?.as_ref().and_then(scalar_string),
                        ) {
                            stack.encrypted.insert(topic, k);
                        }
                    }
                }
                "AWS::CloudWatch::Alarm" => {
                    let alarm = r.attribute(id, "Arn")?;
                    if let Some(actions) = resolved(&["Properties", "AlarmActions"])? {
                        for topic in strings(Some(&actions)) {
                            stack.alarm_actions.push((alarm.clone(), topic));
                        }
                    }
                }
                "AWS::DynamoDB::Table" => {
                    if let Some(key) =
                        resolved(&["Properties", "SSESpecification", "KMSMasterKeyId"])?
                    {
                        if let Some(k) = scalar_string(&key) {
                            stack.encrypted.insert(r.attribute(id, "Arn")?, k);
                        }
                    }
                }
                "AWS::Serverless::Function" => {
                    let bin = path(res, &["Metadata", "BuildProperties", "Binary"])
                        .and_then(Value::as_str)
                        .ok_or(format!("{id}: no Metadata.BuildProperties.Binary"))?;
                    let role = path(res, &["Properties", "Role"])
                        .and_then(tag_of)
                        .and_then(|(_, v)| v.as_str().map(str::to_owned))
                        .and_then(|s| s.split('.').next().map(str::to_owned))
                        .ok_or(format!("{id}: Role is not a !GetAtt of a role"))?;
                    stack
                        .function_roles
                        .insert(bin.to_owned(), physical.role_arn(&role));
                    if let Some(group) = path(res, &["Properties", "LoggingConfig", "LogGroup"])
                        .and_then(tag_of)
                        .and_then(|(_, v)| v.as_str().map(str::to_owned))
                    {
                        stack
                            .function_log_groups
                            .insert(bin.to_owned(), r.attribute(&group, "Arn")?);
                    }
                }
                _ => {}
            }
        }
        for (name, output) in path(template, &["Outputs"])
            .and_then(Value::as_mapping)
            .into_iter()
            .flatten()
        {
            let Some(export) = path(output, &["Export", "Name"]) else {
                continue;
            };
            if let Some(c) = get(output, "Condition").and_then(Value::as_str) {
                if !r.condition(c)? {
                    continue;
                }
            }
            let label = name.as_str().unwrap_or("?");
            let value = |v: Option<&Value>| -> Result<String, String> {
                v.map(|v| r.resolve(v))
                    .transpose()
                    .map_err(|e| format!("output {label}: {e}"))?
                    .flatten()
                    .as_ref()
                    .and_then(scalar_string)
                    .ok_or_else(|| format!("output {label}: not a string"))
            };
            stack
                .exports
                .insert(value(Some(export))?, value(get(output, "Value"))?);
        }
        Ok(stack)
    }

    /// Joins another stack's policies to this one's (a stack that imports this one's
    /// exports, deployed in the same account): identity policies, resource policies,
    /// keys, functions, roles, reasons and alarm actions.
    pub fn merge(&mut self, other: Stack) {
        for (arn, sts) in other.identity {
            self.identity.entry(arn).or_default().extend(sts);
        }
        for (arn, sts) in other.resource {
            self.resource.entry(arn).or_default().extend(sts);
        }
        self.encrypted.extend(other.encrypted);
        self.function_roles.extend(other.function_roles);
        self.function_log_groups.extend(other.function_log_groups);
        self.role_ids.extend(other.role_ids);
        for (holder, r) in other.reasons {
            self.reasons.entry(holder).or_default().extend(r);
        }
        self.alarm_actions.extend(other.alarm_actions);
        self.exports.extend(other.exports);
        for (key, names) in other.aliases {
            self.aliases.entry(key).or_default().extend(names);
        }
    }

    /// The resource-policy statements attached to `arn` (a queue, topic, key or role).
    pub fn resource_statements(&self, arn: &str) -> &[Statement] {
        self.resource
            .get(arn)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// The principal of a role given by logical id.
    pub fn role(&self, id: &str) -> Principal {
        Principal::Arn(self.physical.role_arn(id))
    }

    fn base_context(&self, principal: &Principal) -> BTreeMap<String, Vec<String>> {
        let mut c = BTreeMap::new();
        c.insert("aws:SecureTransport".to_owned(), vec!["true".to_owned()]);
        if let Principal::Arn(a) = principal {
            c.insert("aws:PrincipalArn".to_owned(), vec![a.clone()]);
            c.insert(
                "aws:PrincipalAccount".to_owned(),
                vec![self.physical.account.clone()],
            );
        }
        c
    }

    /// A request with the common context.
    pub fn request(&self, principal: &Principal, action: &str, resource: &str) -> Request {
        Request {
            principal: principal.clone(),
            action: action.to_owned(),
            resource: resource.to_owned(),
            context: self.base_context(principal),
        }
    }

    /// The customer managed key that encrypts a queue, table (its indexes and
    /// stream) or topic.
    pub fn key_of(&self, resource: &str) -> Option<&String> {
        self.encrypted.get(resource).or_else(|| {
            // A stream or an index is encrypted with its table's key.
            let table = resource.split("/stream/").next()?.split("/index/").next()?;
            self.encrypted.get(table)
        })
    }

    fn kms(&self, principal: &Principal, key: &str, action: &str, via: &str) -> Request {
        let mut r = self.request(principal, action, key);
        r.context.insert(
            "kms:ViaService".to_owned(),
            vec![format!("{via}.{}.amazonaws.com", self.physical.region)],
        );
        r.context.insert(
            "kms:CallerAccount".to_owned(),
            vec![self.physical.account.clone()],
        );
        if let Some(aliases) = self.aliases.get(key) {
            r.context
                .insert("kms:ResourceAliases".to_owned(), aliases.clone());
        }
        r
    }

    /// Every authorization one recorded call needs: what AWS authorizes for one API call,
    /// beyond its name:
    /// - `TransactWriteItems` / `TransactGetItems` are authorized per item, as
    ///   `dynamodb:PutItem`, `UpdateItem`, `DeleteItem`, `ConditionCheckItem`, `GetItem` on
    ///   each item's table
    ///   (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis-iam.html>);
    /// - SQS batch calls by their single action (`SendMessageBatch` → `sqs:SendMessage`,
    ///   `DeleteMessageBatch` → `sqs:DeleteMessage`,
    ///   <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-api-permissions-reference.html>);
    /// - `CreateSchedule` / `UpdateSchedule` also need `iam:PassRole` on the target's
    ///   `RoleArn`, with `iam:PassedToService = scheduler.amazonaws.com`
    ///   (<https://docs.aws.amazon.com/scheduler/latest/UserGuide/setting-up.html#setting-up-execution-role>);
    /// - an SQS queue under a customer managed key: the producer needs
    ///   `kms:GenerateDataKey` and `kms:Decrypt`, the consumer `kms:Decrypt`, through
    ///   `sqs.<region>.amazonaws.com`
    ///   (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-key-management.html>);
    /// - a DynamoDB table (and its stream, encrypted with the table's key) under a customer
    ///   managed key: the caller needs `kms:Decrypt` through
    ///   `dynamodb.<region>.amazonaws.com` to use the table key
    ///   (<https://docs.aws.amazon.com/kms/latest/developerguide/services-dynamodb.html>,
    ///   <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/encryption.usagenotes.html>);
    /// - `sts:GetCallerIdentity` needs no permission (no policy can deny it): no request;
    /// - `cloudformation:DescribeStacks` is authorized on the stack's ARN, recorded as
    ///   `stack/<name>/*` (any stack id of that name);
    /// - no call is rewritten to match a grant: a recorded call is authorized on the
    ///   resource it names.
    ///
    /// Every request carries `aws:SecureTransport = true` (the SDK talks HTTPS to AWS; only
    /// the loopback test endpoint is plain HTTP), `aws:PrincipalArn` for a role, and
    /// `kms:CallerAccount` / `kms:ViaService` on the KMS requests a service makes, with
    /// `kms:ResourceAliases` (the aliases an `AWS::KMS::Alias` of the template gives the
    /// key).
    pub fn requests_for(&self, principal: &Principal, call: &Call) -> Vec<Request> {
        let service = call.service.as_str();
        let op = call.operation.as_str();
        // Who the caller is: no policy can allow or deny it.
        if (service, op) == ("sts", "GetCallerIdentity") {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut targets: Vec<(String, String)> = Vec::new();
        if !call.parts.is_empty() {
            for p in &call.parts {
                let action = match p.kind.as_str() {
                    "Put" => "PutItem",
                    "Update" => "UpdateItem",
                    "Delete" => "DeleteItem",
                    "ConditionCheck" => "ConditionCheckItem",
                    "Get" => "GetItem",
                    other => other,
                };
                targets.push((format!("dynamodb:{action}"), p.resource.clone()));
            }
        } else {
            let action = match (service, op) {
                ("sqs", "SendMessageBatch") => "SendMessage",
                ("sqs", "DeleteMessageBatch") => "DeleteMessage",
                ("sqs", "ChangeMessageVisibilityBatch") => "ChangeMessageVisibility",
                ("scheduler", "UpdateSchedule") => "UpdateSchedule",
                _ => op,
            };
            let resources = if call.resources.is_empty() {
                vec!["*".to_owned()]
            } else {
                call.resources.clone()
            };
            for res in resources {
                targets.push((format!("{service}:{action}"), res));
            }
        }
        for (action, resource) in &targets {
            out.push(self.request(principal, action, resource));
            let Some(key) = self.key_of(resource) else {
                continue;
            };
            let kms_actions: &[&str] = match action.as_str() {
                "sqs:SendMessage" => &["kms:GenerateDataKey", "kms:Decrypt"],
                "sqs:ReceiveMessage" => &["kms:Decrypt"],
                a if a.starts_with("dynamodb:")
                    && !matches!(
                        a,
                        "dynamodb:DescribeStream"
                            | "dynamodb:ListStreams"
                            | "dynamodb:GetShardIterator"
                    ) =>
                {
                    &["kms:Decrypt"]
                }
                _ => &[],
            };
            let via = if action.starts_with("sqs:") {
                "sqs"
            } else {
                "dynamodb"
            };
            for k in kms_actions {
                out.push(self.kms(principal, key, k, via));
            }
        }
        if let (Some(role), "scheduler", "CreateSchedule" | "UpdateSchedule") =
            (&call.passed_role, service, op)
        {
            let mut r = self.request(principal, "iam:PassRole", role);
            r.context.insert(
                "iam:PassedToService".to_owned(),
                vec!["scheduler.amazonaws.com".to_owned()],
            );
            out.push(r);
        }
        out.sort();
        out.dedup();
        out
    }

    /// What Lambda does with a function's role to write its logs: `CreateLogStream`
    /// and `PutLogEvents` on a stream of its log group.
    pub fn log_requests(&self, binary: &str) -> Vec<Request> {
        let (Some(role), Some(group)) = (
            self.function_roles.get(binary),
            self.function_log_groups.get(binary),
        ) else {
            return vec![];
        };
        let stream = format!(
            "{}:log-stream:2026/12/03/[$LATEST]0123456789abcdef",
            group.trim_end_matches(":*")
        );
        let p = Principal::Arn(role.clone());
        ["logs:CreateLogStream", "logs:PutLogEvents"]
            .iter()
            .map(|a| self.request(&p, a, &stream))
            .collect()
    }

    /// What CloudWatch does when an alarm changes state: `sns:Publish` to each
    /// action's topic and, on an encrypted topic, `kms:GenerateDataKey` and
    /// `kms:Decrypt` on its key, as `cloudwatch.amazonaws.com` with the alarm as
    /// `aws:SourceArn` and this account as `aws:SourceAccount`
    /// (<https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html#compatibility-with-aws-services>).
    pub fn alarm_requests(&self) -> Vec<Request> {
        let cloudwatch = Principal::Service("cloudwatch.amazonaws.com".to_owned());
        let mut out = Vec::new();
        for (alarm, topic) in &self.alarm_actions {
            let with_source = |mut r: Request| {
                r.context.insert(
                    "aws:SourceAccount".to_owned(),
                    vec![self.physical.account.clone()],
                );
                r.context
                    .insert("aws:SourceArn".to_owned(), vec![alarm.clone()]);
                r
            };
            out.push(with_source(self.request(&cloudwatch, "sns:Publish", topic)));
            if let Some(key) = self.key_of(topic) {
                for a in ["kms:GenerateDataKey", "kms:Decrypt"] {
                    out.push(with_source(self.request(&cloudwatch, a, key)));
                }
            }
        }
        out
    }

    /// Allowed, explicitly denied, or not allowed; same account only.
    ///
    /// An explicit `Deny` in the identity or the resource policy wins; otherwise the
    /// request is allowed by an identity `Allow`, or by a resource-policy `Allow` naming the
    /// principal. A resource-policy statement whose principal is the account (`…:root`)
    /// only delegates to IAM: it allows when the identity policy allows too. A KMS key
    /// policy is required: a key use is allowed only when the key policy allows it
    /// (directly, or for the account and then IAM as well). Actions match
    /// case-insensitively, ARNs case-sensitively, both with `*` and `?`. Condition
    /// operators: `StringEquals`, `StringNotEquals`, `StringLike`, `StringNotLike`,
    /// `ArnEquals`, `ArnLike`, `ArnNotEquals`, `ArnNotLike`, `Bool`, each with `IfExists`;
    /// several values for one key are OR-ed, several keys and operators AND-ed; a key
    /// missing from the request fails a positive operator and passes a negated one (IAM's
    /// rule). `ForAnyValue:` before an operator is read as the operator itself, which
    /// already holds when any value of the request matches any value of the condition.
    pub fn evaluate(&self, r: &Request) -> Result<Decision, String> {
        let none = Vec::new();
        let identity = match &r.principal {
            Principal::Arn(a) => self.identity.get(a).unwrap_or(&none),
            Principal::Service(_) => &none,
        };
        let resource = self.resource.get(&r.resource).unwrap_or(&none);
        for st in identity.iter().filter(|s| !s.allow) {
            if st.matches(r)? {
                return Ok(Decision::Denied(st.label.clone()));
            }
        }
        for st in resource.iter().filter(|s| !s.allow) {
            if st.matches_who(&r.principal).is_some() && st.matches(r)? {
                return Ok(Decision::Denied(st.label.clone()));
            }
        }
        let mut id_allow = Vec::new();
        for st in identity.iter().filter(|s| s.allow) {
            if st.matches(r)? {
                id_allow.push(st.label.clone());
            }
        }
        let (mut direct, mut account) = (Vec::new(), Vec::new());
        for st in resource.iter().filter(|s| s.allow) {
            let Some(who) = st.matches_who(&r.principal) else {
                continue;
            };
            if st.matches(r)? {
                if matches!(who, Who::Account(_)) {
                    account.push(st.label.clone());
                } else {
                    direct.push(st.label.clone());
                }
            }
        }
        let is_key = r.resource.starts_with("arn:aws:kms:");
        let delegated = !account.is_empty() && !id_allow.is_empty();
        let allowed = if is_key {
            !direct.is_empty() || delegated
        } else {
            !id_allow.is_empty() || !direct.is_empty() || delegated
        };
        if !allowed {
            return Ok(Decision::NotAllowed);
        }
        let mut by = direct;
        if !is_key || delegated {
            by.extend(id_allow);
        }
        if delegated {
            by.extend(account);
        }
        Ok(Decision::Allowed(by))
    }

    /// Every grant to `principal`: (statement, action, resource pattern) of each
    /// identity `Allow`, and of each resource-policy `Allow` naming it by ARN.
    pub fn grants(&self, principal: &Principal) -> Vec<(Grant, &Statement)> {
        let mut statements: Vec<&Statement> = Vec::new();
        if let Principal::Arn(a) = principal {
            statements.extend(
                self.identity
                    .get(a)
                    .into_iter()
                    .flatten()
                    .filter(|s| s.allow),
            );
        }
        for (arn, sts) in &self.resource {
            if self.role_ids.contains_key(arn) || arn.starts_with("arn:aws:kms:") {
                continue; // trust and key policies: who may assume or use, not grants
            }
            for st in sts.iter().filter(|s| s.allow) {
                let named = st
                    .principals
                    .iter()
                    .flatten()
                    .any(|w| match (w, principal) {
                        (Who::Arn(x), Principal::Arn(p)) => x == p,
                        _ => false,
                    });
                if named {
                    statements.push(st);
                }
            }
        }
        let mut out = Vec::new();
        for st in statements {
            for a in &st.actions {
                for res in &st.resources {
                    out.push((
                        Grant {
                            principal: principal.clone(),
                            statement: st.label.clone(),
                            action: a.clone(),
                            resource: res.clone(),
                        },
                        st,
                    ));
                }
            }
        }
        out
    }

    /// Whether `request` is one a grant covers (its statement's action, resource
    /// pattern and conditions).
    pub fn covers(grant: &Grant, st: &Statement, request: &Request) -> Result<bool, String> {
        if request.principal != grant.principal
            || !glob(&grant.action, &request.action, false)
            || !glob(&grant.resource, &request.resource, true)
        {
            return Ok(false);
        }
        for c in &st.conditions {
            if !condition_holds(c, &request.context)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Every principal ARN a resource policy names in an `Allow`.
    pub fn resource_policy_principals(&self) -> BTreeSet<String> {
        self.resource
            .iter()
            .filter(|(arn, _)| {
                !self.role_ids.contains_key(*arn) && !arn.starts_with("arn:aws:kms:")
            })
            .flat_map(|(_, sts)| sts.iter().filter(|s| s.allow))
            .flat_map(|s| s.principals.iter().flatten())
            .filter_map(|w| match w {
                Who::Arn(a) => Some(a.clone()),
                _ => None,
            })
            .collect()
    }

    /// The reason written for leaving `action` unused by the resource `holder`.
    pub fn reason(&self, holder: &str, action: &str) -> Option<&String> {
        self.reasons.get(holder)?.get(action)
    }
}

/// `# iam:unused <action> <reason>` lines, by the logical id of the resource whose
/// block (`  <LogicalId>:` at two spaces, up to the next one) holds them.
fn reasons(text: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut current = String::new();
    for line in text.lines() {
        if let Some(id) = line
            .strip_prefix("  ")
            .filter(|l| !l.starts_with(' ') && !l.starts_with('#'))
            .and_then(|l| l.strip_suffix(':'))
        {
            current = id.to_owned();
        }
        if let Some(rest) = line.trim_start().strip_prefix("# iam:unused ") {
            let (action, reason) = rest.split_once(' ').unwrap_or((rest, ""));
            out.entry(current.clone())
                .or_default()
                .insert(action.to_owned(), reason.trim().to_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob("arn:aws:sqs:*:1:q", "arn:aws:sqs:us-east-1:1:q", true));
        assert!(!glob(
            "arn:aws:sqs:*:1:q",
            "arn:aws:sqs:us-east-1:1:q2",
            true
        ));
        assert!(glob("sqs:sendmessage", "sqs:SendMessage", false));
        assert!(!glob("sqs:sendmessage", "sqs:SendMessage", true));
        assert!(glob("a?c*", "abcdef", true));
        assert!(glob("*", "", true));
    }

    #[test]
    fn negated_operators_pass_when_the_key_is_missing() {
        let c = Cond {
            op: "ArnNotEquals".into(),
            key: "aws:PrincipalArn".into(),
            values: vec!["arn:x".into()],
        };
        assert!(condition_holds(&c, &BTreeMap::new()).unwrap());
        let c = Cond {
            op: "StringEquals".into(),
            ..c
        };
        assert!(!condition_holds(&c, &BTreeMap::new()).unwrap());
        let c = Cond {
            op: "NumericLessThan".into(),
            ..c
        };
        let ctx = BTreeMap::from([("aws:PrincipalArn".to_owned(), vec!["arn:x".to_owned()])]);
        assert!(
            condition_holds(&c, &ctx).is_err(),
            "unknown operators fail loudly"
        );
    }

    #[test]
    fn reasons_are_read_per_resource() {
        let text = "Resources:\n  ARole:\n    Type: x\n    # iam:unused sqs:GetQueueAttributes read by the event source mapping\n  BRole:\n    Type: y\n";
        let r = reasons(text);
        assert_eq!(
            r["ARole"]["sqs:GetQueueAttributes"],
            "read by the event source mapping"
        );
        assert!(!r.contains_key("BRole"));
    }
}
