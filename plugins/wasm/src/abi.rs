//! ABI version 1 between Isobar and a WebAssembly processor (see `plugins/wasm/ABI.md`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use wasmtime::{
    Config, Engine, InstancePre, Linker, Store, StoreLimits, StoreLimitsBuilder, Trap, TypedFunc,
};

use isobar_sdk::headers::{escape_header_value, is_header_name, is_header_value};
use isobar_sdk::ir::{Ir, PathMatch};

use crate::ModuleConfig;

pub const ABI_VERSION: i32 = 1;

/// The most a module may answer, and the most it may ask for in one answer.
const MAX_OUTPUT_BYTES: usize = 16 << 20;
const MAX_HEADERS_PER_CHANGE: usize = 64;
const MAX_VALUE_BYTES: usize = 8 << 10;
const MAX_MESSAGE_BYTES: usize = 1 << 10;
const MAX_CONDITIONS: usize = 1_000;

pub fn engine() -> Result<Engine, String> {
    let mut config = Config::new();
    config.consume_fuel(true);
    Engine::new(&config).map_err(|e| format!("wasmtime: {e:#}"))
}

/// Why a module's answer was dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The module trapped (an `unreachable`, an out-of-bounds access, …).
    Trap(String),
    /// It used up its fuel: an endless or too long computation.
    OutOfFuel,
    /// It asked for more memory than `max-memory-mb`.
    Memory(String),
    /// Its answer was not valid ABI v1 output (or named a vhost that does not exist).
    BadOutput(String),
}

impl Failure {
    /// A short label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Failure::Trap(_) => "trap",
            Failure::OutOfFuel => "out-of-fuel",
            Failure::Memory(_) => "out-of-memory",
            Failure::BadOutput(_) => "bad-output",
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Trap(e) => write!(f, "trapped: {e}"),
            Failure::OutOfFuel => f.write_str("ran out of fuel"),
            Failure::Memory(e) => write!(f, "exceeded its memory limit: {e}"),
            Failure::BadOutput(e) => write!(f, "returned unusable output: {e}"),
        }
    }
}

fn classify(error: wasmtime::Error) -> Failure {
    if let Some(trap) = error.downcast_ref::<Trap>() {
        return match trap {
            Trap::OutOfFuel => Failure::OutOfFuel,
            other => Failure::Trap(other.to_string()),
        };
    }
    let text = format!("{error:#}");
    if text.contains("memory") {
        Failure::Memory(text)
    } else {
        Failure::Trap(text)
    }
}

/// What a module answers.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Output {
    #[serde(default)]
    pub changes: Vec<Change>,
    #[serde(default)]
    pub conditions: Vec<ReportedCondition>,
}

/// Headers to set or remove on every route of one vhost.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Change {
    pub vhost: String,
    #[serde(default)]
    pub request_headers_set: BTreeMap<String, String>,
    #[serde(default)]
    pub response_headers_set: BTreeMap<String, String>,
    #[serde(default)]
    pub request_headers_remove: Vec<String>,
    #[serde(default)]
    pub response_headers_remove: Vec<String>,
}

/// A problem a module reports, on the objects routing `vhost` (all, without one).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportedCondition {
    #[serde(default)]
    pub vhost: Option<String>,
    pub message: String,
}

pub struct State {
    limits: StoreLimits,
}

/// A compiled module, ready to instantiate once per build.
pub struct Module {
    name: String,
    engine: Engine,
    pre: InstancePre<State>,
    /// `config`, serialized once.
    config: String,
    fuel: u64,
    max_memory: usize,
}

impl Module {
    pub fn load(engine: &Engine, config: &ModuleConfig) -> Result<Module, String> {
        let bytes = std::fs::read(&config.path).map_err(|e| format!("{}: {e}", config.path))?;
        let module =
            wasmtime::Module::new(engine, &bytes).map_err(|e| format!("{}: {e:#}", config.path))?;
        if let Some(import) = module.imports().next() {
            return Err(format!(
                "{}: imports {}.{}; ABI v1 modules import nothing",
                config.path,
                import.module(),
                import.name()
            ));
        }
        let linker = Linker::new(engine);
        let pre = linker
            .instantiate_pre(&module)
            .map_err(|e| format!("{}: {e:#}", config.path))?;
        let max_memory =
            usize::try_from(config.max_memory_mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
        let loaded = Module {
            name: config.name.clone(),
            engine: engine.clone(),
            pre,
            config: serde_json::to_string(&config.config).unwrap_or_else(|_| "null".into()),
            fuel: config.fuel,
            max_memory,
        };
        // Check the exports and the ABI version now, so a wrong module stops start-up.
        let mut store = loaded.store().map_err(|e| e.to_string())?;
        let instance = loaded
            .pre
            .instantiate(&mut store)
            .map_err(|e| format!("{}: {}", config.path, classify(e)))?;
        let version = instance
            .get_typed_func::<(), i32>(&mut store, "isobar_abi_version")
            .map_err(|e| format!("{}: {e:#}", config.path))?
            .call(&mut store, ())
            .map_err(|e| format!("{}: isobar_abi_version {}", config.path, classify(e)))?;
        if version != ABI_VERSION {
            return Err(format!(
                "{}: ABI version {version}; this Isobar speaks version {ABI_VERSION}",
                config.path
            ));
        }
        exports(&instance, &mut store).map_err(|e| format!("{}: {e}", config.path))?;
        Ok(loaded)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    fn store(&self) -> Result<Store<State>, Failure> {
        let limits = StoreLimitsBuilder::new()
            .memory_size(self.max_memory)
            .instances(1)
            .trap_on_grow_failure(true)
            .build();
        let mut store = Store::new(&self.engine, State { limits });
        store.limiter(|s| &mut s.limits);
        store
            .set_fuel(self.fuel)
            .map_err(|e| Failure::Trap(format!("{e:#}")))?;
        Ok(store)
    }

    /// One call on a fresh instance: `vhosts` (from [`vhosts_json`]) in, output out.
    pub fn run(&self, vhosts: &str) -> Result<Output, Failure> {
        let input = format!(
            "{{\"abi\":{ABI_VERSION},\"config\":{},\"vhosts\":{vhosts}}}",
            self.config
        );
        let len = i32::try_from(input.len())
            .map_err(|_| Failure::Memory(format!("input of {} bytes", input.len())))?;
        let mut store = self.store()?;
        let instance = self.pre.instantiate(&mut store).map_err(classify)?;
        let (memory, alloc, process) =
            exports(&instance, &mut store).map_err(Failure::BadOutput)?;
        let ptr = alloc.call(&mut store, len).map_err(classify)?;
        memory
            .write(&mut store, ptr as u32 as usize, input.as_bytes())
            .map_err(|_| {
                Failure::BadOutput(format!("isobar_alloc returned {ptr}, outside memory"))
            })?;
        let packed = process.call(&mut store, (ptr, len)).map_err(classify)? as u64;
        let (at, size) = ((packed >> 32) as usize, (packed & 0xffff_ffff) as usize);
        if size > MAX_OUTPUT_BYTES {
            return Err(Failure::BadOutput(format!(
                "{size} bytes of output (at most {MAX_OUTPUT_BYTES})"
            )));
        }
        let bytes = memory
            .data(&store)
            .get(at..at.saturating_add(size))
            .ok_or_else(|| {
                Failure::BadOutput(format!("output at {at}+{size} lies outside memory"))
            })?;
        serde_json::from_slice(bytes).map_err(|e| Failure::BadOutput(e.to_string()))
    }
}

type Exports = (
    wasmtime::Memory,
    TypedFunc<i32, i32>,
    TypedFunc<(i32, i32), i64>,
);

fn exports(instance: &wasmtime::Instance, store: &mut Store<State>) -> Result<Exports, String> {
    let memory = instance
        .get_memory(&mut *store, "memory")
        .ok_or("no exported memory named \"memory\"")?;
    let alloc = instance
        .get_typed_func::<i32, i32>(&mut *store, "isobar_alloc")
        .map_err(|e| format!("isobar_alloc: {e:#}"))?;
    let process = instance
        .get_typed_func::<(i32, i32), i64>(&mut *store, "isobar_process")
        .map_err(|e| format!("isobar_process: {e:#}"))?;
    Ok((memory, alloc, process))
}

#[derive(Serialize)]
struct VhostIn<'a> {
    fqdn: &'a str,
    tls: bool,
    routes: Vec<RouteIn<'a>>,
}

#[derive(Serialize)]
struct RouteIn<'a> {
    path: &'a str,
    #[serde(rename = "match")]
    kind: &'static str,
    source: String,
}

/// The IR's virtual hosts as ABI v1 input: one entry per FQDN, the HTTPS one when it has
/// both.
pub fn vhosts_json(ir: &Ir) -> String {
    let mut list = Vec::new();
    let mut chosen: BTreeMap<&String, (&isobar_sdk::ir::VirtualHost, bool)> = BTreeMap::new();
    for listener in ir.listeners.values() {
        for (fqdn, vhost) in &listener.virtual_hosts {
            chosen.entry(fqdn).or_insert((vhost, false));
        }
    }
    for listener in ir.listeners.values() {
        for (fqdn, secure) in &listener.secure_virtual_hosts {
            chosen.insert(fqdn, (&secure.http, true));
        }
    }
    for (fqdn, (vhost, tls)) in chosen {
        let routes = vhost
            .routes
            .values()
            .map(|r| {
                let (path, kind) = match &r.matcher.path {
                    PathMatch::Prefix(p) => (p.as_str(), "prefix"),
                    PathMatch::SegmentPrefix(p) => (p.as_str(), "segment-prefix"),
                    PathMatch::Exact(p) => (p.as_str(), "exact"),
                    PathMatch::Regex(p) => (p.as_str(), "regex"),
                };
                RouteIn {
                    path,
                    kind,
                    source: format!("{}/{}/{}", r.source.kind, r.source.namespace, r.source.name),
                }
            })
            .collect();
        list.push(VhostIn {
            fqdn: fqdn.as_str(),
            tls,
            routes,
        });
    }
    serde_json::to_string(&list).unwrap_or_else(|_| "[]".into())
}

fn header_name_ok(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    is_header_name(&lower) && lower != "host"
}

/// Checks a whole answer before any of it applies.
pub fn validate(output: &Output, ir: &Ir) -> Result<(), Failure> {
    let bad = |m: String| Err(Failure::BadOutput(m));
    let fqdns = ir.fqdns();
    for change in &output.changes {
        if !fqdns.contains(&change.vhost) {
            return bad(format!(
                "change names vhost {:?}, which does not exist",
                change.vhost
            ));
        }
        let sets = change
            .request_headers_set
            .iter()
            .chain(&change.response_headers_set);
        let removes = change
            .request_headers_remove
            .iter()
            .chain(&change.response_headers_remove);
        if sets.clone().count() + removes.clone().count() > MAX_HEADERS_PER_CHANGE {
            return bad(format!(
                "more than {MAX_HEADERS_PER_CHANGE} headers in one change"
            ));
        }
        for (name, value) in sets {
            if !header_name_ok(name) {
                return bad(format!("{name:?} is not a header name Envoy can set"));
            }
            if value.len() > MAX_VALUE_BYTES || !is_header_value(value) {
                return bad(format!(
                    "the value for header {name:?} is not a valid header value"
                ));
            }
        }
        for name in removes {
            if !header_name_ok(name) {
                return bad(format!("{name:?} is not a header name Envoy can remove"));
            }
        }
    }
    if output.conditions.len() > MAX_CONDITIONS {
        return bad(format!("more than {MAX_CONDITIONS} conditions"));
    }
    for condition in &output.conditions {
        if condition.message.len() > MAX_MESSAGE_BYTES {
            return bad(format!(
                "a condition message over {MAX_MESSAGE_BYTES} bytes"
            ));
        }
        if let Some(vhost) = &condition.vhost
            && !fqdns.contains(vhost)
        {
            return bad(format!(
                "a condition names vhost {vhost:?}, which does not exist"
            ));
        }
    }
    Ok(())
}

/// Applies validated changes to every route of each named vhost (HTTP and HTTPS).
pub fn apply(changes: &[Change], ir: &mut Ir) {
    for change in changes {
        for vhost in ir.virtual_hosts_of_mut(&change.vhost) {
            for route in vhost.routes.values_mut() {
                let policy = route.policy.get_or_insert_with(Default::default);
                for (name, value) in &change.request_headers_set {
                    policy
                        .request_headers
                        .set
                        .insert(name.to_ascii_lowercase(), escape_header_value(value));
                }
                for (name, value) in &change.response_headers_set {
                    policy
                        .response_headers
                        .set
                        .insert(name.to_ascii_lowercase(), escape_header_value(value));
                }
                for name in &change.request_headers_remove {
                    policy
                        .request_headers
                        .remove
                        .push(name.to_ascii_lowercase());
                }
                for name in &change.response_headers_remove {
                    policy
                        .response_headers
                        .remove
                        .push(name.to_ascii_lowercase());
                }
            }
        }
    }
}
