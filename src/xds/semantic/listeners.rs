//! Envoy's rules for listeners, their filter chains and HTTP connection managers.

use super::*;

impl Rules {
    // Listeners (source/common/listener_manager/listener_impl.cc,
    // filter_chain_manager_impl.cc, config/utility.cc).

    pub(super) fn listener(&mut self, listener: &Listener) {
        let path = format!("Listener({})", listener.name);
        let internal = listener.listener_specifier.is_some();
        if !internal
            && listener
                .address
                .as_ref()
                .and_then(|a| a.address.as_ref())
                .is_none()
        {
            self.fail(&path, "listener.address", "address is necessary");
        }
        if let Some(address) = &listener.address {
            self.ip_address(
                &format!("{path}.address"),
                address,
                "listener.address",
                false,
            );
        }
        if !self.entries_only {
            self.some_chain(
                &path,
                listener.address.as_ref(),
                listener.filter_chains.len(),
                listener.default_filter_chain.is_some(),
            );
            self.distinct_chains(
                &path,
                listener
                    .filter_chains
                    .iter()
                    .map(|c| (c.name.as_str(), c.filter_chain_match.as_ref())),
            );
        }
        for (i, chain) in listener.filter_chains.iter().enumerate() {
            let at = format!("{path}.filter_chains[{i}]");
            let shown = if chain.name.is_empty() {
                at.clone()
            } else {
                chain.name.clone()
            };
            let m = chain.filter_chain_match.clone().unwrap_or_default();
            if !m.address_suffix.is_empty() || m.suffix_len.is_some() {
                self.fail(
                    &at,
                    "listener.unimplemented-match-fields",
                    format!("filter chain '{shown}' contains unimplemented fields"),
                );
            }
            for name in &m.server_names {
                // Only `*.suffix`: one star, leading, followed by a dot.
                let wildcard = name
                    .strip_prefix("*.")
                    .is_some_and(|rest| !rest.contains('*'));
                let partial = name.contains('*') && !wildcard;
                if partial {
                    self.fail(
                        &at,
                        "listener.partial-wildcard-server-name",
                        format!("partial wildcards are not supported in \"server_names\" ({name})"),
                    );
                }
            }
            self.network_filters(&at, &chain.filters);
        }
        if let Some(chain) = &listener.default_filter_chain {
            self.network_filters(&format!("{path}.default_filter_chain"), &chain.filters);
        }
    }

    /// A TCP listener needs a filter chain (or a default one).
    pub(super) fn some_chain(
        &mut self,
        path: &str,
        address: Option<&Address>,
        chains: usize,
        default: bool,
    ) {
        let udp = address
            .and_then(|a| match &a.address {
                Some(address::Address::SocketAddress(s)) => Some(s.protocol == 1),
                _ => None,
            })
            .unwrap_or(false);
        if !udp && chains == 0 && !default {
            self.fail(path, "listener.filter-chains", "no filter chains specified");
        }
    }

    /// No two filter chains with the same match, or matches overlapping once their
    /// repeated conditions are expanded.
    pub(super) fn distinct_chains<'a>(
        &mut self,
        path: &str,
        chains: impl Iterator<Item = (&'a str, Option<&'a FilterChainMatch>)>,
    ) {
        let mut matches: BTreeMap<Vec<u8>, String> = BTreeMap::new();
        let mut leaves: BTreeMap<String, String> = BTreeMap::new();
        for (i, (name, m)) in chains.enumerate() {
            let at = format!("{path}.filter_chains[{i}]");
            let shown = if name.is_empty() {
                at.clone()
            } else {
                name.to_string()
            };
            let m = m.cloned().unwrap_or_default();
            if let Some(first) = matches.insert(m.encode_to_vec(), shown.clone()) {
                self.fail(
                    &at,
                    "listener.duplicate-filter-chain-match",
                    format!(
                        "filter chain '{shown}' has the same matching rules defined as '{first}'"
                    ),
                );
            } else {
                for leaf in expand(&m) {
                    if let Some(first) = leaves.insert(leaf, shown.clone()) {
                        self.fail(
                            &at,
                            "listener.duplicate-filter-chain-match",
                            format!(
                                "multiple filter chains with overlapping matching rules are defined ('{first}' and '{shown}')"
                            ),
                        );
                        break;
                    }
                }
            }
        }
    }

    /// The last network filter terminal, no terminal filter before it; each HTTP
    /// connection manager checked in turn.
    pub(super) fn network_filters(
        &mut self,
        path: &str,
        filters: &[envoy_types::pb::envoy::config::listener::v3::Filter],
    ) {
        let typed = |f: &envoy_types::pb::envoy::config::listener::v3::Filter| match &f.config_type
        {
            Some(filter::ConfigType::TypedConfig(any)) => Some(any.clone()),
            _ => None,
        };
        for (i, f) in filters.iter().enumerate() {
            let at = format!("{path}.filters[{i}]");
            let Some(any) = typed(f) else { continue };
            let terminal = TERMINAL_NETWORK.contains(&type_name(&any));
            let last = i + 1 == filters.len();
            if terminal && !last {
                self.fail(
                    &at,
                    "listener.terminal-filter",
                    format!("terminal filter named {} must be the last filter in a network filter chain", f.name),
                );
            }
            if last && NON_TERMINAL_NETWORK.contains(&type_name(&any)) {
                self.fail(
                    &at,
                    "listener.terminal-filter",
                    format!(
                        "non-terminal filter named {} is the last filter in a network filter chain",
                        f.name
                    ),
                );
            }
            if type_name(&any) == HCM
                && let Ok(hcm) = HttpConnectionManager::decode(any.value.as_slice())
            {
                self.connection_manager(&at, &hcm);
            }
        }
    }

    pub(super) fn connection_manager(&mut self, path: &str, hcm: &HttpConnectionManager) {
        let n = hcm.http_filters.len();
        for (i, f) in hcm.http_filters.iter().enumerate() {
            let at = format!("{path}.http_filters[{i}]");
            let router = match &f.config_type {
                Some(http_filter::ConfigType::TypedConfig(any)) => type_name(any) == ROUTER,
                _ => false,
            };
            if router && i + 1 != n {
                self.fail(
                    &at,
                    "hcm.terminal-http-filter",
                    format!(
                        "terminal filter named {} must be the last filter in a http filter chain",
                        f.name
                    ),
                );
            }
            if i + 1 == n {
                if !router && matches!(f.config_type, Some(http_filter::ConfigType::TypedConfig(_)))
                {
                    self.fail(
                        &at,
                        "hcm.terminal-http-filter",
                        format!("non-terminal filter named {} is the last filter in a http filter chain", f.name),
                    );
                }
                if f.disabled {
                    self.fail(
                        &at,
                        "hcm.terminal-http-filter",
                        format!("the last (terminal) filter ({}) in the chain cannot be disabled by default", f.name),
                    );
                }
            }
        }
        if hcm.strip_matching_host_port
            && matches!(
                hcm.strip_port_mode,
                Some(http_connection_manager::StripPortMode::StripAnyHostPort(
                    true
                ))
            )
        {
            self.fail(
                path,
                "hcm.strip-port",
                "only one of strip_matching_host_port or strip_any_host_port can be set",
            );
        }
        self.duplicate_upgrades(
            &format!("{path}.upgrade_configs"),
            "hcm.duplicate-upgrade",
            hcm.upgrade_configs.iter().map(|u| u.upgrade_type.as_str()),
        );
        if let Some(http_connection_manager::RouteSpecifier::RouteConfig(table)) =
            &hcm.route_specifier
        {
            self.route_table(table, &format!("{path}.route_config."));
        }
    }
}
