//! Placeholders left in a deployed stack's parameters: the documentation accounts and
//! domains `template.yaml`'s AllowedPatterns refuse (a test checks both lists against
//! the template). A stack deployed before those patterns existed, or a value the
//! patterns do not cover, still carries one: the check reports each.

use super::outputs::StackOutputs;
use super::Checks;

/// The AWS accounts AWS documentation uses as examples.
pub const ACCOUNTS: [&str; 4] = [
    "111122223333",
    "123456789012",
    "444455556666",
    "777788889999",
];

/// The documentation domains (RFC 2606) of an e-mail address.
pub const DOMAINS: [&str; 3] = ["example.com", "example.org", "example.net"];

/// Why `value` (one value of a parameter; a list's values one by one) is a
/// documentation placeholder, if it is one.
pub fn placeholder(value: &str) -> Option<String> {
    let v = value.trim();
    if let Some(a) = ACCOUNTS.iter().find(|a| v.contains(*a)) {
        return Some(format!("documentation account {a}"));
    }
    let domain = v.rsplit_once('@')?.1.to_ascii_lowercase();
    DOMAINS
        .iter()
        .find(|d| domain == **d || domain.ends_with(&format!(".{d}")))
        .map(|d| format!("documentation domain {d}"))
}

/// One check of every parameter of the stacks given: each placeholder fails it, named
/// with its stack and parameter; skipped when no file carries `Parameters`.
pub fn check(outputs: &StackOutputs, checks: &mut Checks) {
    const SUBJECT: &str = "Parameters (placeholders)";
    if outputs.parameters.is_empty() {
        checks.skip(
            "resources",
            SUBJECT,
            "not checked: no outputs file carries the stacks' Parameters (`aws cloudformation describe-stacks` prints them)".to_owned(),
        );
        return;
    }
    let found: Vec<String> = outputs
        .parameters
        .iter()
        .flat_map(|(stack, key, value)| {
            value.split(',').filter_map(move |one| {
                placeholder(one).map(|why| format!("{stack} {key}={one} ({why})"))
            })
        })
        .collect();
    if found.is_empty() {
        checks.pass(
            "resources",
            SUBJECT,
            format!(
                "{} parameter(s), none a documentation placeholder",
                outputs.parameters.len()
            ),
        );
    } else {
        checks.fail(
            "resources",
            SUBJECT,
            format!(
                "deployed with documentation placeholders, replace them (docs/deploy.md, Placeholders cannot deploy): {}",
                found.join("; ")
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::super::CheckStatus;
    use super::*;

    fn verified(parameters: &str) -> Vec<super::super::Check> {
        let mut o = StackOutputs::default();
        let doc = format!(
            r#"{{"Stacks":[{{"StackName":"dr","Outputs":[],"Parameters":{parameters}}}]}}"#
        );
        o.add("prod.json", &doc).unwrap();
        let mut c = Checks::default();
        check(&o, &mut c);
        c.list
    }

    #[test]
    fn each_placeholder_left_in_the_parameters_is_named() {
        let c = verified(
            r#"[{"ParameterKey":"AlarmEmail","ParameterValue":"oncall@Example.com"},
                {"ParameterKey":"ServicePrincipalArns","ParameterValue":"arn:aws:iam::210987654321:role/s,arn:aws:iam::111122223333:role/x"},
                {"ParameterKey":"ReconcileShards","ParameterValue":"16"}]"#,
        );
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].status, CheckStatus::Fail);
        assert!(
            c[0].detail.contains("dr AlarmEmail=oncall@Example.com (documentation domain example.com)")
                && c[0].detail.contains(
                    "dr ServicePrincipalArns=arn:aws:iam::111122223333:role/x (documentation account 111122223333)"
                )
                && !c[0].detail.contains("210987654321"),
            "{}",
            c[0].detail
        );
        let c = verified(
            r#"[{"ParameterKey":"AlarmEmail","ParameterValue":"oncall@mail.example.org.real.io"},
                {"ParameterKey":"ServicePrincipalArns","ParameterValue":""}]"#,
        );
        assert_eq!(c[0].status, CheckStatus::Pass, "{}", c[0].detail);
        let c = verified("[]");
        assert_eq!(c[0].status, CheckStatus::Skip);
    }
}
