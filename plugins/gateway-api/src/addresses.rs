//! Gateways' own addresses. Without `addressPool` every Gateway is served on the Envoy
//! fleet's shared listeners (Contour's container ports, the Envoy Service's address).
//! With it, each Gateway gets one IP address of the pool for itself: the one its
//! `spec.addresses` asks for, or one chosen for it (an address without a value, or none
//! at all). Its listeners are Envoy listeners of their own on that address and at their
//! own ports, and `status.addresses` says where. Addresses are chosen oldest Gateway
//! first, each starting from a place in the pool its name hashes to, so a Gateway keeps
//! its address while others come and go.

use std::collections::BTreeMap;
use std::net::IpAddr;

use isobar_sdk::ObjectKey;

/// An address type Isobar serves (`IPAddress`, the default); `Hostname` is a type the
/// spec defines that Isobar cannot serve as a Gateway's own.
const IP_ADDRESS: &str = "IPAddress";
const HOSTNAME: &str = "Hostname";

/// IP ranges a Gateway's own address comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pool {
    /// First address and size of each range.
    ranges: Vec<(IpAddr, u128)>,
}

impl Pool {
    /// Reads `address` and `address/prefix` entries (IPv4 or IPv6).
    pub fn parse(entries: &[String]) -> Result<Pool, String> {
        let mut ranges = Vec::new();
        for entry in entries {
            let (ip, bits) = match entry.split_once('/') {
                Some((ip, bits)) => (ip, Some(bits)),
                None => (entry.as_str(), None),
            };
            let ip: IpAddr = ip
                .trim()
                .parse()
                .map_err(|e| format!("addressPool entry {entry:?}: {e}"))?;
            let width: u32 = if ip.is_ipv4() { 32 } else { 128 };
            let bits = match bits {
                None => width,
                Some(b) => b
                    .trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|b| *b <= width)
                    .ok_or_else(|| format!("addressPool entry {entry:?}: bad prefix length"))?,
            };
            let host_bits = width - bits;
            let size = if host_bits >= 128 {
                u128::MAX
            } else {
                1u128 << host_bits
            };
            let mask = if host_bits >= 128 {
                0
            } else {
                !((1u128 << host_bits) - 1)
            };
            let base = from_u128(ip, to_u128(ip) & mask);
            ranges.push((base, size));
        }
        Ok(Pool { ranges })
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        self.ranges.iter().any(|(base, size)| {
            base.is_ipv4() == ip.is_ipv4()
                && to_u128(ip)
                    .checked_sub(to_u128(*base))
                    .is_some_and(|offset| offset < *size)
        })
    }

    /// How many addresses it holds (at most `u128::MAX`).
    fn len(&self) -> u128 {
        self.ranges
            .iter()
            .fold(0u128, |n, (_, size)| n.saturating_add(*size))
    }

    /// Its `i`th address, counting range by range.
    fn nth(&self, mut i: u128) -> Option<IpAddr> {
        for (base, size) in &self.ranges {
            if i < *size {
                return Some(from_u128(*base, to_u128(*base) + i));
            }
            i -= size;
        }
        None
    }
}

fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// `value` as an address of `like`'s family.
fn from_u128(like: IpAddr, value: u128) -> IpAddr {
    match like {
        IpAddr::V4(_) => IpAddr::V4(u32::try_from(value).unwrap_or(u32::MAX).into()),
        IpAddr::V6(_) => IpAddr::V6(value.into()),
    }
}

/// Where a Gateway is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// On the fleet's shared listeners.
    Shared,
    /// On listeners of its own at this address.
    Own(IpAddr),
    /// Nowhere: an address it asks for is of a type Isobar does not serve
    /// (`Accepted` False, `UnsupportedAddress`).
    Unsupported(String),
    /// Nowhere yet: the address it asks for cannot be its own (`Programmed` False,
    /// `AddressNotUsable`).
    NotUsable(String),
}

/// One address of a Gateway's `spec.addresses`: its type (`None`: `IPAddress`) and
/// value (`None`: any).
pub struct Asked<'a> {
    pub type_: Option<&'a str>,
    pub value: Option<&'a str>,
}

/// Hands out a pool's addresses to Gateways, oldest first.
pub struct Assigner<'p> {
    pool: &'p Pool,
    taken: BTreeMap<IpAddr, ObjectKey>,
}

impl<'p> Assigner<'p> {
    pub fn new(pool: &'p Pool) -> Assigner<'p> {
        Assigner {
            pool,
            taken: BTreeMap::new(),
        }
    }

    /// Where the Gateway `key` asking for `asked` is served.
    pub fn place(&mut self, key: &ObjectKey, asked: &[Asked<'_>]) -> Placement {
        if let Some(bad) = asked
            .iter()
            .find(|a| !matches!(a.type_.unwrap_or(IP_ADDRESS), IP_ADDRESS | HOSTNAME))
        {
            return Placement::Unsupported(format!(
                "address type {:?} is not supported",
                bad.type_.unwrap_or_default()
            ));
        }
        if let Some(bad) = asked.iter().find(|a| {
            a.type_.unwrap_or(IP_ADDRESS) == IP_ADDRESS
                && a.value.is_some_and(|v| v.parse::<IpAddr>().is_err())
        }) {
            return Placement::Unsupported(format!(
                "address {:?} is not an IP address",
                bad.value.unwrap_or_default()
            ));
        }
        if self.pool.is_empty() {
            return Placement::Shared;
        }
        if asked.len() > 1 {
            return Placement::NotUsable(
                "a Gateway has one address of its own; it asks for several".to_string(),
            );
        }
        match asked.first() {
            Some(a) if a.type_ == Some(HOSTNAME) => Placement::NotUsable(format!(
                "Hostname address {:?}: a Gateway's own address is an IP address",
                a.value.unwrap_or_default()
            )),
            Some(Asked {
                value: Some(value), ..
            }) => {
                let Ok(ip) = value.parse::<IpAddr>() else {
                    return Placement::NotUsable(format!("{value:?} is not an IP address"));
                };
                if !self.pool.contains(ip) {
                    return Placement::NotUsable(format!("{ip} is not in the address pool"));
                }
                if let Some(owner) = self.taken.get(&ip) {
                    return Placement::NotUsable(format!(
                        "{ip} is Gateway {}/{}'s",
                        owner.namespace, owner.name
                    ));
                }
                self.taken.insert(ip, key.clone());
                Placement::Own(ip)
            }
            _ => self.choose(key),
        }
    }

    /// A free address of the pool for `key`: the first free one from where its name
    /// hashes to.
    fn choose(&mut self, key: &ObjectKey) -> Placement {
        let len = self.pool.len();
        let start = u128::from(fnv(&format!("{}/{}", key.namespace, key.name))) % len.max(1);
        // A pool larger than the Gateways (the normal case) has a free address within
        // as many tries as there are Gateways holding one.
        let tries = len.min(self.taken.len() as u128 + 1);
        for i in 0..tries {
            let Some(ip) = self.pool.nth((start + i) % len) else {
                break;
            };
            if let std::collections::btree_map::Entry::Vacant(free) = self.taken.entry(ip) {
                free.insert(key.clone());
                return Placement::Own(ip);
            }
        }
        Placement::NotUsable("the address pool has no free address".to_string())
    }
}

/// FNV-1a of `text`: a hash that is the same on every build and machine.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests;
