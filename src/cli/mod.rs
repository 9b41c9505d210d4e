//! The command line: `serve`, `bootstrap`, `certgen`, `translate`, `convert`, `plugins`,
//! `version`.
//! Flag names are Contour's.

pub mod bootstrap;
pub mod certgen;
pub mod convert;
pub mod crds;
pub mod debug;
pub mod envoy;
pub mod http;
pub mod output;
pub mod serve;
pub mod translate;
pub mod xds_client;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde_json::Value;

use crate::cli::bootstrap::BootstrapArgs;

mod args;

use crate::config::Config;
use args::SERVE_FLAG_KEYS;
pub use args::{ConfigArgs, ServeArgs};

#[derive(Debug, Parser)]
#[command(
    name = "isobar",
    version,
    about = "A Contour-compatible ingress control plane for Envoy"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log output format: text or json (Contour's global flag).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum, Default, PartialEq, Eq)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Watch routing objects and serve them to Envoy over xDS.
    Serve(Box<ServeArgs>),
    /// Write an Envoy bootstrap that points Envoy at Isobar.
    Bootstrap(BootstrapArgs),
    /// Print the Envoy resources and object conditions for a manifest directory.
    Translate(TranslateArgs),
    /// Contour's xDS debug client: subscribe to one resource type and print responses.
    Cli(crate::cli::xds_client::CliArgs),
    /// Envoy's graceful shutdown (Contour's `envoy shutdown-manager` and `envoy shutdown`).
    #[command(subcommand)]
    Envoy(crate::cli::envoy::EnvoyCommand),
    /// Generate the CA and the certificates for xDS over mutual TLS (Contour's certgen).
    Certgen(crate::cli::certgen::CertgenArgs),
    /// Write HTTPProxies and Ingresses (a directory, a file or stdin) as Gateway API
    /// objects, with a report of what has no Gateway API equivalent.
    Convert(crate::cli::convert::ConvertArgs),
    /// List the plugins built into this binary, with their settings at their defaults.
    Plugins(PluginsArgs),
    /// Print the HTTPProxy, TLSCertificateDelegation and ExtensionService CRDs (`deploy/crds.yaml`).
    Crds,
    /// Print the CRDs Gatekeeper would install for some ConstraintTemplates (the
    /// ConstraintTemplate CRD, and a Constraint CRD per template), for a cluster
    /// without Gatekeeper.
    GatekeeperCrds(GatekeeperCrdsArgs),
    /// Print the version.
    Version,
}

#[derive(Debug, Clone, Default, clap::Args)]
pub struct GatekeeperCrdsArgs {
    /// Manifest files or directories holding ConstraintTemplates.
    pub paths: Vec<std::path::PathBuf>,
}

#[derive(Debug, Clone, Default, clap::Args)]
pub struct PluginsArgs {
    /// Print the JSON schema of each plugin's settings instead (`{name: schema}`).
    #[arg(long)]
    pub schema: bool,
}

#[derive(Debug, Clone, clap::ValueEnum, Default, PartialEq, Eq)]
pub enum Format {
    #[default]
    Yaml,
    Json,
}

#[derive(Debug, Clone, clap::Args)]
pub struct TranslateArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Directory of manifests to translate (or give it as the argument).
    #[arg(long = "manifests", value_name = "DIR")]
    pub manifests_flag: Option<PathBuf>,
    /// Directory of manifests to translate.
    #[arg(value_name = "DIR", conflicts_with = "manifests_flag")]
    pub dir: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Yaml)]
    pub output: Format,
    /// Exit non-zero when an object is invalid (an error condition, or a Gateway API
    /// `Accepted`, `ResolvedRefs` or `Programmed` condition False): a lint for CI.
    #[arg(long)]
    pub strict: bool,
}

impl TranslateArgs {
    /// The manifest directory, given as `--manifests DIR` or as the argument.
    pub fn manifests(&self) -> anyhow::Result<&PathBuf> {
        self.manifests_flag
            .as_ref()
            .or(self.dir.as_ref())
            .ok_or_else(|| anyhow::anyhow!("give a manifest directory: isobar translate DIR"))
    }
}

/// Logs to standard error as `format` says, `debug` and above with `debug`; the
/// Kubernetes client's own requests at `kubernetes` (`--kubernetes-debug`).
fn init_logging(debug: bool, format: LogFormat, kubernetes: Option<u32>) {
    let mut default = if debug { "debug" } else { "info" }.to_string();
    match kubernetes {
        Some(level) if level >= 6 => default.push_str(",kube=trace,kube_client=trace"),
        Some(level) if level >= 1 => default.push_str(",kube=debug,kube_client=debug"),
        _ => {}
    }
    let filter = tracing_subscriber::EnvFilter::try_from_env("ISOBAR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
    };
}

/// The command line, with `serve --help` showing the default of each flag that sets a
/// contour.yaml key (`SERVE_FLAG_KEYS`), read from [`Config::default`].
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    let defaults = serde_json::to_value(Config::default()).unwrap_or_default();
    Cli::command().mut_subcommand("serve", |mut serve| {
        for (id, path) in SERVE_FLAG_KEYS {
            let value = path
                .split('.')
                .try_fold(&defaults, |node, key| node.get(key));
            let shown = match value {
                Some(Value::String(text)) if !text.is_empty() => text.clone(),
                Some(Value::Number(n)) => n.to_string(),
                _ => continue,
            };
            serve = serve.mut_arg(*id, |arg| {
                let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
                arg.help(format!("{help} [default: {shown}]"))
            });
        }
        serve
    })
}

pub fn main() -> ExitCode {
    use clap::FromArgMatches;
    let cli = match Cli::from_arg_matches(&command().get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let format = cli.log_format;
    let init_logging = |debug: bool| init_logging(debug, format, None);
    let result = match cli.command {
        Command::Serve(args) => match args.load_config_resource() {
            Ok(config) => {
                self::init_logging(config.debug, format, args.kubernetes_debug);
                let provider = args.provider(&config);
                crate::cli::serve::run(config, provider)
            }
            Err(e) => Err(anyhow::anyhow!(e)),
        },
        Command::Bootstrap(args) => crate::cli::bootstrap::write(&args),
        Command::Translate(args) => {
            init_logging(false);
            crate::cli::translate::run(&args)
        }
        Command::Cli(args) => {
            init_logging(false);
            crate::cli::xds_client::run(&args)
        }
        Command::Envoy(command) => {
            init_logging(false);
            crate::cli::envoy::run(&command)
        }
        Command::Certgen(args) => {
            init_logging(false);
            crate::cli::certgen::run(&args)
        }
        Command::Convert(args) => {
            init_logging(false);
            crate::cli::convert::run(&args)
        }
        Command::Plugins(args) => {
            print!("{}", plugins(&args));
            Ok(ExitCode::SUCCESS)
        }
        .map(|_| ()),
        Command::Version => {
            println!("isobar {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        Command::Crds => {
            print!("{}", crate::cli::crds::yaml());
            Ok(())
        }
        Command::GatekeeperCrds(args) => {
            crate::cli::crds::gatekeeper_yaml(&args.paths).map(|text| print!("{text}"))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("isobar: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `isobar plugins`: each plugin's name, kind and summary, and its `plugins.<name>`
/// section at its defaults; with `--schema`, the JSON schema of every section.
fn plugins(args: &PluginsArgs) -> String {
    let all = crate::runner::pipeline::registered_plugins();
    if args.schema {
        let schemas: serde_json::Map<String, Value> = all
            .iter()
            .filter_map(|p| Some((p.name.to_string(), p.settings?.schema())))
            .collect();
        return format!("{:#}\n", Value::Object(schemas));
    }
    let mut out = String::new();
    for p in all {
        out.push_str(&format!(
            "{:<16} {:<10} {}\n",
            p.name,
            p.kind().as_str(),
            p.summary
        ));
        if let Some(settings) = p.settings {
            out.push_str(&format!("{:<27}settings: {}\n", "", settings.defaults()));
        }
    }
    out
}
