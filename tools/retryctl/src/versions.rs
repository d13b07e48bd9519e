//! What each function of the stack runs: its `live` alias (GetAlias), the version it
//! points at and, while CodeDeploy shifts it, the second version with its weight; each
//! version's release (written on it as `release X.Y.Z` by the template's
//! VersionDescription), code hash and last change (GetFunctionConfiguration). Then
//! [`window`], the one rule of which releases may run side by side
//! (`docs/compatibility.md`): one release, or a release and the one right after it.
//! `retryctl versions` prints it; `retryctl verify` checks it (phase `versions`).

use crate::error::CliError;
use serde::{Serialize, Serializer};
use std::fmt;

/// The alias every event source invokes (`AutoPublishAlias` in `template.yaml`).
pub const ALIAS: &str = "live";

/// How a published version names its release: its description is this prefix and
/// the release (`release 0.1.0`).
pub const DESCRIPTION_PREFIX: &str = "release ";

/// The stack outputs naming the functions, and whether every stack has the function
/// (the HTTP bridge exists only with `HttpEndpoint`). `template.yaml` declares each.
pub const FUNCTION_OUTPUTS: &[(&str, bool)] = &[
    ("ResponseHandlerFunctionName", true),
    ("RetryHandlerFunctionName", true),
    ("ReconcilerFunctionName", true),
    ("AuditWriterFunctionName", true),
    ("StarterFunctionName", true),
    ("HttpBridgeFunctionName", false),
    ("PublisherFunctionName", false),
];

/// The function an output names, as the template calls it (`ResponseHandlerFunction`).
pub fn label(output: &str) -> &str {
    output.strip_suffix("Name").unwrap_or(output)
}

/// A release: the workspace version, `MAJOR.MINOR.PATCH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Release {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
}

impl Release {
    /// `MAJOR.MINOR.PATCH`, three unsigned numbers; anything else is refused.
    pub fn parse(text: &str) -> Result<Self, String> {
        let parts: Vec<&str> = text.split('.').collect();
        let number = |s: &str| {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("`{text}` is not MAJOR.MINOR.PATCH"));
            }
            s.parse::<u64>()
                .map_err(|e| format!("`{text}` is not MAJOR.MINOR.PATCH: {e}"))
        };
        match parts.as_slice() {
            [major, minor, patch] => Ok(Self {
                major: number(major)?,
                minor: number(minor)?,
                patch: number(patch)?,
            }),
            _ => Err(format!("`{text}` is not MAJOR.MINOR.PATCH")),
        }
    }

    /// The release a version's description names (`release 0.1.0`), if it names one.
    pub fn of_description(description: &str) -> Option<Self> {
        description
            .trim()
            .strip_prefix(DESCRIPTION_PREFIX)
            .and_then(|r| Self::parse(r.trim()).ok())
    }

    /// Whether this is the release right after `before`: one of its numbers raised by
    /// one, the numbers after it zero (0.1.0 → 0.1.1, 0.2.0 or 1.0.0).
    pub fn follows(&self, before: &Release) -> bool {
        let b = before;
        *self
            == Release {
                patch: b.patch + 1,
                ..*b
            }
            || *self
                == Release {
                    minor: b.minor + 1,
                    patch: 0,
                    ..*b
                }
            || *self
                == Release {
                    major: b.major + 1,
                    minor: 0,
                    patch: 0,
                }
    }
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl Serialize for Release {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Which releases run side by side, judged by the compatibility policy: release N+1
/// reads what N wrote and N reads N+1's, nothing wider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Window {
    /// Every version runs this release.
    One(Release),
    /// `next` follows `previous`: within the window (a deployment or a rollback in
    /// progress, or a function the last deploy did not change).
    Adjacent { previous: Release, next: Release },
    /// Releases that do not follow one another, or more than two: outside the window.
    Outside(Vec<Release>),
    /// A version whose description names no release: it cannot be held to the window.
    Unknown,
    /// No version at all.
    Nothing,
}

impl Window {
    /// Whether the policy allows this mix.
    pub fn passes(&self) -> bool {
        matches!(self, Window::One(_) | Window::Adjacent { .. })
    }
}

/// The rule: which mix of releases may run at once (one entry per version running,
/// `None` for a version that names no release).
pub fn window(releases: &[Option<Release>]) -> Window {
    if releases.is_empty() {
        return Window::Nothing;
    }
    let mut known: Vec<Release> = Vec::new();
    for r in releases {
        let Some(r) = r else {
            return Window::Unknown;
        };
        if !known.contains(r) {
            known.push(*r);
        }
    }
    known.sort();
    match known.as_slice() {
        [one] => Window::One(*one),
        [previous, next] if next.follows(previous) => Window::Adjacent {
            previous: *previous,
            next: *next,
        },
        _ => Window::Outside(known),
    }
}

/// One version an alias routes to.
#[derive(Debug, Clone, Serialize)]
pub struct Running {
    pub version: String,
    /// Share of the invocations, 0 to 1.
    pub weight: f64,
    /// The release its description names; `null` when it names none.
    pub release: Option<Release>,
    pub description: String,
    pub code_sha256: String,
    pub last_modified: String,
}

/// One function: what its `live` alias runs.
#[derive(Debug, Clone, Serialize)]
pub struct Deployed {
    /// As the template names it (`ResponseHandlerFunction`).
    pub function: String,
    /// The deployed function's name.
    pub name: String,
    /// The version the alias points at, then the one it also routes to while a
    /// deployment shifts it.
    pub versions: Vec<Running>,
}

impl Deployed {
    /// The alias routes to two versions: CodeDeploy is shifting it.
    pub fn shifting(&self) -> bool {
        self.versions.len() > 1
    }

    /// One line: the version(s), weight(s), release(s), code hash(es), last change.
    pub fn describe(&self) -> String {
        let one = |r: &Running| {
            let release = r
                .release
                .map(|x| format!("release {x}"))
                .unwrap_or_else(|| format!("no release named (description `{}`)", r.description));
            format!(
                "version {} ({release}, code {}, modified {})",
                r.version,
                r.code_sha256.chars().take(12).collect::<String>(),
                r.last_modified
            )
        };
        match self.versions.as_slice() {
            [only] => format!("{ALIAS} → {}", one(only)),
            many => format!(
                "{ALIAS} shifting: {}",
                many.iter()
                    .map(|r| format!("{} {}", percent(r.weight), one(r)))
                    .collect::<Vec<_>>()
                    .join(" + ")
            ),
        }
    }
}

fn percent(weight: f64) -> String {
    format!("{:.0} %", weight * 100.0)
}

/// What runs, and the verdict of [`window`] on it.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub functions: Vec<Deployed>,
    /// Every release running, oldest first.
    pub releases: Vec<Release>,
    /// Within the compatibility window.
    pub ok: bool,
    /// The verdict in words.
    pub verdict: String,
    /// The functions whose alias is being shifted.
    pub shifting: Vec<String>,
}

impl Report {
    pub fn of(functions: Vec<Deployed>) -> Self {
        let running: Vec<Option<Release>> = functions
            .iter()
            .flat_map(|d| d.versions.iter().map(|r| r.release))
            .collect();
        let w = window(&running);
        let shifting: Vec<String> = functions
            .iter()
            .filter(|d| d.shifting())
            .map(|d| d.function.clone())
            .collect();
        let mut releases: Vec<Release> = running.iter().flatten().copied().collect();
        releases.sort();
        releases.dedup();
        let verdict = match &w {
            Window::One(r) => format!("every function runs release {r}"),
            Window::Adjacent { previous, next } => format!(
                "releases {previous} and {next} side by side: {next} follows {previous}, within the compatibility window (docs/compatibility.md); deploy nothing newer than {next} until only {next} runs"
            ),
            Window::Outside(rs) => format!(
                "releases {} side by side: outside the compatibility window, which allows a release and the one right after it only (docs/compatibility.md)",
                rs.iter().map(Release::to_string).collect::<Vec<_>>().join(", ")
            ),
            Window::Unknown => {
                let unnamed: Vec<String> = functions
                    .iter()
                    .flat_map(|d| {
                        d.versions
                            .iter()
                            .filter(|r| r.release.is_none())
                            .map(move |r| format!("{} version {}", d.function, r.version))
                    })
                    .collect();
                format!(
                    "{} name(s) no release in its description (published before releases were recorded, or by hand): cannot be held to the compatibility window",
                    unnamed.join(", ")
                )
            }
            Window::Nothing => "no function found".to_owned(),
        };
        Self {
            functions,
            releases,
            ok: w.passes(),
            verdict,
            shifting,
        }
    }

    /// The deployments in progress, in words; `None` when no alias is shifting.
    pub fn shifting_note(&self) -> Option<String> {
        (!self.shifting.is_empty()).then(|| {
            format!(
                "a deployment is in progress: the {ALIAS} alias of {} routes to two versions",
                self.shifting.join(", ")
            )
        })
    }
}

/// The report for people: one line per function, then the verdict.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    for d in &r.functions {
        out.push_str(&format!("{} {}: {}\n", d.function, d.name, d.describe()));
    }
    out.push_str(&format!(
        "\n{}: {}\n",
        if r.ok { "ok" } else { "OUTSIDE THE WINDOW" },
        r.verdict
    ));
    if let Some(note) = r.shifting_note() {
        out.push_str(&format!("{note}\n"));
    }
    out
}

/// Reads what `name`'s `live` alias runs: the alias, then each version it routes to.
pub async fn read(
    lambda: &aws_sdk_lambda::Client,
    function: &str,
    name: &str,
) -> Result<Deployed, CliError> {
    let alias = lambda
        .get_alias()
        .function_name(name)
        .name(ALIAS)
        .send()
        .await
        .map_err(|e| crate::error::sdk_error("GetAlias", &format!("{name}:{ALIAS}"), e))?;
    let primary = alias.function_version().ok_or_else(|| {
        CliError::Aws(format!(
            "GetAlias `{name}:{ALIAS}` returned no FunctionVersion"
        ))
    })?;
    let mut others: Vec<(String, f64)> = alias
        .routing_config()
        .and_then(|c| c.additional_version_weights())
        .map(|w| w.iter().map(|(v, x)| (v.clone(), *x)).collect())
        .unwrap_or_default();
    others.sort_by(|a, b| a.0.cmp(&b.0));
    let rest: f64 = others.iter().map(|(_, w)| w).sum();
    let mut weighted = vec![(primary.to_owned(), (1.0 - rest).max(0.0))];
    weighted.extend(others);
    let mut versions = Vec::with_capacity(weighted.len());
    for (version, weight) in weighted {
        let c = lambda
            .get_function_configuration()
            .function_name(name)
            .qualifier(&version)
            .send()
            .await
            .map_err(|e| {
                crate::error::sdk_error("GetFunctionConfiguration", &format!("{name}:{version}"), e)
            })?;
        let description = c.description().unwrap_or_default().to_owned();
        versions.push(Running {
            release: Release::of_description(&description),
            description,
            code_sha256: c.code_sha256().unwrap_or_default().to_owned(),
            last_modified: c.last_modified().unwrap_or_default().to_owned(),
            version,
            weight,
        });
    }
    Ok(Deployed {
        function: function.to_owned(),
        name: name.to_owned(),
        versions,
    })
}

/// The functions `outputs` names (`get` reads one output): (as the template names
/// it, deployed name). An output every stack has, missing while others are there,
/// is an error naming it; none at all is `Ok(vec![])`.
pub fn functions_of<'a>(
    get: impl Fn(&str) -> Option<&'a str>,
) -> Result<Vec<(String, String)>, String> {
    let found: Vec<(String, String)> = FUNCTION_OUTPUTS
        .iter()
        .filter_map(|(k, _)| get(k).map(|v| (label(k).to_owned(), v.to_owned())))
        .collect();
    if found.is_empty() {
        return Ok(found);
    }
    let missing: Vec<&str> = FUNCTION_OUTPUTS
        .iter()
        .filter(|(k, always)| *always && get(k).is_none())
        .map(|(k, _)| *k)
        .collect();
    if missing.is_empty() {
        Ok(found)
    } else {
        Err(format!(
            "the stack's outputs name some functions but not {}: deploy the current template.yaml",
            missing.join(", ")
        ))
    }
}

/// Reads every function of `functions` (see [`functions_of`]).
pub async fn report(
    sdk: &aws_config::SdkConfig,
    functions: &[(String, String)],
) -> Result<Report, CliError> {
    let lambda = aws_sdk_lambda::Client::new(sdk);
    let mut deployed = Vec::with_capacity(functions.len());
    for (function, name) in functions {
        deployed.push(read(&lambda, function, name).await?);
    }
    Ok(Report::of(deployed))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn r(text: &str) -> Release {
        Release::parse(text).unwrap()
    }

    #[test]
    fn which_release_mixes_pass() {
        // (releases running, one per version; verdict)
        let table: &[(&[Option<&str>], &str)] = &[
            (&[], "nothing"),
            (&[Some("0.1.0")], "one 0.1.0"),
            (&[Some("0.1.0"), Some("0.1.0"), Some("0.1.0")], "one 0.1.0"),
            (&[Some("0.1.0"), Some("0.1.1")], "adjacent 0.1.0 0.1.1"),
            (
                &[Some("0.2.0"), Some("0.1.0"), Some("0.2.0")],
                "adjacent 0.1.0 0.2.0",
            ),
            (&[Some("0.1.7"), Some("0.2.0")], "adjacent 0.1.7 0.2.0"),
            (&[Some("1.4.2"), Some("2.0.0")], "adjacent 1.4.2 2.0.0"),
            (&[Some("0.1.0"), Some("0.3.0")], "outside 0.1.0 0.3.0"),
            (&[Some("0.1.0"), Some("0.1.2")], "outside 0.1.0 0.1.2"),
            (&[Some("0.1.1"), Some("0.2.1")], "outside 0.1.1 0.2.1"),
            (&[Some("1.4.2"), Some("2.1.0")], "outside 1.4.2 2.1.0"),
            (
                &[Some("0.1.0"), Some("0.1.1"), Some("0.1.2")],
                "outside 0.1.0 0.1.1 0.1.2",
            ),
            (&[Some("0.1.0"), None], "unknown"),
            (&[None], "unknown"),
        ];
        for (running, expected) in table {
            let releases: Vec<Option<Release>> = running.iter().map(|x| x.map(r)).collect();
            let got = match window(&releases) {
                Window::Nothing => "nothing".to_owned(),
                Window::One(x) => format!("one {x}"),
                Window::Adjacent { previous, next } => format!("adjacent {previous} {next}"),
                Window::Outside(xs) => format!(
                    "outside {}",
                    xs.iter()
                        .map(Release::to_string)
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
                Window::Unknown => "unknown".to_owned(),
            };
            assert_eq!(&got, expected, "{running:?}");
            let passes = expected.starts_with("one") || expected.starts_with("adjacent");
            assert_eq!(window(&releases).passes(), passes, "{running:?}");
        }
    }

    #[test]
    fn a_release_is_read_from_the_version_description_only_in_its_form() {
        assert_eq!(Release::of_description("release 0.1.0"), Some(r("0.1.0")));
        assert_eq!(
            Release::of_description(" release 12.3.40 "),
            Some(r("12.3.40"))
        );
        for bad in [
            "",
            "0.1.0",
            "release 0.1",
            "release 0.1.0-rc.1",
            "release v0.1.0",
            "Handler A",
        ] {
            assert_eq!(Release::of_description(bad), None, "{bad}");
        }
        let e = Release::parse("0.x.1").unwrap_err();
        assert!(
            e.contains("`0.x.1`") && e.contains("MAJOR.MINOR.PATCH"),
            "{e}"
        );
    }

    #[test]
    fn a_function_output_missing_among_others_is_named() {
        let outputs: std::collections::BTreeMap<&str, &str> = FUNCTION_OUTPUTS
            .iter()
            .filter(|(_, always)| *always)
            .map(|(k, _)| (*k, "fn"))
            .collect();
        let got = functions_of(|k| outputs.get(k).copied()).unwrap();
        assert_eq!(got.len(), 5);
        assert_eq!(got[0], ("ResponseHandlerFunction".into(), "fn".into()));
        assert!(functions_of(|_| None).unwrap().is_empty());
        let e = functions_of(|k| (k == "StarterFunctionName").then_some("s")).unwrap_err();
        assert!(
            e.contains("ResponseHandlerFunctionName") && !e.contains("StarterFunctionName"),
            "{e}"
        );
        assert!(!e.contains("HttpBridgeFunctionName"), "{e}");
    }
}
