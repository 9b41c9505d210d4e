//! Loading: the layers merged, and what is wrong with them said one line per problem.

use super::*;

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `-c` named a file that cannot be read.
    #[error("config file {path}: {error}")]
    Unreadable { path: String, error: std::io::Error },
    /// A key or value figment could not use; the message names the key and its source.
    #[error("{}", describe(.0))]
    Invalid(Box<figment::Error>),
    /// A value that parses but cannot be used.
    #[error("{0}")]
    Setting(String),
}

/// One line per problem: where the value came from, the dotted key, what is wrong.
fn describe(error: &figment::Error) -> String {
    error
        .clone()
        .into_iter()
        .map(|e| {
            let source = e
                .metadata
                .as_ref()
                .map(|m| match &m.source {
                    Some(figment::Source::File(path)) => path.display().to_string(),
                    _ => m.name.to_string(),
                })
                .unwrap_or_else(|| "configuration".to_string());
            let key = e.path.join(".");
            if key.is_empty() {
                format!("{source}: {}", e.kind)
            } else {
                format!("{source}: {key}: {}", e.kind)
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Merges the layers; `flags` holds only the flags given on the command line.
pub fn load(path: Option<&Path>, flags: serde_json::Value) -> Result<Config, ConfigError> {
    load_with(path, None, flags)
}

/// [`load`], with a ContourConfiguration's settings (as `contour.yaml` keys) in the
/// place of the file.
pub fn load_with(
    path: Option<&Path>,
    resource: Option<serde_json::Value>,
    flags: serde_json::Value,
) -> Result<Config, ConfigError> {
    let mut figment = Figment::from(Serialized::defaults(Config::default()));
    if let Some(resource) = resource {
        figment = figment.merge(Serialized::globals(resource));
    }
    if let Some(path) = path {
        std::fs::metadata(path).map_err(|error| ConfigError::Unreadable {
            path: path.display().to_string(),
            error,
        })?;
        figment = figment.merge(Yaml::file_exact(path));
    }
    figment = figment
        .merge(env_provider())
        .merge(Serialized::globals(flags));
    let config: Config = figment
        .extract()
        .map_err(|e| ConfigError::Invalid(Box::new(e)))?;
    let mut config = config;
    config.tls.validate().map_err(ConfigError::Setting)?;
    contour::validate(&config).map_err(ConfigError::Setting)?;
    contour::apply_metrics(&mut config);
    sections::validate(&config).map_err(ConfigError::Setting)?;
    config
        .leader_election
        .validate()
        .map_err(ConfigError::Setting)?;
    Ok(config)
}

/// `ISOBAR_XDS_SERVER__PORT=9001` sets `xds-server.port`: `__` nests, `_` is a dash.
/// `ISOBAR_LOG` is the log filter and `ISOBAR_BUILD_…` are options of the build
/// (`build.rs`), not keys: a shell that builds Isobar can run it.
fn env_provider() -> Env {
    Env::prefixed("ISOBAR_")
        .filter(|key| key != "log" && !key.starts_with("build_"))
        .map(|key| key.as_str().replace("__", ".").replace('_', "-").into())
}
