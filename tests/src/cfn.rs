//! Reading `template.yaml`: CloudFormation short tags (`!Ref`, `!GetAtt`, `!Sub`…)
//! become `serde_yaml::Value::Tagged`; these helpers read both the short and the long
//! (`{Ref: …}`, `{Fn::GetAtt: …}`) forms.

use serde_yaml::Value;
use std::collections::BTreeMap;

/// The path of `template.yaml`.
pub const TEMPLATE_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../template.yaml");

/// The path of the staging harness's template.
pub const HARNESS_TEMPLATE_PATH: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../infra/template.yaml");

/// `template.yaml`, parsed.
pub fn template() -> Value {
    parse_file(TEMPLATE_PATH)
}

/// `infra/template.yaml`, parsed.
pub fn harness_template() -> Value {
    parse_file(HARNESS_TEMPLATE_PATH)
}

fn parse_file(path: &str) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("parsing {path}: {e}"))
}

pub fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.as_mapping().and_then(|m| m.get(key))
}

pub fn path<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().try_fold(v, |cur, k| get(cur, k))
}

pub fn resources(t: &Value) -> Vec<(String, &Value)> {
    path(t, &["Resources"])
        .and_then(Value::as_mapping)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.as_str()?.to_owned(), v)))
                .collect()
        })
        .unwrap_or_default()
}

pub fn of_type<'a>(t: &'a Value, ty: &str) -> Vec<(String, &'a Value)> {
    resources(t)
        .into_iter()
        .filter(|(_, r)| get(r, "Type").and_then(Value::as_str) == Some(ty))
        .collect()
}

pub fn props<'a>(r: &'a Value, key: &str) -> Option<&'a Value> {
    path(r, &["Properties", key])
}

/// `!Name value` or `{Fn::Name: value}` / `{Ref: value}` / `{Condition: name}` →
/// (`Name`, value).
pub fn intrinsic(v: &Value) -> Option<(String, &Value)> {
    match v {
        Value::Tagged(t) => Some((
            t.tag.to_string().trim_start_matches('!').to_owned(),
            &t.value,
        )),
        Value::Mapping(m) if m.len() == 1 => {
            let (k, inner) = m.iter().next()?;
            let k = k.as_str()?;
            if k == "Ref" || k == "Condition" || k.starts_with("Fn::") {
                Some((k.trim_start_matches("Fn::").to_owned(), inner))
            } else {
                None
            }
        }
        _ => None,
    }
}

/// `!Ref X` → X.
pub fn ref_name(v: &Value) -> Option<String> {
    match intrinsic(v)? {
        (name, inner) if name == "Ref" => inner.as_str().map(str::to_owned),
        _ => None,
    }
}

/// `!GetAtt X.Attr` (or `[X, Attr]`) → (X, Attr).
pub fn get_att(v: &Value) -> Option<(String, String)> {
    let (name, inner) = intrinsic(v)?;
    if name != "GetAtt" {
        return None;
    }
    match inner {
        Value::String(s) => {
            let (res, attr) = s.split_once('.')?;
            Some((res.to_owned(), attr.to_owned()))
        }
        Value::Sequence(seq) if seq.len() == 2 => {
            Some((seq[0].as_str()?.to_owned(), seq[1].as_str()?.to_owned()))
        }
        _ => None,
    }
}

/// The logical id a value points at through `!Ref` or `!GetAtt`.
pub fn target(v: &Value) -> Option<String> {
    ref_name(v).or_else(|| get_att(v).map(|(r, _)| r))
}

pub fn number(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// A literal integer, or the default of the parameter it references.
pub fn int_value(t: &Value, v: &Value) -> Option<i64> {
    number(v).or_else(|| {
        let p = ref_name(v)?;
        number(path(t, &["Parameters", &p, "Default"])?)
    })
}

/// The largest value a literal or a referenced parameter can take.
pub fn int_max(t: &Value, v: &Value) -> Option<i64> {
    number(v).or_else(|| {
        let p = ref_name(v)?;
        let param = path(t, &["Parameters", &p])?;
        get(param, "MaxValue")
            .and_then(number)
            .or_else(|| get(param, "Default").and_then(number))
    })
}

pub fn str_list(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Sequence(s)) => s
            .iter()
            .filter_map(|x| x.as_str().map(str::to_owned))
            .collect(),
        _ => vec![],
    }
}

/// `samconfig.toml` at the repository root.
pub const SAMCONFIG_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../samconfig.toml");

/// Every environment of a `samconfig.toml` (`[<env>.global.parameters]`, in file
/// order) with the parameters its `parameter_overrides` passes, as SAM splits them:
/// `Key=Value` pairs separated by white space, a double-quoted value kept whole.
pub fn samconfig_environments(text: &str) -> Vec<(String, BTreeMap<String, String>)> {
    let mut out: Vec<(String, BTreeMap<String, String>)> = Vec::new();
    let mut current: Option<usize> = None;
    for line in text.lines().map(str::trim) {
        if let Some(header) = line.strip_prefix('[') {
            current = header.strip_suffix(".global.parameters]").map(|env| {
                out.push((env.to_owned(), BTreeMap::new()));
                out.len() - 1
            });
            continue;
        }
        let (Some(i), Some(rest)) = (current, line.strip_prefix("parameter_overrides")) else {
            continue;
        };
        let value = rest.trim_start().trim_start_matches('=').trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value)
            .replace("\\\"", "\"");
        let (mut words, mut word, mut quoted) = (Vec::new(), String::new(), false);
        for c in value.chars() {
            match c {
                '"' => quoted = !quoted,
                c if c.is_whitespace() && !quoted => {
                    if !word.is_empty() {
                        words.push(std::mem::take(&mut word));
                    }
                }
                c => word.push(c),
            }
        }
        if !word.is_empty() {
            words.push(word);
        }
        for w in words {
            if let Some((k, v)) = w.split_once('=') {
                out[i].1.insert(k.to_owned(), v.to_owned());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn samconfig_environments_are_split_as_sam_splits_them() {
        let text = "[default.global.parameters]\nparameter_overrides = \"A=1\"\n[default.deploy.parameters]\nparameter_overrides = \"B=2\"\n[prod.global.parameters]\nparameter_overrides = \"S=\\\"rate(5 minutes)\\\" L=a,b\"\n";
        let envs = samconfig_environments(text);
        assert_eq!(envs.len(), 2);
        assert_eq!(envs[0].0, "default");
        assert_eq!(
            envs[0].1.len(),
            1,
            "a deploy section's overrides are not the environment's"
        );
        assert_eq!(
            envs[1].1.get("S").map(String::as_str),
            Some("rate(5 minutes)")
        );
        assert_eq!(envs[1].1.get("L").map(String::as_str), Some("a,b"));
        let real = samconfig_environments(&std::fs::read_to_string(SAMCONFIG_PATH).unwrap());
        let names: Vec<&str> = real.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["default", "staging", "prod-template"]);
    }
}
