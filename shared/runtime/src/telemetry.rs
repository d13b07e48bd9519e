//! Tracing for Lambda: JSON lines when `AWS_LAMBDA_LOG_FORMAT=JSON` (SAM's
//! `LoggingConfig: {LogFormat: JSON}`), the level from `AWS_LAMBDA_LOG_LEVEL`
//! (`ApplicationLogLevel`), else `RUST_LOG` (any `EnvFilter` directives), else INFO.
//! Lines go to stdout, where the Lambda runtime collects them; every record's lines
//! carry its span (`message_id`, `transaction_id`, `attempt`).

use tracing_subscriber::filter::{EnvFilter, LevelFilter};

/// How logs are written, from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    pub json: bool,
    /// `EnvFilter` directives.
    pub filter: String,
}

impl LogSettings {
    /// From the values of `AWS_LAMBDA_LOG_FORMAT`, `AWS_LAMBDA_LOG_LEVEL`, `RUST_LOG`.
    pub fn from_values(format: Option<&str>, level: Option<&str>, rust_log: Option<&str>) -> Self {
        let json = format.is_some_and(|f| f.eq_ignore_ascii_case("json"));
        let filter = match (level, rust_log) {
            // Lambda's levels: TRACE DEBUG INFO WARN ERROR FATAL.
            (Some(l), _) if !l.trim().is_empty() => match l.trim().to_ascii_lowercase().as_str() {
                "fatal" => "error".to_owned(),
                other => other.to_owned(),
            },
            (_, Some(r)) if !r.trim().is_empty() => r.trim().to_owned(),
            _ => "info".to_owned(),
        };
        Self { json, filter }
    }

    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok();
        Self::from_values(
            var("AWS_LAMBDA_LOG_FORMAT").as_deref(),
            var("AWS_LAMBDA_LOG_LEVEL").as_deref(),
            var("RUST_LOG").as_deref(),
        )
    }

    fn env_filter(&self) -> EnvFilter {
        EnvFilter::builder()
            .with_default_directive(LevelFilter::INFO.into())
            .parse_lossy(&self.filter)
    }
}

/// Installs the global subscriber (once per process; later calls do nothing).
pub fn init() {
    let settings = LogSettings::from_env();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(settings.env_filter())
        .with_target(false)
        .without_time()
        .with_writer(std::io::stdout);
    let _ = if settings.json {
        builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .flatten_event(true)
            .try_init()
    } else {
        builder.try_init()
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lambda_level_wins_over_rust_log_and_json_is_case_insensitive() {
        let s = LogSettings::from_values(Some("json"), Some("DEBUG"), Some("warn"));
        assert!(s.json);
        assert_eq!(s.filter, "debug");
        let s = LogSettings::from_values(Some("Text"), None, Some("info,aws_smithy_runtime=warn"));
        assert!(!s.json);
        assert_eq!(s.filter, "info,aws_smithy_runtime=warn");
        assert_eq!(LogSettings::from_values(None, None, None).filter, "info");
        assert_eq!(
            LogSettings::from_values(None, Some("FATAL"), None).filter,
            "error"
        );
    }
}
