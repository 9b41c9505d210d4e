//! The Isobar plugin SDK: the object model the providers fill, the plugin traits
//! (`Source`, `Filter`, `Processor`), the registry they join through `inventory`, the
//! conditions they raise, and the IR they produce.
//!
//! This crate knows neither tokio, tonic nor a Kubernetes client: plugins are plain,
//! synchronous code over borrowed data.

pub mod api;
pub mod condition;
pub mod headers;
pub mod host;
pub mod ir;
pub mod kind;
pub mod names;
pub mod object;
pub mod plugin;
pub mod policy;
pub mod regex;
pub mod resolve;
pub mod secret;
pub mod small_set;
pub mod status;
pub mod telemetry;

pub use condition::{
    Condition, ConditionType, CurrentStatus, GatewayStatus, ObjectStatus, ParentRef, Reason,
    SECRET_NOT_FOUND, StatusReport, SubCondition,
};
pub use ir::Ir;
pub use kind::{DynamicKinds, Kind, KindId, KindInfo, Resource};
pub use object::{Object, ObjectKey, Objects};
pub use plugin::{BuildContext, Claim, Filter, PluginKind, PluginRegistration, Processor, Source};
pub use small_set::SmallSet;
pub use status::StatusShape;

pub use inventory;
pub use schemars;
