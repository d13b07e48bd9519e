//! `retryctl versions` and verify's `versions` phase against functions in moto: each
//! function created with a stand-in zip, versions published with the description the
//! template's VersionDescription writes (`release X.Y.Z`), a `live` alias, and for a
//! canary a routing configuration weighting a second version. The stack is registered
//! in moto's CloudFormation, so the binary reads the function names with `--stack`.
//! Also: the template writes the workspace's release on every version it publishes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use retryctl::versions::{ALIAS, DESCRIPTION_PREFIX, FUNCTION_OUTPUTS};
use serde_json::{json, Value};
use std::io::{Read, Write};

/// moto's account.
const ACCOUNT: &str = "123456789012";

fn endpoint() -> String {
    testkit::moto::shared_endpoint().expect("moto_server on PATH (. scripts/tools.sh)")
}

async fn lambda(endpoint: &str) -> aws_sdk_lambda::Client {
    aws_sdk_lambda::Client::new(&testkit::moto::sdk_config(endpoint).await)
}

/// A role Lambda can be created with: moto refuses a function whose role it does not
/// hold. IAM's query API in one request (no IAM client in this workspace).
fn lambda_role(endpoint: &str, name: &str) -> String {
    let addr = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let body = format!(
        "Action=CreateRole&Version=2010-05-08&RoleName={name}&AssumeRolePolicyDocument=%7B%7D"
    );
    let request = format!(
        "POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/iam/aws4_request, SignedHeaders=host, Signature=0\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    format!("arn:aws:iam::{ACCOUNT}:role/{name}")
}

/// An empty zip archive whose comment is `tag`: a different tag, a different code hash.
fn zip(tag: &str) -> Vec<u8> {
    let mut z = b"PK\x05\x06".to_vec();
    z.extend([0u8; 16]);
    z.extend(u16::try_from(tag.len()).unwrap().to_le_bytes());
    z.extend(tag.as_bytes());
    z
}

/// Creates `name` and publishes one version per release of `releases` (each with its
/// own code), then points `live` at the first, routing `canary` (the share of the
/// second) to the second when given. Returns the code hash of each version.
async fn deploy(
    lambda: &aws_sdk_lambda::Client,
    role: &str,
    name: &str,
    releases: &[&str],
    canary: Option<f64>,
) -> Vec<String> {
    use aws_sdk_lambda::primitives::Blob;
    lambda
        .create_function()
        .function_name(name)
        .runtime(aws_sdk_lambda::types::Runtime::Providedal2023)
        .role(role)
        .handler("bootstrap")
        .description("a function of the stack")
        .code(
            aws_sdk_lambda::types::FunctionCode::builder()
                .zip_file(Blob::new(zip("first")))
                .build(),
        )
        .send()
        .await
        .unwrap();
    let mut hashes = vec![];
    for (i, release) in releases.iter().enumerate() {
        let updated = lambda
            .update_function_code()
            .function_name(name)
            .zip_file(Blob::new(zip(&format!("{name} {i}"))))
            .send()
            .await
            .unwrap();
        let v = lambda
            .publish_version()
            .function_name(name)
            .description(format!("{DESCRIPTION_PREFIX}{release}"))
            .send()
            .await
            .unwrap();
        assert_eq!(v.version(), Some((i + 1).to_string().as_str()));
        hashes.push(updated.code_sha256().unwrap().to_owned());
    }
    let mut alias = lambda
        .create_alias()
        .function_name(name)
        .name(ALIAS)
        .function_version("1");
    if let Some(share) = canary {
        alias = alias.routing_config(
            aws_sdk_lambda::types::AliasRoutingConfiguration::builder()
                .additional_version_weights("2", share)
                .build(),
        );
    }
    alias.send().await.unwrap();
    hashes
}

/// The outputs of a stack whose functions are `{prefix}-<logical id>`: every setting
/// `--stack` reads (stand-in values), and the function names.
fn stack_entry(prefix: &str, with_bridge: bool) -> (Value, Vec<(&'static str, String)>) {
    let mut outputs = vec![];
    let mut params = vec![];
    for (flag, source) in retryctl::stack::FILLED {
        let value = if flag.ends_with("-url") {
            format!("http://127.0.0.1:1/{ACCOUNT}/{prefix}{flag}")
        } else if flag.ends_with("-table") || flag.ends_with("-group") {
            format!("{prefix}{flag}")
        } else if *flag == "--request-delivery" {
            domain::decide::Delivery::Direct.as_str().to_owned()
        } else {
            "60".to_owned()
        };
        match source {
            retryctl::stack::Source::Output(k) => {
                outputs.push(json!({"OutputKey": k, "OutputValue": value}))
            }
            retryctl::stack::Source::Parameter(k) => params.push((*k, value)),
        }
    }
    for (key, always) in FUNCTION_OUTPUTS {
        if *always || with_bridge {
            let function = retryctl::versions::label(key);
            outputs.push(json!({"OutputKey": key, "OutputValue": format!("{prefix}-{function}")}));
        }
    }
    (json!({"StackName": prefix, "Outputs": outputs}), params)
}

/// The stack `prefix`, registered, with every function at `release` but those of
/// `others` (logical id → releases, canary share).
async fn stack(prefix: &str, release: &str, others: &[(&str, &[&str], Option<f64>)]) -> Value {
    let endpoint = endpoint();
    let sdk = testkit::moto::sdk_config(&endpoint).await;
    let lambda = lambda(&endpoint).await;
    let role = lambda_role(&endpoint, &format!("{prefix}-fn"));
    let mut hashes = serde_json::Map::new();
    for (key, always) in FUNCTION_OUTPUTS.iter().filter(|(_, a)| *a) {
        let _ = always;
        let function = retryctl::versions::label(key);
        let (releases, canary) = others
            .iter()
            .find(|(f, _, _)| *f == function)
            .map(|(_, r, c)| (r.to_vec(), *c))
            .unwrap_or((vec![release], None));
        let h = deploy(
            &lambda,
            &role,
            &format!("{prefix}-{function}"),
            &releases,
            canary,
        )
        .await;
        hashes.insert(function.to_owned(), json!(h));
    }
    let (entry, params) = stack_entry(prefix, false);
    sandbox::outputs::register_stack(&sdk, &endpoint, &entry, &params)
        .await
        .unwrap();
    Value::Object(hashes)
}

struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn versions(prefix: &str, json: bool) -> Ran {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_retryctl"));
    command
        .args(["--stack", prefix, "versions"])
        .args(json.then_some("--json"))
        .env("AWS_ENDPOINT_URL", endpoint())
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_REGION", "us-east-1")
        .env_remove("RETRYCTL_PREFIX")
        .env_remove("RETRYCTL_ROLE_ARN");
    for (flag, _) in retryctl::stack::FILLED {
        // A setting in the environment must agree with the stack: none is given.
        command.env_remove(
            flag.trim_start_matches("--")
                .replace('-', "_")
                .to_uppercase(),
        );
    }
    let out = command.output().await.unwrap();
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn function<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"] == name)
        .unwrap_or_else(|| panic!("no {name}: {report:#}"))
}

/// GIVEN every function at release 0.1.0 but the retry handler, whose alias CodeDeploy
/// is shifting to a version of release 0.2.0 (10 %) WHEN `retryctl versions` runs THEN
/// it names each function's version, release and code hash, both versions of the
/// retry handler with their weights, and passes: 0.2.0 follows 0.1.0.
#[tokio::test(flavor = "multi_thread")]
async fn versions_names_each_function_and_a_canary_in_progress() {
    let prefix = testkit::moto::unique_prefix("vcan");
    let hashes = stack(
        &prefix,
        "0.1.0",
        &[("RetryHandlerFunction", &["0.1.0", "0.2.0"], Some(0.1))],
    )
    .await;
    let r = versions(&prefix, true).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let v: Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(v["ok"], true, "{v:#}");
    assert_eq!(v["releases"], json!(["0.1.0", "0.2.0"]));
    assert_eq!(v["shifting"], json!(["RetryHandlerFunction"]));
    assert_eq!(v["functions"].as_array().unwrap().len(), 5);
    let starter = function(&v, "StarterFunction");
    assert_eq!(starter["name"], format!("{prefix}-StarterFunction"));
    assert_eq!(starter["versions"].as_array().unwrap().len(), 1);
    assert_eq!(starter["versions"][0]["version"], "1");
    assert_eq!(starter["versions"][0]["weight"], 1.0);
    assert_eq!(starter["versions"][0]["release"], "0.1.0");
    assert_eq!(
        starter["versions"][0]["code_sha256"],
        hashes["StarterFunction"][0]
    );
    assert!(starter["versions"][0]["last_modified"]
        .as_str()
        .is_some_and(|t| t.starts_with("20")));
    let retry = function(&v, "RetryHandlerFunction");
    let shares: Vec<(String, f64, String, String)> = retry["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["version"].as_str().unwrap().to_owned(),
                (x["weight"].as_f64().unwrap() * 100.0).round(),
                x["release"].as_str().unwrap().to_owned(),
                x["code_sha256"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let h = &hashes["RetryHandlerFunction"];
    assert_eq!(
        shares,
        vec![
            (
                "1".into(),
                90.0,
                "0.1.0".into(),
                h[0].as_str().unwrap().into()
            ),
            (
                "2".into(),
                10.0,
                "0.2.0".into(),
                h[1].as_str().unwrap().into()
            ),
        ]
    );
    assert_ne!(h[0], h[1]);
    let text = versions(&prefix, false).await;
    assert_eq!(text.code, 0, "{}", text.stderr);
    for says in [
        "RetryHandlerFunction",
        "live shifting: 90 % version 1 (release 0.1.0",
        "+ 10 % version 2 (release 0.2.0",
        "0.2.0 follows 0.1.0, within the compatibility window",
        "a deployment is in progress: the live alias of RetryHandlerFunction",
        "StarterFunction",
    ] {
        assert!(text.stdout.contains(says), "{says}:\n{}", text.stdout);
    }
}

/// GIVEN one function at release 0.3.0 and the others at 0.1.0 WHEN `retryctl
/// versions` runs THEN it prints the report, names both releases as outside the
/// compatibility window and exits 6.
#[tokio::test(flavor = "multi_thread")]
async fn releases_outside_the_window_exit_6() {
    let prefix = testkit::moto::unique_prefix("vout");
    stack(&prefix, "0.1.0", &[("StarterFunction", &["0.3.0"], None)]).await;
    let r = versions(&prefix, true).await;
    assert_eq!(r.code, 6, "{}\n{}", r.stdout, r.stderr);
    let v: Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(v["ok"], false, "{v:#}");
    assert_eq!(v["releases"], json!(["0.1.0", "0.3.0"]));
    assert!(
        r.stderr
            .contains("releases 0.1.0, 0.3.0 side by side: outside the compatibility window"),
        "{}",
        r.stderr
    );
}

/// verify's `versions` phase: one passing check per function and one for the
/// releases (with the canary's note); a function the outputs name but Lambda does not
/// hold fails its check, naming it; outputs naming no function skip the phase.
#[tokio::test(flavor = "multi_thread")]
async fn verify_checks_each_function_and_the_releases() {
    let prefix = testkit::moto::unique_prefix("vvfy");
    stack(
        &prefix,
        "0.4.2",
        &[("AuditWriterFunction", &["0.4.2", "0.5.0"], Some(0.3))],
    )
    .await;
    let sdk = testkit::moto::sdk_config(&endpoint()).await;
    let run = |entry: Value| {
        let sdk = sdk.clone();
        async move {
            let mut outputs = retryctl::verify::outputs::StackOutputs::default();
            outputs
                .add("test", &json!({ "Stacks": [entry] }).to_string())
                .unwrap();
            let mut checks = retryctl::verify::Checks::default();
            let report = retryctl::verify::versions::check(&sdk, &outputs, &mut checks).await;
            (report, checks.list)
        }
    };
    let (report, checks) = run(stack_entry(&prefix, false).0).await;
    assert!(report.is_some_and(|r| r.ok));
    assert_eq!(checks.len(), 6, "{checks:#?}");
    assert!(checks
        .iter()
        .all(|c| c.phase == "versions" && c.status == retryctl::verify::CheckStatus::Pass));
    let releases = checks.iter().find(|c| c.subject == "releases").unwrap();
    assert!(
        releases.detail.contains("0.5.0 follows 0.4.2")
            && releases
                .detail
                .contains("live alias of AuditWriterFunction"),
        "{}",
        releases.detail
    );
    // The bridge's output, for a function that was never created.
    let (report, checks) = run(stack_entry(&prefix, true).0).await;
    assert!(report.is_none());
    let bridge = checks
        .iter()
        .find(|c| c.subject.starts_with("HttpBridgeFunction "))
        .unwrap();
    assert_eq!(bridge.status, retryctl::verify::CheckStatus::Fail);
    assert!(
        bridge.detail.contains("GetAlias")
            && bridge
                .detail
                .contains(&format!("{prefix}-HttpBridgeFunction")),
        "{}",
        bridge.detail
    );
    let (report, checks) = run(json!({"StackName": "local", "Outputs": []})).await;
    assert!(report.is_none());
    assert_eq!(checks.len(), 1);
    assert_eq!(checks[0].status, retryctl::verify::CheckStatus::Skip);
}

/// The template publishes every function behind the alias `versions` reads, writes
/// this workspace's release on each version it publishes, and declares the outputs
/// naming the functions.
#[test]
fn the_template_writes_the_workspace_release_on_every_version() {
    use serde_yaml::Value as Y;
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../template.yaml"))
        .unwrap();
    let t: Y = serde_yaml::from_str(&text).unwrap();
    let release = t["Mappings"]["Release"]["Workspace"]["VersionDescription"]
        .as_str()
        .unwrap();
    assert_eq!(
        release,
        format!("{DESCRIPTION_PREFIX}{}", env!("CARGO_PKG_VERSION")),
        "the release the template writes is the workspace version"
    );
    assert_eq!(
        retryctl::versions::Release::of_description(release).map(|r| r.to_string()),
        Some(env!("CARGO_PKG_VERSION").to_owned())
    );
    let mut functions = vec![];
    for (id, r) in t["Resources"].as_mapping().unwrap() {
        if r["Type"] != "AWS::Serverless::Function" {
            continue;
        }
        let id = id.as_str().unwrap();
        functions.push(id.to_owned());
        assert_eq!(r["Properties"]["AutoPublishAlias"], ALIAS, "{id}");
        let Y::Tagged(found) = &r["Properties"]["VersionDescription"] else {
            panic!("{id} has no VersionDescription: !FindInMap [Release, Workspace, VersionDescription]");
        };
        assert_eq!(found.tag, "!FindInMap", "{id}");
        assert_eq!(
            found.value,
            serde_yaml::from_str::<Y>("[Release, Workspace, VersionDescription]").unwrap(),
            "{id}"
        );
    }
    let mut named: Vec<String> = FUNCTION_OUTPUTS
        .iter()
        .map(|(k, _)| {
            let Y::Tagged(value) = &t["Outputs"][*k]["Value"] else {
                panic!("output {k} is not declared as !Ref <function>");
            };
            assert_eq!(value.tag, "!Ref", "{k}");
            let f = value.value.as_str().unwrap().to_owned();
            assert_eq!(f, retryctl::versions::label(k), "{k}");
            f
        })
        .collect();
    functions.sort();
    named.sort();
    assert_eq!(functions, named, "every function is named by an output");
}
